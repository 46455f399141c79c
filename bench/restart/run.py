#!/usr/bin/python3
"""This file contains the restart benchmark (issue 16 item 5): it builds a database through
a real kbanditd over HTTP, then measures restarts on it.

  bench/restart/run.py build DB [--studies 1000] [--trials 499] [--batch 64]
                                [--engine random] [--clients 4] [--daemon build/kbanditd]
      Creates STUDIES box studies (4 float parameters) and drives each through TRIALS
      trials with batch asks of BATCH and batch tells (2 events per trial), CLIENTS
      studies at a time, then kill -9s the daemon, so that no shutdown snapshot is written
      and each study replays the events since its last periodic snapshot (every 500).
  bench/restart/run.py measure DB [--runs 3] [--daemon build/kbanditd]
      Starts the daemon on DB (kill -9 after each run, so every run replays the same
      events) and prints one JSON line per run: seconds from spawn to the first /healthz
      answer and to `restoring` == 0, /healthz at the first answer, the daemon's own
      "studies registered" / "studies restored" times, and the replayed events per study
      (events - snapshot_seq of its "study restored" log line: sum and max).

Python 3 standard library only. Nothing is written outside DB and a temporary directory.
"""
import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def start(daemon, db, log):
    out = open(log, "wb")
    proc = subprocess.Popen([daemon, "--listen", "127.0.0.1:0", "--db", db],
                            stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    return proc


def log_lines(log):
    for raw in Path(log).read_text(errors="replace").splitlines():
        try:
            yield json.loads(raw)
        except ValueError:
            continue


def wait_port(proc, log, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in log_lines(log):
            if m.get("msg") == "listening":
                return m["port"]
        if proc.poll() is not None:
            sys.exit(f"kbanditd exited ({proc.returncode}):\n" + Path(log).read_text())
        time.sleep(0.001)
    sys.exit("kbanditd did not listen")


class Api:
    def __init__(self, port):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

    def call(self, method, path, body=None, expect=200):
        self.c.request(method, path, body=None if body is None else json.dumps(body),
                       headers={"Content-Type": "application/json"})
        r = self.c.getresponse()
        data = r.read()
        if r.status != expect:
            raise RuntimeError(f"{method} {path}: {r.status} {data[:300]!r}")
        return json.loads(data) if data else None


def toy(x):
    return -sum((v - 0.3) ** 2 for v in x)


def drive(port, sids, args, errors):
    api = Api(port)
    try:
        for sid in sids:
            done = 0
            while done < args.trials:
                res = api.call("POST", f"/v1/studies/{sid}/ask",
                               {"worker": "bench", "count": min(args.batch, args.trials - done)})
                items = [{"trial_id": t["id"], "value": toy(t["x"])} for t in res["trials"]]
                if not items:
                    raise RuntimeError(f"study {sid}: empty ask ({res['status']})")
                api.call("POST", f"/v1/studies/{sid}/tell", {"results": items})
                done += len(items)
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append(repr(e))


def build(args):
    if os.path.exists(args.db):
        sys.exit(f"{args.db} exists")
    log = Path(tempfile.mkdtemp()) / "build.log"
    proc = start(args.daemon, args.db, log)
    t0 = time.monotonic()
    try:
        port = wait_port(proc, log)
        api = Api(port)
        space = {"type": "box", "params": [{"name": f"p{i}", "type": "float", "low": 0, "high": 1}
                                           for i in range(4)]}
        sids = [api.call("POST", "/v1/studies", {"name": f"restart-{k}", "space": space,
                                                 "engine": {"name": args.engine, "settings": {"seed": k}}},
                         expect=201)["id"] for k in range(args.studies)]
        errors = []
        threads = [threading.Thread(target=drive, args=(port, sids[c::args.clients], args, errors))
                   for c in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            sys.exit("\n".join(errors[:5]))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    print(json.dumps({"built": args.db, "studies": args.studies, "trials": args.trials,
                      "events": 2 * args.studies * args.trials, "engine": args.engine,
                      "batch": args.batch, "seconds": round(time.monotonic() - t0, 1),
                      "db_bytes": sum(os.path.getsize(args.db + s) for s in ("", "-wal")
                                      if os.path.exists(args.db + s))}))


def first_healthz(port_file_log, proc, t0):
    """Seconds from spawn to the first /healthz answer, and that answer."""
    port = wait_port(proc, port_file_log)
    while True:
        try:
            api = Api(port)
            h = api.call("GET", "/healthz")
            return time.monotonic() - t0, h, api
        except (ConnectionError, OSError):
            time.sleep(0.001)


def measure_once(args, run):
    log = Path(tempfile.mkdtemp()) / f"run{run}.log"
    t0 = time.monotonic()
    proc = start(args.daemon, args.db, log)
    try:
        t_health, h, api = first_healthz(log, proc, t0)
        # A daemon from before issue 16 has no "studies": it restored before listening.
        while api.call("GET", "/healthz").get("studies", {}).get("restoring"):
            time.sleep(0.005)
        t_all = time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    replays, own = [], {}
    for m in log_lines(log):
        if m.get("msg") == "study restored":
            replays.append(m["events"] - m["snapshot_seq"])
        elif m.get("msg") in ("studies registered", "studies restored"):
            own[m["msg"].replace(" ", "_") + "_s"] = round(m["seconds"], 3)
    return {"run": run, "healthz_s": round(t_health, 3), "healthz": h.get("studies"),
            "all_restored_s": round(t_all, 2), **own, "studies": len(replays),
            "replayed_events": sum(replays), "max_replay": max(replays, default=0)}


def measure(args):
    for run in range(args.runs):
        print(json.dumps(measure_once(args, run)), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("db")
    b.add_argument("--studies", type=int, default=1000)
    b.add_argument("--trials", type=int, default=499)
    b.add_argument("--batch", type=int, default=64)
    b.add_argument("--engine", default="random")
    b.add_argument("--clients", type=int, default=4)
    m = sub.add_parser("measure")
    m.add_argument("db")
    m.add_argument("--runs", type=int, default=3)
    for s in (b, m):
        s.add_argument("--daemon", default=str(REPO / "build" / "kbanditd"))
    args = p.parse_args()
    (build if args.cmd == "build" else measure)(args)


if __name__ == "__main__":
    main()
