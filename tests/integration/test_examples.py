"""This file contains the tests of examples/: the curl quick start and the standard-library
worker loop, each run against a real daemon."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import REPO, error_of

EXAMPLES = REPO / "examples"


def engine_available(api, engine):
    r = api.post("/v1/studies", json={"name": f"probe-{engine}", "space": {
        "type": "candidates", "candidates": [[0.0]]}, "engine": {"name": engine}})
    if r.status_code == 400 and error_of(r)["field"] == "engine.name":
        return False
    assert r.status_code == 201, r.text
    assert api.delete(f"/v1/studies/{r.json()['id']}").status_code == 204
    return True


def run_quickstart(d, token=None):
    for tool in ("curl", "jq"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} not found: run scripts/install-deps")
    env = dict(os.environ, KB_URL=d.url, KB_TOKEN=token if token is not None else d.token or "")
    return subprocess.run(["bash", str(EXAMPLES / "quickstart.sh")], env=env, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("auth", [False, True])
def test_quickstart_script_runs_again(daemons, auth):
    d = daemons(token="quick-token-0123456" if auth else None)
    api = d.client()
    for run, completed in ((1, 2), (2, 4)):
        r = run_quickstart(d)
        assert r.returncode == 0, f"run {run}: {r.stdout}{r.stderr}"
        (study,) = api.get("/v1/studies").json()["studies"]
        assert study["name"] == "quickstart"
        assert f"study {study['id']} ({'created' if run == 1 else 'exists'}" in r.stdout
        s = api.get(f"/v1/studies/{study['id']}").json()
        assert s["progress"]["trials"]["completed"] == completed
        best = json.loads(r.stdout.strip().splitlines()[-2])
        assert best["value"] == s["progress"]["best"]["value"]


def test_quickstart_shows_the_error_body(daemons):
    d = daemons(token="quick-token-0123456")
    r = run_quickstart(d, token="wrong-token-0123456")
    assert r.returncode == 1, r.stdout + r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("quickstart.sh: GET /v1/studies?name=quickstart -> HTTP 401: "), r.stderr
    body = json.loads(line.split("HTTP 401: ", 1)[1])
    assert body["error"]["code"] == "unauthorized"


def test_readme_curl_steps(daemon):
    """The README's curl walk-through, run as written (ids come from the previous step)."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Talking to the daemon with curl", 1)[1]
    block = re.search(r"\n\n((?:    .*\n|\n)+)", section).group(1)
    script = "\n".join(line[4:] for line in block.splitlines())
    assert "URL=http://127.0.0.1:8080" in script and "$SID" in script and "$TRIAL" in script
    script = script.replace("URL=http://127.0.0.1:8080", f"URL={daemon.url}")
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    api = daemon.client()
    (study,) = api.get("/v1/studies").json()["studies"]
    best = api.get(f"/v1/studies/{study['id']}/best").json()
    assert best["value"] == 0.93 and json.loads(r.stdout.strip().splitlines()[-1])["id"] == study["id"]


@pytest.mark.parametrize("engine", ["random", "bbkb"])
def test_worker_loop(daemons, engine):
    d = daemons(token="worker-token-0123456")
    api = d.client()
    if not engine_available(api, engine):
        pytest.fail(f"engine {engine!r} not in this daemon")
    cmd = [sys.executable, str(EXAMPLES / "worker.py"), "--url", d.url, "--study", "toy",
           "--engine", engine, "--trials", "30"]
    env = dict(os.environ, KB_TOKEN=d.token)
    procs = [subprocess.Popen(cmd + ["--worker", f"w{i}"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert reports[0]["study"] == reports[1]["study"]
    sid = reports[0]["study"]
    s = api.get(f"/v1/studies/{sid}").json()
    done = s["progress"]["trials"]["completed"]
    assert done >= 30 and done == sum(r["told"] for r in reports)
    assert s["progress"]["trials"]["pending"] == 0
    best = api.get(f"/v1/studies/{sid}/best").json()
    assert -400 < best["value"] <= -0.397887 + 1e-6  # negated Branin: max -0.397887


def test_worker_reports_errors(daemons):
    d = daemons(token="right-token-0123456")
    r = subprocess.run([sys.executable, str(EXAMPLES / "worker.py"), "--url", d.url, "--token", "wrong",
                        "--engine", "random", "--trials", "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "401" in r.stderr and "Traceback" not in r.stderr, r.stderr
