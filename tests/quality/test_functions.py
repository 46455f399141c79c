"""The second tuning set's known minima (bench/quality/functions.py): each function reaches
its stated fmin at its known minimizer and no sampled point lies below it, so that simple
regrets measured on them are distances to the true optimum."""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "quality"))
from functions import FUNCTIONS, TUNING2  # noqa: E402

MINIMIZERS = {"ackley5": 0.0, "rastrigin4": 0.0, "schwefel4": 420.9687463}


def point(name, value):
    return {p["name"]: value for p in FUNCTIONS[name]["params"]}


def test_known_minimizers_reach_fmin():
    for name, x in MINIMIZERS.items():
        fn = FUNCTIONS[name]
        assert abs(fn["f"](point(name, x)) - fn["fmin"]) < 1e-6, name


def test_no_sample_below_fmin():
    rng = random.Random(12)
    for name in TUNING2:
        fn = FUNCTIONS[name]
        for _ in range(20000):
            p = {q["name"]: rng.uniform(q["low"], q["high"]) for q in fn["params"]}
            assert fn["f"](p) >= fn["fmin"] - 1e-9, name
