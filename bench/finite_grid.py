#!/usr/bin/python3
"""This file summarizes bench/finite_grid.sh's runs (JSON lines on stdin) in two tables, per
engine and problem, by regret ratio:

(a) Issue 12's target as stated: the median over all seeds at defaults (fitted
    hyperparameters) against the best setting of the hand-tuning grid (fixed lengthscale x
    width) by the same median, on the same seeds, and their quotient (target: <= 1.2).
(b) The same comparison with the winner's curse removed: the seeds are split into two halves
    (sorted, first and second half); the setting with the lowest median on one half is
    evaluated on the other half, against the defaults on that half, in both directions, and
    over all seeds with each half judged by the other half's pick (row "other half"). The
    minimum of many noisy medians is biased low; a hand-tuner picks a setting and then lives
    with it on new runs, which (b) measures.

Both tables give the worst (max over seeds) next to each median. A cell in (b) needs at least
two seeds and the same seeds for every setting (finite_grid.sh runs them so)."""
import json
import statistics
import sys


def load(lines):
    """(engine, problem) -> setting -> {seed: regret ratio}."""
    cells = {}
    for line in lines:
        if not line.strip():
            continue
        r = json.loads(line)
        cell = cells.setdefault((r["engine"], r["problem"]), {})
        cell.setdefault(r["setting"], {})[r["seed"]] = r["regret_ratio"]
    return cells


def summary(by_seed, seeds):
    """Median and worst of one setting's regret ratios over the given seeds."""
    v = [by_seed[s] for s in seeds]
    return statistics.median(v), max(v)


def best_setting(settings, seeds):
    """The grid setting (not "default") with the lowest median over the given seeds."""
    grid = [s for s in settings if s != "default"]
    return min(grid, key=lambda s: summary(settings[s], seeds)[0])


def issue_rows(cells):
    """Table (a): per cell, the seeds, the defaults' median and worst, the best grid setting
    picked on all seeds and its median and worst on the same seeds."""
    for (engine, problem), settings in sorted(cells.items()):
        seeds = sorted(settings["default"])
        best = best_setting(settings, seeds)
        yield (engine, problem, seeds, summary(settings["default"], seeds), best,
               summary(settings[best], seeds))


def held_out_rows(cells):
    """Table (b): per cell, one row per direction (the seeds picked on, the seeds judged on,
    the setting picked, the defaults' and the setting's median and worst on the judged
    seeds), then a row over all seeds, each judged by the pick made on the other half (the
    picks joined by " / ")."""
    for (engine, problem), settings in sorted(cells.items()):
        seeds = sorted(settings["default"])
        if len(seeds) < 2:
            continue
        half = len(seeds) // 2
        halves = (seeds[:half], seeds[half:])
        picks, judged = [], {}
        for pick, judge in (halves, halves[::-1]):
            chosen = best_setting(settings, pick)
            picks.append(chosen)
            judged.update({s: settings[chosen][s] for s in judge})
            yield (engine, problem, pick, judge, chosen, summary(settings["default"], judge),
                   summary(settings[chosen], judge))
        yield (engine, problem, seeds, seeds, " / ".join(picks),
               summary(settings["default"], seeds), summary(judged, seeds))


def print_tables(cells):
    print("(a) as issue 12 states it: the best grid setting picked and judged on the same seeds")
    print()
    print("| engine | problem | seeds | default: median / worst | best grid setting "
          "| its median / worst | default / best (medians) |")
    print("|---|---|---|---|---|---|---|")
    for engine, problem, seeds, (dm, dw), best, (bm, bw) in issue_rows(cells):
        print(f"| {engine} | {problem} | {len(seeds)} | {dm:.3f} / {dw:.3f} | {best} | "
              f"{bm:.3f} / {bw:.3f} | {dm / bm:.2f} |")
    print()
    print("(b) winner's curse removed: the setting picked on one half of the seeds, judged "
          "with the defaults on the other half")
    print()
    print("| engine | problem | picked on -> judged on | setting | default: median / worst "
          "| setting: median / worst | default / setting (medians) |")
    print("|---|---|---|---|---|---|---|")
    for engine, problem, pick, judge, chosen, (dm, dw), (cm, cw) in held_out_rows(cells):
        way = "other half" if pick == judge else f"{pick[0]}-{pick[-1]} -> {judge[0]}-{judge[-1]}"
        print(f"| {engine} | {problem} | {way} | "
              f"{chosen} | {dm:.3f} / {dw:.3f} | {cm:.3f} / {cw:.3f} | {dm / cm:.2f} |")


def main():
    print_tables(load(sys.stdin))


if __name__ == "__main__":
    main()
