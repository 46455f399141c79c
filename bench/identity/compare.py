#!/usr/bin/env python3
"""Compares two directories written by bench/identity/run: equal choices or not.

    bench/identity/compare.py OUT_BASE OUT_CANDIDATE

Each file of OUT_BASE (box.jsonl, bench.jsonl, lock-*.jsonl) is compared with its namesake
in OUT_CANDIDATE line by line, every field but the timers and the counters of work done
(IGNORED: a speed change may move those), so regrets, hyperparameters, epochs and
dictionary sizes must be equal to the last digit printed. Prints one line per file and
the first differences; exits 0 when every file has the same lines, 1 otherwise (a file
missing on either side or a different number of runs is a difference)."""
import json
import sys
from pathlib import Path

# Timers, and counters of work that a change of the arithmetic's order may move without
# changing any choice (epochs_bounded, bound_resolved: bbkb's epoch-start bounds).
IGNORED = {"cpu_ms_per_round_trip", "wall_s", "trials_per_s", "ask_us_mean",
           "gflops_resparsify", "peak_rss_mb", "epochs_bounded", "bound_resolved"}


def choices(line):
    """One run's fields that must not change, as a canonical string."""
    run = json.loads(line)
    kept = {k: v for k, v in run.items() if k not in IGNORED and not k.startswith("sec_")}
    return json.dumps(kept, sort_keys=True)


def compare_file(a, b, show=3):
    """(equal, message) for two files of runs."""
    if not a.exists() or not b.exists():
        return False, "missing on %s" % ("the candidate's side" if a.exists() else "the base's side")
    la = [choices(l) for l in a.read_text().splitlines() if l.strip()]
    lb = [choices(l) for l in b.read_text().splitlines() if l.strip()]
    if len(la) != len(lb):
        return False, "%d runs against %d" % (len(la), len(lb))
    diff = [i for i, (x, y) in enumerate(zip(la, lb)) if x != y]
    if not diff:
        return True, "%d runs, all equal" % len(la)
    lines = ["%d of %d runs differ" % (len(diff), len(la))]
    for i in diff[:show]:
        lines += ["  run %d, base:      %s" % (i + 1, la[i]), "  run %d, candidate: %s" % (i + 1, lb[i])]
    return False, "\n".join(lines)


def main(argv):
    if len(argv) != 3:
        print("usage: " + __doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    base, cand = Path(argv[1]), Path(argv[2])
    names = sorted({p.name for d in (base, cand) for p in d.glob("*.jsonl")})
    if not names:
        print("no runs in %s or %s" % (base, cand), file=sys.stderr)
        return 2
    ok = True
    for name in names:
        equal, msg = compare_file(base / name, cand / name)
        ok &= equal
        print("%s: %s" % (name, msg))
    print("choices equal" if ok else "choices differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
