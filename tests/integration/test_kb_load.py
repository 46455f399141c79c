"""This file tests kb-load's --set, --noise and --trials (bench/load/kb_load.c). The one engine
setting --set is given must reach every study it creates, and a malformed one must be
refused before any request. The daemon is the proof that the setting arrives: it refuses
pool_size 0, so the run fails, and pool_size 64 on a 2-d box is a valid study whose asks and
tells go through. --noise perturbs what is told, never the simple regret reported; --trials
ends each client after that many tells. The line reports the first study's model (epoch,
dictionary size, model rows) as the daemon's progress gives it.
"""
import json
import subprocess

from conftest import REPO

KB_LOAD = REPO / "build" / "kb-load"


def kb_load(daemon, *args):
    return subprocess.run([str(KB_LOAD), "--port", str(daemon.port), "--clients", "2",
                           "--seconds", "0.5", "--engine", "bbkb", "--dim", "2", *args],
                          capture_output=True, text=True, timeout=60)


def test_set_reaches_the_study(daemon):
    r = kb_load(daemon, "--studies", "2", "--set", "pool_size=64")
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    assert line["settings"] == {"pool_size": 64}
    assert line["round_trips"] > 0 and line["errors"] == 0


def test_without_set_the_settings_are_empty(daemon):
    r = kb_load(daemon)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["settings"] == {}


def test_a_setting_the_daemon_refuses_fails_the_run(daemon):
    r = kb_load(daemon, "--set", "pool_size=0")
    assert r.returncode == 1 and r.stdout == ""


def test_a_malformed_setting_is_a_usage_error(daemon):
    for bad in ("pool_size", "pool_size=", "=5", "pool_size=5x", "Pool=5", "a=nan"):
        r = kb_load(daemon, "--set", bad)
        assert r.returncode == 2 and "--set" in r.stderr and r.stdout == "", bad


def test_noise_is_told_but_the_regret_stays_noiseless(daemon):
    # With noise of sd 1e6 the told values are ~1e6 in size; the reported simple regret is
    # the noiseless -sum (x_j - 0.3)^2's, in [0, 2 x 0.7^2] on a 2-d box: one computed from
    # told values would be far outside it.
    r = kb_load(daemon, "--noise", "1e6")
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    assert line["noise"] == 1e6 and line["round_trips"] > 0
    assert 0.0 <= line["simple_regret"] <= 0.98


def test_bad_noise_or_trials_is_a_usage_error(daemon):
    for opt, bad in (("--noise", "-1"), ("--noise", "nan"), ("--noise", "abc"),
                     ("--noise", "5x"), ("--trials", "-1"), ("--trials", "2.5"),
                     ("--trials", "x")):
        r = kb_load(daemon, opt, bad)
        assert r.returncode == 2 and opt in r.stderr and r.stdout == "", (opt, bad)


def kb_load_trials(daemon, engine, trials):
    """A run that ends after `trials` tells per client (two clients), under a 60 s cap."""
    r = subprocess.run([str(KB_LOAD), "--port", str(daemon.port), "--clients", "2",
                        "--seconds", "60", "--engine", engine, "--dim", "2",
                        "--trials", str(trials)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_trials_stop_each_client_after_that_many_tells(daemon):
    # a cap of 60 s the run must not need: two clients, five tells each, then done
    line = kb_load_trials(daemon, "random", 5)
    assert line["round_trips"] == 10 and line["errors"] == 0
    assert line["seconds"] < 30, line["seconds"]


def test_the_line_reports_the_first_studys_model(daemon):
    # bbkb after 40 tells (past its initial design of 6): at least one epoch, a dictionary
    # of at least one point, every told row in its model and a fitted noise; random has
    # no such figures
    line = kb_load_trials(daemon, "bbkb", 20)
    assert line["epoch"] >= 1 and line["dictionary_size"] >= 1, line
    assert 20 <= line["model_rows"] <= 40 and line["fitted_noise"] > 0, line
    r = kb_load(daemon, "--engine", "random")
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    assert (line["epoch"], line["dictionary_size"], line["model_rows"]) == (0, 0, 0), line


def test_study_i_gets_seed_i_unless_set_gives_one(daemon):
    """The daemon draws a seed for a study created without one; kb-load numbers its studies'
    seeds so that runs repeat their engine choices where timing allows."""
    api = daemon.client()
    r = kb_load(daemon, "--studies", "2", "--set", "pool_size=64", "--keep", "1")
    assert r.returncode == 0, r.stderr
    r = kb_load(daemon, "--studies", "2", "--set", "seed=5", "--keep", "1")
    assert r.returncode == 0, r.stderr
    studies = sorted(api.get("/v1/studies").json()["studies"], key=lambda s: s["id"])
    assert [s["engine"]["settings"] for s in studies] == [
        {"seed": 0, "pool_size": 64}, {"seed": 1, "pool_size": 64}, {"seed": 5}, {"seed": 5}]
