"""Climbs (issue 13; core/src/engine.c, climb_center): on a noise-free objective whose
best value has stopped improving for climb_after trials (100 by default in bbkb, the
default engine), every other candidate pool climbs from the second peak of the
observations (the best point with no better one within two lengthscales, outside the worst
quarter), so that a run which committed to a lower basin can still reach the taller one.

Hartmann-6 (6-d box, second basin 0.119 above the minimum), noise-free, 8 workers x 125
trials in lockstep. Measured (forty-first session): seeds 1402 and 1404 end in the second
basin without climbs (simple regret 0.119 both) and in the global one with them (0.011,
0.0014). Asserted: with the default both below 0.05 and climbs taken; with climb_after 0
both above 0.1 and none taken. Under noise (sd 0.1 x (mean f - min f)) the fitted noise
keeps climbs off: none taken. Skipped under sanitizers (1,000-trial runs, ~10x slower
there); tests/unit/test_base.c stalled_run_climbs_a_second_basin runs the rule under them.

Dixon-Price-6 (a long curved valley), seeds 1415 and 1416: measured (forty-second session)
0.889 and 0.968 with no climb pool taken, and 1.38 and 0.70 with one pool and none since
the lengthscales' floor of 0.025 (forty-sixth session); the forty-first session's rule (the
best point beyond two lengthscales, on the incumbent's own slope here) took 31 and 37 climb
pools and ended at 17.7 and 11.9. Asserted: at most 3 climb pools each, both below 3.
"""
import os

import pytest

import run  # bench/quality, put on the path by conftest.py (as is the daemon fixture)

pytestmark = pytest.mark.skipif(os.environ.get("KB_SANITIZED") == "1",
                                reason="1,000-trial runs under ASan")

NAME = "hartmann6"
SEEDS = (1402, 1404)


def regrets(daemon, settings, noise=0.0, seeds=SEEDS, name=NAME):
    """Each seed's simple regret and the pools climbs took."""
    fn = run.FUNCTIONS[name]
    noise_sd = noise * (run.mean_f(fn) - fn["fmin"])
    out, pools = [], []
    for seed in seeds:
        engine = "bbkb" if settings else "default"
        values, _, progress = run.run_lockstep(daemon.port, name, engine, settings, seed, 8,
                                               1000, noise_sd)
        assert len(values) == 1000
        out.append(min(values) - fn["fmin"])
        pools.append(progress["climb_pools"])
    return out, pools


def test_climbs_reach_the_taller_basin(daemon):
    r, pools = regrets(daemon, {})
    assert max(r) < 0.05, r
    assert min(pools) > 0, pools


def test_without_climbs_the_runs_stay_in_the_lower_basin(daemon):
    r, pools = regrets(daemon, {"climb_after": 0})
    assert min(r) > 0.1, r
    assert pools == [0, 0]


def test_no_climb_under_noise(daemon):
    _, pools = regrets(daemon, {}, noise=0.1, seeds=(1402,))
    assert pools == [0]


def test_no_climb_along_a_valley(daemon):
    r, pools = regrets(daemon, {}, seeds=(1415, 1416), name="dixon_price6")
    assert max(pools) <= 3, pools
    assert max(r) < 3.0, r
