"""bench/quality/run.py --noise: engines are told f(x) + N(0, sd^2), and the run's regret
is computed from the noiseless f at the told points. A runner that returned the told
(noisy) values would report regrets below zero (values under the known minimum), and one
that dropped the noise would show the engine a noiseless objective (its fitted noise at
the floor): each test below fails on one of those two bugs."""
import os
import random
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "quality"))
import run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DAEMON = Path(os.environ.get("KB_BENCH", ROOT / "build" / "kb-bench")).parent / "kbanditd"
FMIN = run.FUNCTIONS["branin"]["fmin"]
BIG_SD = 200.0  # ~4x Branin's mean regret: most told values near the optimum fall below fmin


def test_told_adds_normal_noise_of_the_given_sd():
    rng = random.Random(5)
    draws = [run.told(1.5, 2.0, rng) - 1.5 for _ in range(20000)]
    assert abs(statistics.fmean(draws)) < 4 * 2.0 / 20000 ** 0.5
    assert abs(statistics.stdev(draws) / 2.0 - 1) < 0.03


def test_told_without_noise_is_the_value_and_draws_nothing():
    rng, ref = random.Random(9), random.Random(9)
    assert run.told(0.125, 0.0, rng) == 0.125
    assert rng.random() == ref.random()


@pytest.fixture(scope="module")
def daemon():
    d = run.Daemon(str(DAEMON))
    yield d
    d.close()


def test_lockstep_run_reports_noiseless_values_and_tells_noisy_ones(daemon):
    values, _, progress = run.run_lockstep(daemon.port, "branin", "default", {}, 1, 2, 40,
                                           noise_sd=BIG_SD)
    assert len(values) == 40 and min(values) >= FMIN - 1e-9
    # the engine saw the noise: its fitted noise variance (standardized outputs) is large
    assert progress["hyperparameters"]["noise"] > 0.1, progress["hyperparameters"]
    # the recommended trial (best told value) is one of the told points, and under this
    # much noise not the best of them
    assert any(abs(v - FMIN - progress["recommended_regret"]) < 1e-9 for v in values)
    assert progress["recommended_regret"] > min(values) - FMIN


def test_without_noise_the_recommended_trial_is_the_best_told(daemon):
    values, _, progress = run.run_lockstep(daemon.port, "branin", "default", {}, 1, 2, 20)
    assert progress["recommended_regret"] == min(values) - FMIN


def test_optuna_run_reports_noiseless_values():
    values, _, rec = run.run_optuna("branin", "random", 1, 1, 40, noise_sd=BIG_SD)
    assert len(values) == 40 and min(values) >= FMIN - 1e-9
    assert any(abs(v - FMIN - rec) < 1e-9 for v in values) and rec > min(values) - FMIN
