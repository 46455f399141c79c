"""bench/quality/run.py --warm: every run of a seed starts from the same N uniform points,
given to kbandit as observations and to Optuna as added trials before the first ask. A
runner that drew the points per engine, dropped them, counted them in the budget, or
recommended one of them (GET /best and Optuna's pick here look only at the run's own
trials) fails one of the tests below."""
import math

import run

BRANIN = run.FUNCTIONS["branin"]
AT_MIN = {"x1": math.pi, "x2": 2.275}  # one of Branin's three minimizers


def warm_with_the_minimum(seed, n):
    """n uniform warm points and, first, Branin's minimizer itself."""
    v = BRANIN["f"](AT_MIN)
    return [(AT_MIN, v, v)] + run.warm_start(BRANIN, seed, n, 0.0)


def test_warm_points_depend_on_the_seed_alone():
    a, b = run.warm_start(BRANIN, 7, 6, 0.0), run.warm_start(BRANIN, 7, 6, 0.0)
    assert a == b and a != run.warm_start(BRANIN, 8, 6, 0.0) and len(a) == 6
    for p, told, f in a:
        assert -5 <= p["x1"] <= 10 and 0 <= p["x2"] <= 15, p
        assert told == f == BRANIN["f"](p)


def test_noisy_warm_values_carry_the_noise():
    for p, told, f in run.warm_start(BRANIN, 7, 6, 50.0):
        assert f == BRANIN["f"](p) and told != f


def test_a_lockstep_run_starts_from_the_warm_points(daemon):
    warm = warm_with_the_minimum(3, 5)
    values, _, progress = run.run_lockstep(daemon.port, "branin", "default", {}, 3, 2, 12,
                                           warm=warm)
    assert len(values) == 12  # the budget counts the run's own trials
    assert progress["observations"] == 6
    fmean = run.mean_f(BRANIN, n=2000)
    assert run.summarize_values(values, BRANIN, fmean, warm)["simple_regret"] < 1e-12
    assert run.summarize_values(values, BRANIN, fmean)["simple_regret"] > 1e-6
    assert progress["recommended_regret"] > 1e-6  # a trial, not the observed minimizer


def test_an_optuna_run_starts_from_the_warm_points():
    values, _, rec = run.run_optuna("branin", "random", 3, 1, 12, warm=warm_with_the_minimum(3, 5))
    assert len(values) == 12 and min(values) > BRANIN["fmin"] + 1e-6
    assert rec == min(values) - BRANIN["fmin"]
