#!/usr/bin/env python3
"""This file times GET /v1/studies/{id}/best?by=model against the plain GET /best through a
real daemon: one worker asks and tells Hartmann-6 (bbkb, noise sd 0.1, minimize) and, at
100, 300 and 1,000 told trials, times five model recommendations and one plain one.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/quality/best_cost.py [build/kbanditd]
"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(api, path):
    t0 = time.perf_counter()
    api.call("GET", path)
    return (time.perf_counter() - t0) * 1e3


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "kbanditd")
    daemon = run.Daemon(path)
    try:
        api = run.Http(daemon.port)
        fn = run.FUNCTIONS["hartmann6"]
        sid = api.call("POST", "/v1/studies", {
            "name": "best-cost", "space": {"type": "box", "params": fn["params"]},
            "engine": {"name": "bbkb", "settings": {"seed": 1}}, "direction": "minimize"})["id"]
        rng = random.Random(1)
        for i in range(1, 1001):
            t = api.call("POST", f"/v1/studies/{sid}/ask", {"worker": "w", "count": 1})["trials"][0]
            value = fn["f"](t["params"]) + 0.1 * rng.gauss(0.0, 1.0)
            api.call("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell", {"value": value})
            if i in (100, 300, 1000):
                model = sorted(timed(api, f"/v1/studies/{sid}/best?by=model") for _ in range(5))
                plain = timed(api, f"/v1/studies/{sid}/best")
                print(f"{i} told: by=model {model[0]:.2f} / {model[2]:.2f} ms (min / median of 5), "
                      f"by=value {plain:.2f} ms")
    finally:
        daemon.close()


if __name__ == "__main__":
    main()
