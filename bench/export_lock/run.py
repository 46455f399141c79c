#!/usr/bin/env python3
"""This file contains the benchmark of asks on a study while it is being exported (issue 15
item 1): before, the CSV export formatted every trial holding the study's mutex, so asks
waited behind it; now the trials are copied under the mutex and formatted after it.

It starts the daemon on a fresh database, creates a box study (4 floats and a categorical,
random engine), hands out --trials trials, then measures --asks sequential asks of one
trial while --exporters clients export the study as CSV back to back. Prints one line:
ask latency p50 / p99 / max and the exports' median time.

    bench/export_lock/run.py [--daemon build/kbanditd] [--trials 20000] [--asks 300]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time

import requests


def start(daemon, work):
    errf = os.path.join(work, "stderr")
    with open(errf, "w") as err:
        proc = subprocess.Popen([daemon, "--listen", "127.0.0.1:0", "--db",
                                 os.path.join(work, "db")], stdout=err, stderr=err,
                                env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with open(errf) as f:
            for line in f:
                if '"listening"' in line:
                    return proc, f"http://127.0.0.1:{json.loads(line)['port']}"
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("the daemon did not start")


def measure(base, args):
    params = [{"name": f"p{i}", "type": "float", "low": 0, "high": 1} for i in range(4)]
    params.append({"name": "c", "type": "categorical", "choices": ["a", "b", "c"]})
    doc = {"name": "export-lock", "space": {"type": "box", "params": params},
           "engine": {"name": "random", "settings": {"seed": 1}}}
    sid = requests.post(base + "/v1/studies", json=doc).json()["id"]
    for _ in range(args.trials // 1000):
        requests.post(f"{base}/v1/studies/{sid}/ask",
                      json={"worker": "w", "count": 1000}).raise_for_status()
    stop = threading.Event()
    exports = []

    def export():
        s = requests.Session()
        while not stop.is_set():
            t0 = time.perf_counter()
            s.get(f"{base}/v1/studies/{sid}/export?format=csv").raise_for_status()
            exports.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=export) for _ in range(args.exporters)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    s = requests.Session()
    lat = []
    for _ in range(args.asks):
        t0 = time.perf_counter()
        s.post(f"{base}/v1/studies/{sid}/ask", json={"worker": "m", "count": 1}).raise_for_status()
        lat.append(time.perf_counter() - t0)
    stop.set()
    for t in threads:
        t.join()
    lat.sort()
    ms = lambda q: 1e3 * lat[min(len(lat) - 1, int(len(lat) * q))]
    print(f"asks: p50 {ms(0.5):.1f} ms, p99 {ms(0.99):.1f} ms, max {1e3 * lat[-1]:.1f} ms; "
          f"exports: {len(exports)}, median {1e3 * statistics.median(exports):.0f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--daemon", default="build/kbanditd")
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--asks", type=int, default=300)
    ap.add_argument("--exporters", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kb-export-lock") as work:
        proc, base = start(args.daemon, work)
        try:
            measure(base, args)
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
