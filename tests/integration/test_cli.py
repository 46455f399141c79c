"""This file contains the tests of the `kbandit` command line (python3 -m kbandit, from
clients/python) against the real daemon: every subcommand's --json output validated
against openapi.yaml, the key figures of the human output, the documented exit statuses,
study specs from JSON and YAML files, watch, and an install with pip into a venv."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from client_util import CLIENT_SRC, assert_component, assert_response

import kbandit

TOKEN = "cli-token-0123456789"


class Cli:
    """Runs `python3 -m kbandit` against one daemon (url and token from the environment,
    as a shell script would set them)."""

    def __init__(self, daemon, extra_path=None):
        path = [str(CLIENT_SRC)] + ([str(extra_path)] if extra_path else [])
        self.env = dict(os.environ, KB_URL=daemon.url, KB_TOKEN=daemon.token or "",
                        PYTHONPATH=os.pathsep.join(path[::-1]))

    def __call__(self, *args, expect=0, stdin=None):
        r = subprocess.run([sys.executable, "-m", "kbandit", *map(str, args)], env=self.env,
                           capture_output=True, text=True, timeout=120, input=stdin)
        assert r.returncode == expect, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def json(self, *args):
        return json.loads(self("--json", *args).stdout)


@pytest.fixture
def d(daemons):
    return daemons(token=TOKEN)


@pytest.fixture
def cli(d):
    return Cli(d)


def make_study(cli, name="cli", *extra):
    return cli.json("create", name, "--param", "x=float:0:1", "--param", "n=int:1:8",
                    "--param", "k=cat:a,b", "--engine", "random", "--set", "seed=3", *extra)


def test_create_show_studies_json_and_human(cli):
    s = make_study(cli, "cli", "--direction", "minimize", "--lease-seconds", "30",
                   "--max-trials", "10")
    assert_component(s, "Study")
    assert [p["type"] for p in s["space"]["params"]] == ["float", "int", "categorical"]
    assert s["engine"] == {"name": "random", "settings": {"seed": 3}}
    assert (s["direction"], s["lease_seconds"], s["max_trials"]) == ("minimize", 30, 10)
    assert_component(cli.json("show", "cli"), "Study")
    assert cli.json("show", s["id"])["name"] == "cli"
    listed = cli.json("studies")
    assert_response(listed, "/v1/studies")
    assert [x["name"] for x in listed["studies"]] == ["cli"]
    text = cli("studies").stdout
    assert "NAME" in text and "cli" in text and "minimize" in text and "random" in text
    text = cli("show", "cli").stdout
    assert "study 1 'cli': minimize, engine random (seed=3)" in text
    assert "x float [0, 1]" in text and "k in {a, b}" in text
    assert "pending 0  completed 0  failed 0  expired 0  (total 0 of max 10)" in text
    assert "lease     30 s" in text and "observed" not in text


def test_show_counts_warm_start_observations(cli, d):
    make_study(cli, "obs")
    s = kbandit.Client(d.url, d.token).study("obs")
    assert s.add_observations([({"x": 0.25, "n": 2, "k": "a"}, 1.0),
                               ({"x": 0.75, "n": 5, "k": "b"}, 2.0)]) == 2
    shown = cli.json("show", "obs")
    assert_component(shown, "Study")
    assert shown["progress"]["observations"] == 2
    assert shown["progress"]["trials"]["completed"] == 0 and shown["progress"]["best"] is None
    text = cli("show", "obs").stdout
    assert "observed  2 warm-start observations" in text


def test_engines(cli):
    assert_response(cli.json("engines"), "/v1/engines")
    text = cli("engines").stdout
    assert "bbkb (default)" in text and "pi-gp-ucb" in text and "MAX DIM" in text
    text = cli("engines", "pi-gp-ucb").stdout
    assert "matern12|matern32|matern52" in text and "horizon" in text and "seed" in text
    r = cli("engines", "nope", expect=2)
    assert "unknown engine 'nope'" in r.stderr


def test_ask_tell_fail_best_trials(cli):
    make_study(cli)
    asked = cli.json("ask", "cli", "--count", "3", "--worker", "sh-1")
    assert_response(asked, "/v1/studies/{study_id}/ask", "post")
    ids = [t["id"] for t in asked["trials"]]
    assert ids == [1, 2, 3] and {t["worker"] for t in asked["trials"]} == {"sh-1"}
    told = cli.json("tell", "cli", 1, "0.93")
    assert_component(told, "Trial")
    assert told["value"] == 0.93 and told["state"] == "completed"
    failed = cli.json("fail", "cli", 2, "--reason", "oom")
    assert_component(failed, "Trial")
    assert failed["state"] == "failed" and failed["reason"] == "oom"
    assert "trial 3: completed, value 0.25" in cli("tell", "cli", 3, "0.25").stdout
    best = cli.json("best", "cli")
    assert_component(best, "Trial")
    assert best["id"] == 1
    assert cli("best", "cli").stdout.startswith("trial 1: completed, value 0.93\n  x=")
    assert cli.json("best", "cli", "--by", "model")["id"] == 1  # random: no model, as by value
    trials = cli.json("trials", "cli")
    assert_response(trials, "/v1/studies/{study_id}/trials")
    assert [t["state"] for t in trials["trials"]] == ["completed", "failed", "completed"]
    assert [t["id"] for t in cli.json("trials", "cli", "--state", "failed")["trials"]] == [2]
    table = cli("trials", "cli").stdout.splitlines()
    assert table[0].split() == ["ID", "STATE", "WORKER", "VALUE", "x", "n", "k"]
    assert table[1].split()[:4] == ["1", "completed", "sh-1", "0.93"]
    assert table[2].split()[:4] == ["2", "failed", "sh-1", "-"]
    text = cli("ask", "cli").stdout.splitlines()
    assert text[0].split()[:2] == ["ID", "WORKER"] and text[1].split()[0] == "4"


def test_export_csv_and_json(cli, tmp_path):
    make_study(cli)
    cli("ask", "cli")
    cli("tell", "cli", 1, "0.5")
    csv_text = cli("export", "cli").stdout
    assert csv_text.splitlines()[0] == 'id,state,worker,value,"x","n","k"'
    assert csv_text.splitlines()[1].startswith("1,completed,")
    exported = cli.json("export", "cli", "--format", "json")
    assert_response(exported, "/v1/studies/{study_id}/export")
    cli("export", "cli", "-o", tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text() == csv_text
    cli("export", "cli", "--format", "json", "-o", tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["trials"][0]["value"] == 0.5


def test_create_from_json_and_yaml_specs_and_candidates(cli, tmp_path):
    spec = {"name": "from-json", "direction": "maximize",
            "space": {"type": "box", "params": [{"name": "lr", "type": "float", "low": 1e-5,
                                                 "high": 1, "log": True}]},
            "engine": {"name": "random"}, "max_trials": 4}
    (tmp_path / "s.json").write_text(json.dumps(spec))
    made = cli.json("create", "--spec", tmp_path / "s.json")
    assert made["name"] == "from-json" and made["max_trials"] == 4
    assert cli.json("create", "renamed", "--spec", tmp_path / "s.json")["name"] == "renamed"
    (tmp_path / "s.yaml").write_text("name: from-yaml\nspace:\n  type: candidates\n"
                                     "  candidates: [[1, 2], [3, 4]]\n")
    made = cli.json("create", "--spec", tmp_path / "s.yaml")
    assert made["space"] == {"type": "candidates", "rows": 2, "dim": 2}
    again = cli.json("create", "--spec", tmp_path / "s.yaml", "--exist-ok")
    assert again["id"] == made["id"]
    (tmp_path / "c.csv").write_text('"a,b",c\n1,2\n3,4\n')
    made = cli.json("create", "cands", "--candidates", tmp_path / "c.csv")
    assert made["space"]["rows"] == 2 and made["space"]["candidate_set"] >= 1
    table = cli("ask", "cands").stdout.splitlines()
    assert table[0].split() == ["ID", "WORKER", "a,b", "c"]


def test_observe_warm_starts_from_an_export(cli, d, tmp_path):
    """`observe` reads a study's CSV export as is (completed rows only; float, int and
    categorical values parsed back) into another study's observations; a file without a
    value column, or with a value that is not a choice, is a usage error."""
    make_study(cli, "src")
    src = kbandit.Client(d.url, d.token).study("src")
    trials = src.ask(4)
    told = [(t.params, t.tell(0.25 * (i + 1)).value) for i, t in enumerate(trials[:3])]
    trials[3].fail("crashed")
    cli("export", "src", "-o", tmp_path / "src.csv")
    make_study(cli, "dst")
    assert cli.json("observe", "dst", tmp_path / "src.csv") == {"added": 3}
    assert "3 observations added" in cli("observe", "dst", tmp_path / "src.csv").stdout
    exported = cli.json("export", "dst", "--format", "json")
    assert [(o["params"], o["value"]) for o in exported["observations"]] == told * 2
    (tmp_path / "bad.csv").write_text("x,n,k\n0.5,2,a\n")
    assert "'value' column" in cli("observe", "dst", tmp_path / "bad.csv", expect=2).stderr
    (tmp_path / "bad.csv").write_text("x,n,k,value\n0.5,2,c,1.0\n")
    r = cli("observe", "dst", tmp_path / "bad.csv", expect=2)
    assert "line 2: k: 'c' is not one of its choices" in r.stderr
    # a candidate set's export: the point is the coordinate columns, in order
    (tmp_path / "c.csv").write_text('"a,b",c\n1,2\n3,4\n5,6\n')
    cli("create", "cands", "--candidates", tmp_path / "c.csv", "--engine", "random")
    cands = kbandit.Client(d.url, d.token).study("cands")
    (t,) = cands.ask()
    t.tell(2.5)
    cli("export", "cands", "-o", tmp_path / "cands.csv")
    cli("create", "cands2", "--candidates", tmp_path / "c.csv")
    assert cli.json("observe", "cands2", tmp_path / "cands.csv") == {"added": 1}
    obs = cli.json("export", "cands2", "--format", "json")["observations"]
    assert [(o["x"], o["params"], o["value"]) for o in obs] == [(t.data["x"], None, 2.5)]


def test_observe_reads_back_boolean_and_numeric_choices(cli, d, tmp_path):
    """An export writes a choice true as `true` and 1.0 as `1`: observe matches them by
    value (it compared Python's str(), 'True' and '1.0', and refused its own export)."""
    cli("create", "ch", "--param", "b=cat:true,false", "--param", "lr=cat:0.1,1.0,2",
        "--engine", "random")
    study = kbandit.Client(d.url, d.token).study("ch")
    for i, t in enumerate(study.ask(4)):
        t.tell(float(i))
    cli("export", "ch", "-o", tmp_path / "ch.csv")
    cli("create", "ch2", "--param", "b=cat:true,false", "--param", "lr=cat:0.1,1.0,2")
    assert cli.json("observe", "ch2", tmp_path / "ch.csv") == {"added": 4}
    got = cli.json("export", "ch2", "--format", "json")["observations"]
    assert sorted(map(str, [o["params"] for o in got])) == \
        sorted(map(str, [t.params for t in study.trials()]))


def test_usage_errors_instead_of_tracebacks(cli, d, tmp_path):
    """Non-finite numbers, negative intervals and timeouts, and flags --spec would drop
    are usage errors (exit 2), not tracebacks or silently ignored; a name of non-ASCII
    digits is a name, not an id; a token with a trailing newline works."""
    make_study(cli, "u1")
    for args in (("tell", "u1", 1, "nan"), ("tell", "u1", 1, "inf"),
                 ("create", "n", "--param", "x=float:0:nan"),
                 ("create", "n", "--param", "x=float:0:1", "--set", "lengthscale=NaN"),
                 ("create", "n", "--param", "x=float:0:1", "--set", "lengthscale=1e400"),
                 ("watch", "u1", "--interval", "-1"), ("--timeout", "-1", "studies"),
                 ("--timeout", "0", "studies")):
        r = cli(*args, expect=2)
        assert "Traceback" not in r.stderr, (args, r.stderr)
    (tmp_path / "s.json").write_text(json.dumps({"name": "fromspec", "space": {
        "type": "box", "params": [{"name": "x", "type": "float", "low": 0, "high": 1}]}}))
    r = cli("create", "--spec", tmp_path / "s.json", "--max-trials", "5", expect=2)
    assert "--max-trials" in r.stderr
    other = make_study(cli, "١٧")
    assert cli.json("show", "١٧")["id"] == other["id"]
    assert kbandit.Client(d.url, d.token + "\n").study("u1").name == "u1"


def test_yaml_without_pyyaml_is_a_clear_usage_error(d, tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "yaml.py").write_text("raise ImportError('PyYAML blocked by the test')\n")
    (tmp_path / "s.yaml").write_text("name: x\n")
    r = Cli(d, extra_path=blocker)("create", "--spec", tmp_path / "s.yaml", expect=2)
    assert "needs PyYAML" in r.stderr and "Traceback" not in r.stderr


def test_exit_statuses(cli, d):
    assert "exit status:" in cli("--help").stdout
    make_study(cli, "cap", "--max-trials", "1")
    cli("ask", "cap")
    r = cli("ask", "cap", expect=4)
    assert "no trial handed out: max_trials_reached" in r.stderr
    r = cli("--json", "ask", "cap", expect=4)
    assert_response(json.loads(r.stdout), "/v1/studies/{study_id}/ask", "post")
    r = cli("tell", "cap", 1, "0.5")
    r = cli("tell", "cap", 1, "0.6", expect=1)
    assert r.stderr.startswith("kbandit: 409 conflict: trial 1 was already told 0.5")
    r = cli("show", "missing", expect=1)
    assert "404 not_found: no study named 'missing'" in r.stderr
    r = cli("--token", "wrong-token-0123456", "studies", expect=1)
    assert "401 unauthorized" in r.stderr
    cli("frobnicate", expect=2)
    cli("create", "p", "--param", "x=float:1", expect=2)
    cli("create", "p", "--param", "x=float:0:1", "--candidates", "c.csv", expect=2)
    r = cli("create", "--spec", "/nonexistent.json", expect=2)
    assert "No such file" in r.stderr
    cli("--url", "not a url", "studies", expect=2)
    r = cli("--url", f"http://127.0.0.1:{_closed_port()}", "--timeout", "2", "studies", expect=3)
    assert "cannot reach" in r.stderr and "Traceback" not in r.stderr


def test_pause_resume_complete_and_studies_by_state(cli):
    ids = {n: make_study(cli, n)["id"] for n in ("a", "b", "c")}
    paused = cli.json("pause", "b")
    assert_component(paused, "Study")
    assert paused["state"] == "paused" and paused["id"] == ids["b"]
    assert cli("complete", "c").stdout == f"study {ids['c']} 'c': completed\n"
    for state, names in (("active", ["a"]), ("paused", ["b"]), ("completed", ["c"])):
        listed = cli.json("studies", "--state", state)
        assert_response(listed, "/v1/studies")
        assert [s["name"] for s in listed["studies"]] == names
    text = cli("studies").stdout
    assert "STATE" in text and "paused" in text and "completed" in text
    assert "state     paused" in cli("show", "b").stdout
    r = cli("ask", "b", expect=4)
    assert "no trial handed out: study_paused" in r.stderr
    assert cli.json("resume", "b")["state"] == "active"
    cli("ask", "b")
    r = cli("resume", "c", expect=1)
    assert "409 conflict" in r.stderr and "completed" in r.stderr
    r = cli("--json", "ask", "c", expect=4)
    assert json.loads(r.stdout)["status"] == "study_completed"
    # watch ends by itself at a completed study with no pending trial
    assert "state     completed" in cli("watch", "c", "--interval", "0.1").stdout
    cli("studies", "--state", "done", expect=2)
    cli("pause", "missing", expect=1)


def test_best_on_a_study_without_completed_trials(cli):
    make_study(cli)
    r = cli("best", "cli", expect=1)
    assert "no completed trial yet" in r.stderr


def test_delete(cli):
    make_study(cli)
    assert cli("delete", "cli").stdout == "deleted study 1 'cli'\n"
    assert cli("--json", "delete", "cli", expect=1).stdout == ""
    assert cli.json("studies")["studies"] == []


def test_watch(cli, d):
    make_study(cli, "w", "--max-trials", "3")
    client = kbandit.Client(d.url, d.token)
    s = client.study("w")
    s.ask()[0].tell(0.5)
    once = cli.json("watch", "w", "--once")
    assert_component(once, "Study")
    text = cli("watch", "w", "--once").stdout
    assert "pending 0  completed 1  failed 0  expired 0  (total 1 of max 3)" in text
    assert "best      0.5 (trial 1)" in text and "engine    epoch" in text
    assert "\x1b[" not in text  # not a terminal: no screen control
    proc = subprocess.Popen([sys.executable, "-m", "kbandit", "--json", "watch", "w",
                             "--interval", "0.2"], env=cli.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    for t in s.ask(count=2):
        t.tell(1.0)
    out, err = proc.communicate(timeout=30)  # max_trials handed out, none pending: ends
    assert proc.returncode == 0, err
    frames = [json.loads(line) for line in out.splitlines()]
    for f in frames:
        assert_component(f, "Study")
    assert len(frames) >= 2 and frames[-1]["progress"]["trials"]["completed"] == 3


def test_pip_install_into_a_venv(tmp_path):
    """Installs the package offline (the venv sees the system's setuptools) from a copy
    of its source, then runs the console script and imports the installed package."""
    src = tmp_path / "src"
    shutil.copytree(CLIENT_SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                   "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--no-index", "--no-build-isolation", str(src)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    r = subprocess.run([str(venv / "bin" / "kbandit"), "--help"], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0 and "exit status:" in r.stdout
    r = subprocess.run([str(venv / "bin" / "python"), "-c",
                        "import kbandit; print(kbandit.__file__)"],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert str(venv) in r.stdout, r.stdout + r.stderr


def _closed_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_kernel_line_shows_the_categorical_mix_only_when_on():
    """The human `show` output's kernel line (kbandit/render.py): the additive categorical
    term's share appears when the engine reports one above 0 and is left out at 0."""
    from kbandit import render
    h = dict(fitted=True, fits=3, lengthscales=[0.5, 1000.0], kernel_variance=1.2, noise=0.1)
    off = render._engine_lines({"hyperparameters": dict(h, categorical_mix=0.0)})[-1]
    on = render._engine_lines({"hyperparameters": dict(h, categorical_mix=0.42)})[-1]
    assert off.endswith("variance 1.2, noise 0.1"), off
    assert on == off + ", categorical mix 0.42", on


def test_kernel_line_shows_the_interior_prior_only_when_on():
    """The kernel line shows a candidate set's interior prior height when it is not 0."""
    from kbandit import render
    h = dict(fitted=True, fits=3, lengthscales=[0.5], kernel_variance=1.2, noise=0.1,
             categorical_mix=0.0)
    off = render._engine_lines({"hyperparameters": dict(h, interior_prior=0.0)})[-1]
    on = render._engine_lines({"hyperparameters": dict(h, interior_prior=0.75)})[-1]
    assert off.endswith("variance 1.2, noise 0.1"), off
    assert on == off + ", interior prior 0.75", on
