"""Choice floors (issue 12; core/src/engine.c, starved_choice): bbkb (the default engine)
gives a categorical choice tried fewer than min(2 x 2 sqrt(t ln c / ((e - 1) c)), t / 2c)
times in t trials the next epoch's whole pool (gp-ucb: the pool until the floor is met),
so that a choice whose optimum needs the right continuous values is searched near its own
best points, not judged by a few trials away from them.

choice_trap (bench/quality/functions.py, TUNING4: "wide" best on average, 0.2 at best;
"sharp" holds the optimum 0 in a well) told with noise of sd 0.1 x (mean f - min f), the
default engine, 4 workers x 50 trials in lockstep, seeds 1-20. Measured (thirty-ninth
session): with the floor median simple regret 0.0005, 4 of 20 runs ended on "wide" (regret
> 0.15); with choice_floor 0, 15 of 20 and median 0.2. Asserted: at most 8 runs stuck and a
median below 0.05. Noise-free: 0 of 20 stuck with the floor (2 of 20 without); asserted
on seeds 1-10: none. gp-ucb under noise (fortieth session): 4 of 20 stuck with the
floor, median 3e-4; 20 of 20 without; asserted: at most 10 stuck, median below 0.05. The
daemon's progress counts the pools the floors took (choice_floor_pools).
"""
import statistics

import run  # bench/quality, put on the path by conftest.py (as is the daemon fixture)
NAME = "choice_trap"


def regrets(daemon, seeds, noise, engine="default", settings=None):
    """Each seed's simple regret, and the pools the floors took (progress) per seed."""
    fn = run.FUNCTIONS[NAME]
    noise_sd = noise * (run.mean_f(fn) - fn["fmin"])
    out, pools = [], []
    for seed in seeds:
        values, _, progress = run.run_lockstep(daemon.port, NAME, engine, settings or {},
                                               seed, 4, 200, noise_sd)
        assert len(values) == 200
        out.append(min(values) - fn["fmin"])
        pools.append(progress["choice_floor_pools"])
    return out, pools


def test_the_best_choice_is_found_under_noise(daemon):
    r, pools = regrets(daemon, range(1, 21), 0.1)
    assert sum(x > 0.15 for x in r) <= 8, sorted(r)
    assert statistics.median(r) < 0.05, sorted(r)
    assert min(pools) > 0, pools


def test_the_best_choice_is_found_without_noise(daemon):
    r, _ = regrets(daemon, range(1, 11), 0.0)
    assert max(r) < 0.15, sorted(r)


def test_gp_ucb_finds_the_best_choice_under_noise(daemon):
    r, pools = regrets(daemon, range(1, 21), 0.1, "gp-ucb")
    assert sum(x > 0.15 for x in r) <= 10, sorted(r)
    assert statistics.median(r) < 0.05, sorted(r)
    assert min(pools) > 0, pools


def test_no_pool_is_taken_with_the_floors_off(daemon):
    _, pools = regrets(daemon, range(1, 3), 0.1, "gp-ucb", {"choice_floor": 0})
    assert pools == [0, 0]
