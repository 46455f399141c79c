#!/usr/bin/python3
"""This file compares two sets of bench/quality/run.py results run by run: the same
function, budget, workers, noise and seed in both files form a pair, and each pair gives
the log10 ratio of the simple regrets (B over A; below zero: B found the better point).
The engine is not part of the pair, so kbandit's runs in one file can be set against
Optuna's in the other; within one file each key must appear once (--engine picks one
engine's runs out of a file that holds several; a rerun appended to a file is refused).

    bench/quality/compare.py A.jsonl B.jsonl [--engine default] [--floor 1e-9]
                             [--metric simple_regret | recommended_regret]

--metric recommended_regret pairs the regrets of the points the tools recommend (the
trial with the best told value) instead of the best true value among the told points:
under --noise only the former is what a user gets, since the latter needs the noiseless f.

Why not medians: a lockstep run is a deterministic but chaotic function of its seed, so
two builds that differ anywhere (one design point, one prior) land in different basins on
many seeds, and the median of 5 or 10 seeds moves by 2x from that alone (docs/BENCHMARKS.md,
sixteenth session: Styblinski-Tang-8's median 52.8 -> 33.6 over seeds 1-10 became 36.9 ->
40.9 over seeds 1-30). Pairing by seed and averaging the log ratio uses every run, and a
bootstrap over the pairs says how far that mean could move by the luck of the seeds.

Per function and budget (and over all pairs at the end) it prints: the pairs, how many B
won / lost / tied (|log10 ratio| < 0.02), the mean log10 ratio, its 90% percentile
bootstrap interval (2,000 resamples of the pairs, seeded: the output is reproducible), and
a verdict: "B better" or "B worse" when the interval excludes 0, else "undecided". Regrets
below --floor count as the floor (a run that reached the optimum to rounding). Runs
without a partner in the other file are counted and left out. A line that is not a
result, a regret that is not a finite number, or a repeated key stops it, naming the line.
"""
import argparse
import collections
import json
import math
import random
import sys

TIE = 0.02
RESAMPLES = 2000


def load(path, engine, metric="simple_regret"):
    """{(function, budget, workers, noise, seed): the metric} for one engine."""
    runs, first = {}, {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                key = (r["function"], r["budget"], r["workers"], r.get("noise", 0.0), r["seed"])
                regret = float(r[metric])
            except (ValueError, KeyError, TypeError) as e:
                raise SystemExit(f"{path}:{n}: not a run.py result line ({e})")
            if engine is not None and r.get("engine") != engine:
                continue
            if not math.isfinite(regret):
                raise SystemExit(f"{path}:{n}: {metric} is {regret}")
            if key in runs:
                raise SystemExit(f"{path}:{n}: the run of line {first[key]} again (same "
                                 "function, budget, workers, noise, seed); keep one, or "
                                 "choose an engine with --engine")
            runs[key], first[key] = regret, n
    return runs


def pairs(a, b, floor):
    """{(function, workers, budget, noise): [log10 ratio per seed]} and the unpaired count."""
    groups = collections.OrderedDict()
    for key in sorted(a, key=str):
        if key in b:
            fn, budget, workers, noise, _ = key
            ratio = math.log10(max(b[key], floor) / max(a[key], floor))
            groups.setdefault((fn, workers, budget, noise), []).append(ratio)
    unpaired = len(set(a) ^ set(b))
    return groups, unpaired


def interval(values, rng):
    """The 5th and 95th percentiles of the mean of `values` resampled with replacement."""
    n = len(values)
    means = sorted(sum(rng.choice(values) for _ in range(n)) / n for _ in range(RESAMPLES))
    return means[int(0.05 * RESAMPLES)], means[int(0.95 * RESAMPLES) - 1]


def row(name, ratios, rng):
    won = sum(r <= -TIE for r in ratios)
    lost = sum(r >= TIE for r in ratios)
    mean = sum(ratios) / len(ratios)
    lo, hi = interval(ratios, rng)
    verdict = "B better" if hi < 0 else "B worse" if lo > 0 else "undecided"
    return (f"| {name} | {len(ratios)} | {won} / {lost} / {len(ratios) - won - lost} "
            f"| {mean:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {verdict} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--engine", help="compare this engine's runs only (default: all)")
    ap.add_argument("--floor", type=float, default=1e-9)
    ap.add_argument("--metric", choices=["simple_regret", "recommended_regret"],
                    default="simple_regret")
    args = ap.parse_args()
    if not args.floor > 0:
        ap.error("--floor must be positive")
    groups, unpaired = pairs(load(args.a, args.engine, args.metric),
                             load(args.b, args.engine, args.metric), args.floor)
    if not groups:
        sys.exit("no run of one file has a partner (same function, budget, noise, seed) "
                 "in the other")
    rng = random.Random(1)
    print("| function (W x T/W, noise) | pairs | B won / lost / tied | mean log10(B/A) "
          "| 90% interval | verdict |")
    print("|---|---|---|---|---|---|")
    everything = []
    for (fn, workers, budget, noise), ratios in groups.items():
        print(row(f"{fn} ({workers}x{budget // workers}, {noise:g})", ratios, rng))
        everything += ratios
    print(row("all", everything, rng))
    if unpaired:
        print(f"\n{unpaired} runs have no partner and were left out.")


if __name__ == "__main__":
    main()
