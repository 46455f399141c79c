#!/usr/bin/python3
"""This file summarizes bench/finite_grid.sh's runs (JSON lines on stdin): per engine and
problem, the median regret ratio over seeds at defaults (fitted hyperparameters), the best
setting of the hand-tuning grid (fixed lengthscale x width) by the same median, and their
quotient (issue 12's target: default <= 1.2 x best)."""
import json
import statistics
import sys


def main():
    rows = [json.loads(line) for line in sys.stdin if line.strip()]
    cells = {}
    for r in rows:
        cells.setdefault((r["engine"], r["problem"]), {}).setdefault(r["setting"], []).append(
            r["regret_ratio"])
    print("| engine | problem | default (median of seeds) | best grid setting | its median "
          "| default / best |")
    print("|---|---|---|---|---|---|")
    for (engine, problem), settings in sorted(cells.items()):
        med = {s: statistics.median(v) for s, v in settings.items()}
        grid = {s: m for s, m in med.items() if s != "default"}
        best = min(grid, key=grid.get)
        d = med.get("default")
        print(f"| {engine} | {problem} | {d:.3f} | {best} | {grid[best]:.3f} | "
              f"{d / grid[best]:.2f} |")


if __name__ == "__main__":
    main()
