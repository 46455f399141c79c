"""Statistical regret checks: run build/kb-bench and assert on its JSON line.

The benchmark binary comes from $KB_BENCH (tests/run-all sets it to BUILD/kb-bench).
Under sanitizers (KB_SANITIZED=1, `make asan`) the exact engines are 10-50x slower, so
the heavy Abalone cases are skipped there and only short smoke runs check that kb-bench
and the engines run clean; the statistical thresholds are asserted in `make test`.

Adding an engine is one more entry in ENGINE_CASES. An engine this build does not have
(kb-bench exits 2 with "unknown engine") fails its case: an engine dropped from the
registry must not lose its tests silently.
"""
import json
import os
import statistics
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.environ.get("KB_BENCH", os.path.join(ROOT, "build", "kb-bench"))
SANITIZED = os.environ.get("KB_SANITIZED") == "1"
# The BBKB paper's protocol (seed 004 section 5): standardized features, the bandwidth
# given, nothing fitted.
ABALONE = ["--problem", "abalone", "--set", "input_scaling=standardize",
           "--set", "hyperparameters=fixed"]


def bench(*args):
    """Runs kb-bench; returns the parsed JSON line, or None for an unknown engine."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    p = subprocess.run([BENCH, *args], capture_output=True, text=True, env=env,
                       timeout=1800)
    if p.returncode == 2 and "unknown engine" in p.stderr:
        return None
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_random_regret_ratio_is_one():
    # Uniform picks: E[regret ratio] = 1 exactly; averaged over 5 seeds of T = 2000 the
    # sd is about 0.01, so [0.9, 1.1] is a very wide band.
    T = 500 if SANITIZED else 2000
    ratios = [bench("--engine", "random", *ABALONE, "--T", str(T), "--seed", str(s))
              ["regret_ratio"] for s in range(1, 6)]
    assert 0.9 < sum(ratios) / len(ratios) < 1.1, ratios


# (engine, extra kb-bench arguments, checks on the JSON). Thresholds: seed 004 Fig. 1
# and docs/BENCHMARKS.md (measured: gp-ucb 0.109 at T = 2000 on three seeds).
ENGINE_CASES = [
    pytest.param("gp-ucb",
                 ["--set", "lengthscale=17.5", "--set", "lambda=0.001", "--T", "2000",
                  "--seed", "1"],
                 lambda r: r["regret_ratio"] < 0.25,
                 id="gp-ucb-abalone",
                 marks=pytest.mark.skipif(SANITIZED, reason="T=2000 exact GP under ASan")),
    # Thompson sampling with the default (theoretical) scales v_t / alpha_t; measured
    # (seeds 1-3, outputs standardized over distinct points): gp-ts 0.113-0.118, sgp-ts
    # 0.120-0.121 (seeds 1-6: 0.120-0.126), sgp-ts with 8 async workers (seed 2) 0.153.
    # gp-ts is the exact reference, about a minute here.
    pytest.param("gp-ts",
                 ["--set", "lengthscale=17.5", "--T", "2000", "--seed", "1"],
                 lambda r: r["regret_ratio"] < 0.3,
                 id="gp-ts-abalone",
                 marks=pytest.mark.skipif(SANITIZED, reason="T=2000 exact GP under ASan")),
    pytest.param("sgp-ts",
                 ["--set", "lengthscale=17.5", "--T", "2000", "--seed", "1"],
                 lambda r: r["regret_ratio"] < 0.3 and r["dict_max"] < 200,
                 id="sgp-ts-abalone",
                 marks=pytest.mark.skipif(SANITIZED, reason="T=2000 under ASan")),
    pytest.param("sgp-ts",
                 ["--set", "lengthscale=17.5", "--T", "2000", "--seed", "2",
                  "--mode", "async", "--workers", "8"],
                 lambda r: r["regret_ratio"] < 0.3,
                 id="sgp-ts-abalone-async",
                 marks=pytest.mark.skipif(SANITIZED, reason="T=2000 under ASan")),
] + [
    # bbkb with its defaults (lambda 0.01, beta = scaled 0.5, sampled dictionary,
    # retain 1), C~ = 2. Seeds 3 and 7 locked onto a mediocre arm (ratio 0.58) while
    # outputs were standardized per evaluation (now over distinct points,
    # kb__output_stats). Measured with retain 1 on seeds 1-20: 0.112-0.129, second-half
    # batch mean above the first-half one on 19 (seed 15: 84 then 69).
    pytest.param("bbkb",
                 ["--set", "lengthscale=17.5", "--set", "C=2", "--T", "2000",
                  "--seed", str(seed)],
                 lambda r: r["regret_ratio"] < 0.25
                 and r["batch_mean_second_half"] > r["batch_mean_first_half"],
                 id=f"bbkb-abalone-seed{seed}",
                 marks=pytest.mark.skipif(SANITIZED, reason="T=2000 under ASan"))
    for seed in (1, 2, 3, 4)
]


@pytest.mark.parametrize("engine,args,check", ENGINE_CASES)
def test_engine_on_abalone(engine, args, check):
    r = bench("--engine", engine, *ABALONE, *args)
    if r is None:
        pytest.fail(f"engine {engine} is not in this build")
    assert check(r), r


@pytest.mark.parametrize("engine", ["gp-ucb", "gp-bucb", "bkb"])
@pytest.mark.parametrize("mode,workers", [("sync", "4"), ("async", "4")])
def test_ucb_engines_learn_a_smooth_function(engine, mode, workers):
    # A random RKHS function on 300 points of [0,1]^2, 200 evaluations by 4 workers, the
    # lengthscale given and the rest fitted. Measured over seeds 1-5, both modes: gp-ucb
    # 0.046-0.080, gp-bucb 0.051-0.076, bkb 0.048-0.059 (one point per epoch: its async
    # runs equal its sync ones). The bounds (about 2.5x the worst) leave room for other
    # seeds, not for a broken engine (random is 1).
    T = "60" if SANITIZED else "200"
    r = bench("--engine", engine, "--problem", "rkhs", "--A", "300", "--d", "2",
              "--T", T, "--seed", "3", "--mode", mode, "--workers", workers,
              "--set", "lengthscale=0.2")
    assert r["T"] == int(T)
    if not SANITIZED:
        assert r["regret_ratio"] < {"gp-ucb": 0.2, "gp-bucb": 0.2, "bkb": 0.15}[engine], r
    if mode == "async":
        assert 0.0 <= r["idle_fraction"] < 1.0


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_pi_gp_ucb_at_defaults_learns_a_smooth_function(mode):
    # The rkhs problem above with nothing set: hyperparameters fitted, the cover grown from
    # one cell. Measured over seeds 1-5, both modes: 0.063-0.144; before it fitted (the
    # paper's widths and a T = 10,000 grid of cells) 0.79, close to random search (1).
    T = "60" if SANITIZED else "200"
    r = bench("--engine", "pi-gp-ucb", "--problem", "rkhs", "--A", "300", "--d", "2",
              "--T", T, "--seed", "3", "--mode", mode, "--workers", "4")
    assert r["T"] == int(T)
    if not SANITIZED:
        assert r["regret_ratio"] < 0.35, r


@pytest.mark.parametrize("engine", ["bbkb", "gp-ucb"])
@pytest.mark.parametrize("problem", ["hartmann3", "rkhs"])
def test_finite_defaults_lose_no_seed(engine, problem):
    # Issue 12's finite sets at defaults (fitted, 1,000 candidates, T = 300), seeds 1-10.
    # Measured with the uniform initial design (docs/BENCHMARKS.md, fifty-first session):
    # worst 0.053 (both engines) on hartmann3, 0.049 / 0.055 on rkhs, medians 0.037-0.044;
    # before it one seed of each locked onto a poor arm at 0.35-0.45. The bound (about 3x
    # the worst) fails on such a seed. Fast enough under ASan too (~2 s per case).
    ratios = [bench("--engine", engine, "--problem", problem, "--T", "300", "--seed",
                    str(s))["regret_ratio"] for s in range(1, 11)]
    assert max(ratios) < 0.15, ratios


@pytest.mark.parametrize("engine", ["bbkb", "gp-ucb"])
def test_interior_prior_finds_a_central_optimum(engine):
    # The interior prior mean of finite sets (core/src/engine.c, kb__hyper_refit) on a
    # 5-d Ackley set, whose optimum is the box's centre (1,000 candidates, T = 300, seeds
    # 1-10). Measured (fifty-second session): median regret ratio 0.075 (bbkb) / 0.078
    # (gp-ucb), against 0.26 / 0.28 with prior_mean = constant, where half the runs end
    # at 0.40-0.69 near an edge. The bound is twice the measured median.
    ratios = [bench("--engine", engine, "--problem", "ackley", "--d", "5", "--T", "300",
                    "--seed", str(s))["regret_ratio"] for s in range(1, 11)]
    assert statistics.median(ratios) < 0.15, ratios


def test_bad_option_names_the_field():
    p = subprocess.run([BENCH, "--engine", "gp-bucb", "--set", "C=0.5", "--problem",
                        "branin", "--T", "5"], capture_output=True, text=True)
    assert p.returncode == 2
    assert "'C'" in p.stderr


@pytest.mark.parametrize("engine", ["gp-ts", "sgp-ts"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_ts_engines_learn_a_smooth_function(engine, mode):
    # The rkhs problem of the test above. Measured over seeds 1-5, both modes, 4 workers:
    # gp-ts 0.070-0.131, sgp-ts 0.057-0.111 (both fit the amplitude and noise and use the
    # common width; sgp-ts had 0.30-0.39 with its theoretical scale before it fitted). The
    # bounds catch a broken engine (random is 1).
    T = "60" if SANITIZED else "200"
    r = bench("--engine", engine, "--problem", "rkhs", "--A", "300", "--d", "2",
              "--T", T, "--seed", "3", "--mode", mode, "--workers", "4",
              "--set", "lengthscale=0.2")
    assert r["T"] == int(T)
    if not SANITIZED:
        assert r["regret_ratio"] < {"gp-ts": 0.3, "sgp-ts": 0.3}[engine], r


def test_curve_windows_add_up():
    # --curve N: one entry per window of N evaluations, the last one shorter; the
    # windows' regret ratios, weighted by their lengths, give the run's regret ratio.
    r = bench("--engine", "gp-ucb", "--problem", "rkhs", "--A", "300", "--d", "2",
              "--T", "70", "--seed", "2", "--set", "lengthscale=0.2", "--curve", "30")
    curve = r["curve"]
    assert [w["t"] for w in curve] == [30, 60, 70]
    lengths = [30, 30, 10]
    total = sum(w["regret_ratio"] * n for w, n in zip(curve, lengths)) / r["T"]
    assert abs(total - r["regret_ratio"]) < 1e-3 * r["regret_ratio"], (total, r)
    assert all(w["ask_ms"] > 0 and w["tell_ms"] >= 0 and w["ask_cpu_ms"] > 0
               and w["tell_cpu_ms"] >= 0 for w in curve), curve
    assert "curve" not in bench("--engine", "random", "--problem", "rkhs", "--T", "5")


def test_curve_in_async_mode_counts_every_evaluation():
    r = bench("--engine", "random", "--problem", "rkhs", "--T", "25", "--mode", "async",
              "--workers", "3", "--curve", "10")
    assert [w["t"] for w in r["curve"]] == [10, 20, 25]
