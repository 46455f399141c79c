#!/usr/bin/python3
"""This file contains the crash benchmark (issue 16 target: "0 acknowledged tells lost over
100 kill -9 cycles under load; restart to /healthz in under 1 s whatever the database size").

  bench/crash/run.py [--cycles 100] [--workers 8] [--studies 4] [--engine random]
                     [--kill-after 0.2:1.5] [--max-seconds 1800] [--seed 1]
                     [--daemon build/kbanditd] [--dir DIR]

One daemon database, CYCLES times: WORKERS threads ask (count 1, 2, 4 or 8) and tell on
STUDIES box studies (4 float parameters), single tells for one trial and batch tells for
more, each keeping every tell that was answered 200 (a batch item: its own status 200)
with the value sent; the daemon is kill -9ed at a random moment (uniform in KILL_AFTER
seconds after the load started), then restarted on the same database; the time from the
spawn to the first /healthz answer is measured; every tell acknowledged in this cycle is
read back through GET .../trials (state completed, the same value, bit for bit: the
daemon prints reals as the shortest decimal that reads back to the same double). After
the last cycle every tell acknowledged in any cycle is read back again and
`PRAGMA integrity_check` runs on the database.

Prints one JSON line per cycle and a summary line (lost tells, restart-time quantiles,
tells per cycle, how many were acknowledged by batch tells). Exits 1 if a tell was lost or changed. Loopback only; stops after CYCLES
cycles or MAX_SECONDS, whichever comes first. Python 3 standard library only; nothing is
written outside DIR (a new temporary directory by default).
"""
import argparse
import http.client
import json
import random
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import kbdaemon  # noqa: E402 - the shared daemon launcher, found through the line above
COUNTS = (1, 1, 2, 4, 8)  # ask sizes: half single tells, half batch tells
# The trials a killed cycle's workers held are never told: their leases expire them, so
# that an engine whose batch waits for every pending point (bbkb, gp-bucb) hands out
# points again within a cycle or two (an ask it answers with no trial is retried).
LEASE_SECONDS = 2


class Api:
    """One keep-alive HTTP/1.1 connection; call() raises OSError when the daemon is gone."""

    def __init__(self, port, timeout=60):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def call(self, method, path, body=None):
        self.c.request(method, path, body=None if body is None else json.dumps(body),
                       headers={"Content-Type": "application/json"})
        r = self.c.getresponse()
        data = r.read()
        return r.status, (json.loads(data) if data else None)

    def close(self):
        self.c.close()


class Daemon:
    def __init__(self, binary, db, logdir):
        self.binary, self.db, self.logdir = binary, db, Path(logdir)
        self.proc, self.port, self.starts = None, None, 0

    def start(self):
        """Spawns the daemon; returns seconds from the spawn to the first /healthz 200."""
        log = self.logdir / f"stderr.{self.starts}.log"
        self.starts += 1
        t0 = time.monotonic()
        self.proc, self.port = kbdaemon.spawn(self.binary, self.db, log)
        while True:
            try:
                api = Api(self.port, timeout=10)
                status, _ = api.call("GET", "/healthz")
                api.close()
                if status == 200:
                    return time.monotonic() - t0
            except OSError:
                pass
            if time.monotonic() - t0 > 60:
                sys.exit("no /healthz answer within 60 s")
            time.sleep(0.001)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


class Load:
    """Workers asking and telling until the daemon dies; acked[(study, trial)] = value."""

    def __init__(self, port, sids, workers, rng_seed):
        self.port, self.sids = port, sids
        self.acked, self.errors, self.lock = {}, [], threading.Lock()
        self.in_batches = 0  # of the acked tells, those acknowledged by a batch tell
        self.threads = [threading.Thread(target=self.worker, args=(i, rng_seed + i))
                        for i in range(workers)]

    def worker(self, i, seed):
        rng = random.Random(seed)
        api = Api(self.port)
        try:
            while True:
                sid = rng.choice(self.sids)
                status, res = api.call("POST", f"/v1/studies/{sid}/ask",
                                       {"worker": f"w{i}", "count": rng.choice(COUNTS)})
                if status != 200:
                    raise RuntimeError(f"ask: {status} {res}")
                if not res["trials"]:  # a model engine's batch waits for feedback
                    time.sleep(0.005)
                    continue
                told = {t["id"]: rng.uniform(-10, 10) for t in res["trials"]}
                self.tell(api, sid, told)
        except OSError:
            pass  # the daemon was killed: a tell in flight is neither acked nor counted
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            with self.lock:
                self.errors.append(repr(e))
        finally:
            api.close()

    def tell(self, api, sid, told):
        if len(told) == 1:
            ((tid, v),) = told.items()
            status, res = api.call("POST", f"/v1/studies/{sid}/trials/{tid}/tell", {"value": v})
            if status != 200:
                raise RuntimeError(f"tell: {status} {res}")
            with self.lock:
                self.acked[(sid, tid)] = v
            return
        status, res = api.call("POST", f"/v1/studies/{sid}/tell",
                               {"results": [{"trial_id": t, "value": v} for t, v in told.items()]})
        if status != 200:
            raise RuntimeError(f"batch tell: {status} {res}")
        for item in res["results"]:
            if item["status"] != 200:
                raise RuntimeError(f"batch tell item: {item}")
            with self.lock:
                self.acked[(sid, item["trial_id"])] = told[item["trial_id"]]
                self.in_batches += 1

    def run_until(self, seconds):
        for t in self.threads:
            t.start()
        time.sleep(seconds)


def stored_values(api, sid, after):
    """{trial id: (state, value)} of the study's trials with id > after, page by page."""
    out, cursor = {}, after
    while cursor is not None:
        status, res = api.call("GET", f"/v1/studies/{sid}/trials?limit=10000&cursor={cursor}")
        if status != 200:
            raise RuntimeError(f"list trials of {sid}: {status} {res}")
        out.update({t["id"]: (t["state"], t["value"]) for t in res["trials"]})
        cursor = res["next_cursor"]
    return out


def missing(port, acked):
    """The acknowledged tells that are not stored as completed with the value sent."""
    api = Api(port)
    try:
        bad = []
        for sid in sorted({s for s, _ in acked}):
            mine = {t: v for (s, t), v in acked.items() if s == sid}
            stored = stored_values(api, sid, min(mine) - 1)
            bad += [(sid, t, v, stored.get(t)) for t, v in mine.items()
                    if stored.get(t) != ("completed", v)]
        return bad
    finally:
        api.close()


def create_studies(port, n, engine):
    api = Api(port)
    space = {"type": "box", "params": [{"name": f"p{i}", "type": "float", "low": 0, "high": 1}
                                       for i in range(4)]}
    sids = []
    for k in range(n):
        status, res = api.call("POST", "/v1/studies", {
            "name": f"crash-{k}", "space": space, "lease_seconds": LEASE_SECONDS,
            "engine": {"name": engine, "settings": {"seed": k + 1}}})
        if status != 201:
            sys.exit(f"create study: {status} {res}")
        sids.append(res["id"])
    api.close()
    return sids


def quantile(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cycles", type=int, default=100)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--studies", type=int, default=4)
    p.add_argument("--engine", default="random")
    p.add_argument("--kill-after", default="0.2:1.5", help="LOW:HIGH seconds of load per cycle")
    p.add_argument("--max-seconds", type=float, default=1800)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--daemon", default=str(REPO / "build" / "kbanditd"))
    p.add_argument("--dir", default=None)
    args = p.parse_args()
    low, high = (float(v) for v in args.kill_after.split(":"))
    work = Path(args.dir or tempfile.mkdtemp(prefix="kb-crash-"))
    work.mkdir(parents=True, exist_ok=True)
    db = str(work / "crash.db")
    rng = random.Random(args.seed)
    d = Daemon(args.daemon, db, work)
    t_start = time.monotonic()
    d.start()
    sids = create_studies(d.port, args.studies, args.engine)
    all_acked, restarts, per_cycle, lost, in_batches = {}, [], [], [], 0
    for cycle in range(args.cycles):
        if time.monotonic() - t_start > args.max_seconds:
            break
        load = Load(d.port, sids, args.workers, args.seed * 1000 + cycle * args.workers)
        load.run_until(rng.uniform(low, high))
        d.kill9()
        for t in load.threads:
            t.join(60)
        if load.errors or any(t.is_alive() for t in load.threads):
            sys.exit(f"cycle {cycle}: worker errors {load.errors[:3]}")
        restart_s = d.start()
        bad = missing(d.port, load.acked) if load.acked else []
        all_acked |= load.acked
        restarts.append(restart_s)
        per_cycle.append(len(load.acked))
        in_batches += load.in_batches
        lost += bad
        print(json.dumps({"cycle": cycle, "acked_tells": len(load.acked), "lost": len(bad),
                          "restart_to_healthz_s": round(restart_s, 4),
                          "db_bytes": sum(Path(db + s).stat().st_size for s in ("", "-wal")
                                          if Path(db + s).exists())}), flush=True)
    final_bad = missing(d.port, all_acked) if all_acked else []
    d.kill9()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    integrity = con.execute("PRAGMA integrity_check").fetchall()
    con.close()
    print(json.dumps({
        "cycles": len(restarts), "acked_tells": len(all_acked), "acked_in_batches": in_batches,
        "lost_at_restart": len(lost), "lost_at_end": len(final_bad), "integrity": integrity[0][0],
        "tells_per_cycle": {"min": min(per_cycle, default=0), "median": quantile(per_cycle, 0.5) if per_cycle else 0,
                            "max": max(per_cycle, default=0)},
        "restart_to_healthz_s": {"min": round(min(restarts), 4), "p50": round(quantile(restarts, 0.5), 4),
                                 "p90": round(quantile(restarts, 0.9), 4),
                                 "max": round(max(restarts), 4)} if restarts else None,
        "seconds": round(time.monotonic() - t_start, 1), "dir": str(work)}), flush=True)
    if lost or final_bad or integrity != [("ok",)]:
        print(json.dumps({"lost": [list(map(str, b)) for b in (lost + final_bad)[:20]]}))
        sys.exit(1)


if __name__ == "__main__":
    main()
