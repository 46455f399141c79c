#!/usr/bin/python3
"""This file contains the hostile-connections benchmark (issue 16 target: "with 5,000 hostile
connections open, a well-behaved client keeps its p99 under 50 ms").

  bench/hostile/run.py [--hostile 5000] [--per-address 200] [--seconds 20] [--trickle-s 10]
                       [--reconnect-every 20] [--daemon build/kbanditd] [-- DAEMON_ARGS...]

Starts kbanditd (its default flags unless DAEMON_ARGS follow `--`) on a new database in a
temporary directory, then a separate process (so that it does not share the GIL with the
measured client) opens HOSTILE connections from 127.0.0.2, 127.0.0.3, ... (PER_ADDRESS
from each: below the daemon's per-address cap, so that only the total cap and timeouts
hold them), in equal parts of three kinds: idle (connect, send nothing), slow headers
(a request line, then one header byte every TRICKLE_S seconds) and half-sent bodies
(headers with Content-Length 4096, then one body byte every TRICKLE_S seconds). Each one
the daemon closes is opened again at once, as an attacker would. Once they were all
opened, a well-behaved client on 127.0.0.1 (keep-alive, a new connection every
RECONNECT_EVERY round trips, as workers restarting do) runs ask/tell round trips on one
study for SECONDS seconds and times every request, a new connection's set-up included.
A request that fails (refused, closed, no answer within 5 s) is an error and its client
reconnects.

Prints one JSON line: requests, errors (by kind), latency p50/p99/max in ms, and what the
hostile process saw (connections open at the end, reopened after the daemon closed them).
Loopback only; everything stops after SECONDS plus the set-up. Raises RLIMIT_NOFILE to its
hard limit (the daemon inherits it). Python 3 standard library only.
"""
import argparse
import http.client
import json
import multiprocessing
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import kbdaemon  # noqa: E402 - the shared daemon launcher, found through the line above
KINDS = ("idle", "slow_headers", "half_body")
PREFIX = {"idle": b"",
          "slow_headers": b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
          "half_body": b"POST /v1/studies/1/ask HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       b"application/json\r\nContent-Length: 4096\r\n\r\n{"}
TRICKLE = {"idle": b"", "slow_headers": b"X", "half_body": b" "}


class Hostile:
    """Holds the hostile connections: one selector, non-blocking sockets, reopened when
    the daemon closes them."""

    def __init__(self, port, n, per_address, trickle_s):
        self.port, self.trickle_s = port, trickle_s
        self.sel = selectors.DefaultSelector()
        self.slots = [(f"127.0.0.{2 + i // per_address}", KINDS[i % len(KINDS)]) for i in range(n)]
        self.reopened = self.open_failures = 0

    def open(self, slot):
        addr, kind = self.slots[slot]
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((addr, 0))
            s.connect_ex(("127.0.0.1", self.port))
        except OSError:
            s.close()
            self.open_failures += 1
            return
        self.sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE,
                          {"slot": slot, "sent_prefix": False, "next": 0.0})

    def close(self, key):
        self.sel.unregister(key.fileobj)
        key.fileobj.close()

    def step(self, key, events, now):
        s, st = key.fileobj, key.data
        kind = self.slots[st["slot"]][1]
        if events & selectors.EVENT_READ:
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:  # closed by the daemon: come back at once
                self.close(key)
                self.reopened += 1
                self.open(st["slot"])
                return
        if events & selectors.EVENT_WRITE:
            if not st["sent_prefix"]:
                self.send(key, PREFIX[kind])
                st["sent_prefix"], st["next"] = True, now + self.trickle_s
                self.sel.modify(s, selectors.EVENT_READ, st)

    def send(self, key, data):
        if data:
            try:
                key.fileobj.send(data)
            except OSError:
                pass  # the read side sees the close

    def trickle(self, now):
        for key in list(self.sel.get_map().values()):
            st = key.data
            if st["sent_prefix"] and now >= st["next"]:
                self.send(key, TRICKLE[self.slots[st["slot"]][1]])
                st["next"] = now + self.trickle_s

    def run(self, ready, stop, stop_at, out):
        for slot in range(len(self.slots)):
            self.open(slot)
        ready.set()
        last_trickle = 0.0
        while time.monotonic() < stop_at and not stop.is_set():
            for key, events in self.sel.select(timeout=0.2):
                self.step(key, events, time.monotonic())
            now = time.monotonic()
            if now - last_trickle > 0.5:
                self.trickle(now)
                last_trickle = now
        out.put({"open_at_end": len(self.sel.get_map()), "reopened": self.reopened,
                 "open_failures": self.open_failures})


def hostile_main(port, n, per_address, trickle_s, ready, stop, stop_at, out):
    Hostile(port, n, per_address, trickle_s).run(ready, stop, stop_at, out)


def round_trip(conn, method, path, body):
    conn.request(method, path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{method} {path}: {r.status} {data[:200]!r}")
    return json.loads(data)


def good_client(port, sid, seconds, reconnect_every):
    """Ask/tell round trips; returns (latencies in ms, errors by kind)."""
    lat, errors, conn, used = [], {}, None, 0
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        if conn is None or used >= reconnect_every:
            if conn is not None:
                conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            used = 0
        t0 = time.monotonic()
        try:
            (t,) = round_trip(conn, "POST", f"/v1/studies/{sid}/ask", {"worker": "good"})["trials"]
            lat.append((time.monotonic() - t0) * 1e3)
            t0 = time.monotonic()
            round_trip(conn, "POST", f"/v1/studies/{sid}/trials/{t['id']}/tell",
                       {"value": -sum((v - 0.3) ** 2 for v in t["x"])})
            lat.append((time.monotonic() - t0) * 1e3)
            used += 1
        except (OSError, http.client.HTTPException, RuntimeError, ValueError) as e:
            kind = type(e).__name__
            errors[kind] = errors.get(kind, 0) + 1
            conn.close()
            conn = None
            time.sleep(0.01)
    if conn is not None:
        conn.close()
    return lat, errors


def pct(xs, q):
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2) if s else None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hostile", type=int, default=5000)
    p.add_argument("--per-address", type=int, default=200)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--trickle-s", type=float, default=10)
    p.add_argument("--reconnect-every", type=int, default=20)
    p.add_argument("--daemon", default=str(REPO / "build" / "kbanditd"))
    p.add_argument("daemon_args", nargs="*")
    args = p.parse_args()
    if args.hostile // args.per_address > 250:
        sys.exit("too many source addresses (127.0.0.2 .. 127.0.0.251 only)")
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < args.hostile + 1000:
        sys.exit(f"RLIMIT_NOFILE hard limit {hard} is below {args.hostile + 1000}")
    work = tempfile.mkdtemp(prefix="kb-hostile-")
    proc, port = kbdaemon.spawn(args.daemon, Path(work) / "h.db", Path(work) / "stderr.log",
                                args.daemon_args)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        space = {"type": "box", "params": [{"name": f"p{i}", "type": "float", "low": 0, "high": 1}
                                           for i in range(4)]}
        conn.request("POST", "/v1/studies", body=json.dumps(
            {"name": "good", "space": space, "engine": {"name": "random", "settings": {"seed": 1}}}),
            headers={"Content-Type": "application/json"})
        sid = json.loads(conn.getresponse().read())["id"]
        conn.close()
        ready, stop, out = multiprocessing.Event(), multiprocessing.Event(), multiprocessing.Queue()
        stop_at = time.monotonic() + 60 + args.seconds + 5
        h = multiprocessing.Process(target=hostile_main, args=(port, args.hostile, args.per_address,
                                                               args.trickle_s, ready, stop, stop_at, out))
        h.start()
        ready.wait(60)
        time.sleep(2)  # let the daemon accept (or refuse) the flood before measuring
        lat, errors = good_client(port, sid, args.seconds, args.reconnect_every)
        stop.set()
        hostile = out.get(timeout=120)
        h.join(30)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(json.dumps({"hostile": args.hostile, "daemon_args": args.daemon_args,
                      "requests": len(lat), "errors": errors, "p50_ms": pct(lat, 0.5),
                      "p99_ms": pct(lat, 0.99), "max_ms": pct(lat, 1.0),
                      "hostile_seen": hostile, "daemon_exit": proc.returncode}), flush=True)


if __name__ == "__main__":
    main()
