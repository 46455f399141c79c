#!/usr/bin/env python3
"""This file contains the benchmark of large warm starts: one POST of N observations to a
box study, then ask / tell / ask, wall seconds of each call through the daemon.

A user moving to kbandit brings the results of earlier runs; the exact engines (gp-ucb,
gp-bucb, gp-ts) used to append each observation to their Cholesky factors one level-2
row at a time inside the POST (18-23 s for 5,000 observations, fifty-fourth session); they
now take a run of observes as level-3 blocks at the next operation (fifty-fifth session).

The study is a 6-d box of floats in [0, 1], seed 1; the observations are uniform points
with value -|x - 0.3|^2 + N(0, 0.01^2), the same for every engine. Prints one line per
engine and N.

    bench/warm/run.py [--daemon build/kbanditd] [--engines bbkb,gp-ucb,gp-ts] [--n 1000,5000]
"""
import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "quality"))
import run as quality  # noqa: E402 - the quality suite's daemon and HTTP helpers

SPACE = {"type": "box", "params": [{"name": f"x{i}", "type": "float", "low": 0, "high": 1}
                                   for i in range(6)]}


def f(u):
    return -sum((v - 0.3) ** 2 for v in u)


def one(api, engine, n):
    rng = random.Random(n)
    sid = api.call("POST", "/v1/studies", {"name": f"{engine}-{n}", "space": SPACE,
                                           "engine": {"name": engine, "settings": {"seed": 1}}})["id"]
    obs = []
    for _ in range(n):
        u = [rng.random() for _ in range(6)]
        obs.append({"x": u, "value": f(u) + 0.01 * rng.gauss(0, 1)})
    times = []
    t0 = time.monotonic()
    api.call("POST", f"/v1/studies/{sid}/observations", {"observations": obs})
    times.append(time.monotonic() - t0)
    for k in range(2):
        t0 = time.monotonic()
        t = api.call("POST", f"/v1/studies/{sid}/ask", {"worker": "w", "count": 1})["trials"][0]
        times.append(time.monotonic() - t0)
        if k == 0:
            api.call("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell", {"value": f(t["x"])})
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--daemon", default="build/kbanditd")
    ap.add_argument("--engines", default="bbkb,gp-ucb,gp-bucb,gp-ts,sgp-ts")
    ap.add_argument("--n", default="1000,5000")
    a = ap.parse_args()
    d = quality.Daemon(a.daemon)
    try:
        api = quality.Http(d.port)
        for engine in a.engines.split(","):
            for n in map(int, a.n.split(",")):
                obs, ask1, ask2 = one(api, engine, n)
                print(f"{engine} N={n}: observe {obs:.2f} s, first ask {ask1:.2f} s, "
                      f"second ask {ask2:.2f} s", flush=True)
    finally:
        d.close()


if __name__ == "__main__":
    main()
