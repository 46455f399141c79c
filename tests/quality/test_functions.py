"""The known minima of the second to fourth tuning sets and of the fresh held-out sets
(bench/quality/functions.py, TUNING2-4, HELD_OUT2, HELD_OUT3 and HELD_OUT4): each
function reaches its stated fmin at its known minimizer(s) and no sampled point lies below
it, so that simple regrets measured on them are distances to the true optimum."""
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "quality"))
from functions import (FUNCTIONS, HELD_OUT2, HELD_OUT3, HELD_OUT4, TUNING2, TUNING3,  # noqa: E402
                       TUNING4)

MINIMIZERS = {"ackley5": 0.0, "rastrigin4": 0.0, "schwefel4": 420.9687463}

# Dixon-Price's minimizer, Surjanovic & Bingham: x_i = 2^-((2^i - 2) / 2^i), i = 1..d.
DIXON_PRICE6 = [2.0 ** (-(2.0 ** i - 2) / 2.0 ** i) for i in range(1, 7)]
CAMEL = (0.08984201368301331, -0.7126564032704135)


def xs(values, inactive=0.0, d=None):
    """Parameters x0.. of a float box: values in order, or {index: value} with the rest
    set to `inactive`."""
    if isinstance(values, dict):
        return {f"x{i}": values.get(i, inactive) for i in range(d)}
    return {f"x{i}": v for i, v in enumerate(values)}


HELD_OUT2_MINIMIZERS = {
    "goldstein_price": [{"x1": 0.0, "x2": -1.0}],
    "powell8": [xs([0.0] * 8)],
    "dixon_price6": [xs(DIXON_PRICE6)],
    "colville4": [xs([1.0] * 4)],
    # both global minima, the inactive parameters anywhere
    "camel_in16": [xs({3: CAMEL[0], 10: CAMEL[1]}, 1.7, 16),
                   xs({3: -CAMEL[0], 10: -CAMEL[1]}, -0.3, 16)],
    "train_mixed": [{"lr": 1e-3, "weight_decay": 1e-4, "layers": 4, "dropout": 0.2,
                     "optimizer": "adam"}],
    "boosting_mixed": [{"learning_rate": 0.1, "n_trees": 100, "max_depth": 6,
                        "subsample": 0.8, "booster": "gbtree"}],
}

HELD_OUT3_MINIMIZERS = {
    "svm_mixed": [{"C": 10.0, "gamma": 0.01, "kernel": "rbf", "degree": d, "shrinking": "on"}
                  for d in (2, 5)],
    "forest_mixed": [{"n_estimators": 300, "max_features": 0.3, "min_samples_leaf": 4,
                      "criterion": "gini", "bootstrap": "yes"}],
}

HELD_OUT4_MINIMIZERS = {
    "nn_mixed": [{"lr": 1e-3, "batch_size": 64, "activation": "relu", "norm": "batch",
                  "warmup": 0.1}],
    "gbm_mixed": [{"num_leaves": 32, "feature_fraction": 0.7, "objective": "huber",
                   "bagging": "on", "lambda_l2": 0.1}],
}

TUNING3_MINIMIZERS = {
    "hartmann3_mixed": [{"x0": 0.11458887930324516, "x1": 0.5556488952654733,
                         "x2": 0.8525469855113912, "n": 6, "kernel": "matern52"}],
    "rosenbrock_mixed": [{"a": 1.0, "b": 1.0, "c": 1, "solver": "lbfgs"}],
    "choice_trap": [{"x0": 0.25, "x1": 0.75, "model": "sharp"}],
}
# Every function whose minimizers are written out above.
STATED_MINIMIZERS = {**HELD_OUT2_MINIMIZERS, **HELD_OUT3_MINIMIZERS, **HELD_OUT4_MINIMIZERS,
                     **TUNING3_MINIMIZERS}


def point(name, value):
    return {p["name"]: value for p in FUNCTIONS[name]["params"]}


def sample(params, rng):
    """A point of the box; log parameters drawn in log scale half of the time, so that both
    ends of their range are visited."""
    p = {}
    for q in params:
        if q["type"] == "categorical":
            p[q["name"]] = rng.choice(q["choices"])
            continue
        lo, hi = q["low"], q["high"]
        x = (math.exp(rng.uniform(math.log(lo), math.log(hi)))
             if q.get("log") and rng.random() < 0.5 else rng.uniform(lo, hi))
        p[q["name"]] = x if q["type"] == "float" else min(hi, max(lo, round(x)))
    return p


def test_known_minimizers_reach_fmin():
    for name, x in MINIMIZERS.items():
        fn = FUNCTIONS[name]
        assert abs(fn["f"](point(name, x)) - fn["fmin"]) < 1e-6, name


def test_stated_minimizers_reach_fmin():
    assert sorted(HELD_OUT2_MINIMIZERS) == sorted(HELD_OUT2)
    assert sorted(HELD_OUT3_MINIMIZERS) == sorted(HELD_OUT3)
    assert sorted(HELD_OUT4_MINIMIZERS) == sorted(HELD_OUT4)
    assert sorted(TUNING3_MINIMIZERS) == sorted(TUNING3 + TUNING4)
    for name, points in STATED_MINIMIZERS.items():
        fn = FUNCTIONS[name]
        for p in points:
            assert sorted(p) == sorted(q["name"] for q in fn["params"]), name
            assert abs(fn["f"](p) - fn["fmin"]) < 1e-12, name


def test_stated_minimizers_lie_in_the_box():
    for name, points in STATED_MINIMIZERS.items():
        for q in FUNCTIONS[name]["params"]:
            for p in points:
                if q["type"] == "categorical":
                    assert p[q["name"]] in q["choices"], name
                else:
                    assert q["low"] <= p[q["name"]] <= q["high"], (name, q["name"])


def test_no_sample_below_fmin():
    rng = random.Random(12)
    for name in TUNING2 + TUNING3 + TUNING4 + HELD_OUT2 + HELD_OUT3 + HELD_OUT4:
        fn = FUNCTIONS[name]
        for _ in range(20000):
            p = sample(fn["params"], rng)
            assert fn["f"](p) >= fn["fmin"] - 1e-9, name


def perturb(q, x, rng):
    """x moved a little within parameter q: 0.1% of the range (1% relative on a log scale),
    an int by one step, a categorical to any choice."""
    if q["type"] == "categorical":
        return rng.choice(q["choices"])
    if q["type"] == "int":
        return min(q["high"], max(q["low"], x + rng.randint(-1, 1)))
    span = 1e-3 * (q["high"] - q["low"])
    moved = x * (1 + rng.uniform(-1e-2, 1e-2)) if q.get("log") else x + rng.uniform(-span, span)
    return min(q["high"], max(q["low"], moved))


def test_samples_near_the_minimizers_stay_above_fmin():
    """Where a wrongly stated minimum would show first: around each known minimizer."""
    rng = random.Random(13)
    for name, points in STATED_MINIMIZERS.items():
        fn = FUNCTIONS[name]
        for p0 in points:
            for _ in range(3000):
                p = {q["name"]: perturb(q, p0[q["name"]], rng) for q in fn["params"]}
                assert fn["f"](p) >= fn["fmin"] - 1e-12, name
