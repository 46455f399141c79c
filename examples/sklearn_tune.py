#!/usr/bin/env python3
"""This file contains an example of the kbandit Python client: it tunes a scikit-learn
support vector classifier on the digits data set (bundled with scikit-learn) with several
worker processes asking a running kbanditd for trials.

    examples/sklearn_tune.py --url http://127.0.0.1:8080 --trials 40 --workers 4

Each trial is the mean 3-fold cross-validated accuracy of SVC(C, gamma), both searched on
a log scale; the study maximizes it. The study is created on first use and found by name
afterwards, so several copies of this script (on several machines) can share it. The
token comes from --token or $KB_TOKEN. The last line printed is a JSON summary.
"""
import argparse
import json
import os
import sys
from pathlib import Path

try:
    import kbandit
except ImportError:  # running from the source tree, without `pip install ./clients/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))
    import kbandit

from sklearn.datasets import load_digits
from sklearn.model_selection import cross_val_score
from sklearn.svm import SVC

SPACE = {"C": (1e-2, 1e3, "log"), "gamma": (1e-5, 1e-1, "log")}
_data = None  # per worker process: loaded on its first trial


def evaluate(trial):
    """Mean cross-validated accuracy of the trial's SVC (module level: worker processes
    receive it by pickling)."""
    global _data
    if _data is None:
        _data = load_digits(return_X_y=True)
    X, y = _data
    model = SVC(C=trial.params["C"], gamma=trial.params["gamma"])
    return float(cross_val_score(model, X, y, cv=3, n_jobs=1).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=os.environ.get("KB_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--token", default=os.environ.get("KB_TOKEN"))
    ap.add_argument("--study", default="svc-digits")
    ap.add_argument("--engine", default="bbkb")
    ap.add_argument("--trials", type=int, default=40, help="trials this run tells")
    ap.add_argument("--workers", type=int, default=4, help="worker processes")
    args = ap.parse_args()
    client = kbandit.Client(args.url, args.token)
    try:
        study = client.get_or_create_study(args.study, params=SPACE, engine=args.engine)
        best = study.optimize(evaluate, n_trials=args.trials, n_workers=args.workers,
                              processes=True)
    except kbandit.KbanditError as e:
        print(f"sklearn_tune: {e}", file=sys.stderr)
        return 1
    print(json.dumps({"study": study.id,
                      "completed": study.refresh().progress["trials"]["completed"],
                      "best": {"value": best.value, "params": best.params, "trial": best.id}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
