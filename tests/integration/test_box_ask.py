"""This file tests kb-box-ask's --noise (bench/acq/box_ask.c): the engine is told the
objective plus seeded Gaussian noise, while the simple regret it reports stays that of the
noiseless objective at the points told; a run is a function of its options and seed; a
negative or non-numeric sd is refused with the usage line; --batch 1 tells the whole batch
in a row, which sgp-ts takes in one model refresh at the next ask.
"""
import json
import subprocess

from conftest import REPO

BOX_ASK = REPO / "build" / "kb-box-ask"
TIMERS = ("cpu_ms_per_round_trip", "sec_embed", "sec_resparsify", "sec_fit", "sec_ask")


def box_ask(*args):
    r = subprocess.run([str(BOX_ASK), "--dim", "2", "--pool", "256", "--trials", "60",
                        "--pending", "4", "--every", "60", "--seed", "3", *args],
                       capture_output=True, text=True, timeout=120,
                       env={"OPENBLAS_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    return {k: v for k, v in line.items() if k not in TIMERS}


def test_noise_reaches_the_engine_not_the_regret():
    quiet, noisy = box_ask(), box_ask("--noise", "0.5")
    # sd 0.5 on an objective spanning ~2: the fit reads it, the noiseless one sits at its floor
    assert noisy["noise"] > 100 * quiet["noise"]
    # told values near the maximum 0 exceed it under this noise; the regret must not
    assert noisy["simple_regret"] >= 0 and quiet["simple_regret"] >= 0


def test_a_noisy_run_is_repeatable():
    assert box_ask("--noise", "0.2") == box_ask("--noise", "0.2")


def test_a_batch_of_tells_is_one_sgp_ts_refresh():
    one, batch = (box_ask("--engine", "sgp-ts", "--batch", b) for b in ("0", "1"))
    assert one["told"] == batch["told"] == 60
    # a refresh at every ask after a tell (59 of 60), against one per batch of 4 (14 of 15)
    assert one["epochs"] == 59 and batch["epochs"] == 14


def test_negative_or_non_numeric_noise_is_refused():
    for bad in ("-1", "abc", "0.1x", "nan"):
        r = subprocess.run([str(BOX_ASK), "--noise", bad], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2 and "--noise SD" in r.stderr and r.stdout == "", bad
