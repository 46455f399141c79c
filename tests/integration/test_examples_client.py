"""This file contains the test of examples/sklearn_tune.py, the Python client example:
a brief real tuning run (scikit-learn SVC on digits, worker processes) against a daemon."""
import json
import os
import subprocess
import sys

from conftest import REPO


def test_sklearn_tune(daemons):
    d = daemons(token="sklearn-token-0123456")
    cmd = [sys.executable, str(REPO / "examples" / "sklearn_tune.py"), "--url", d.url,
           "--trials", "8", "--workers", "2"]
    r = subprocess.run(cmd, env=dict(os.environ, KB_TOKEN=d.token), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["completed"] == 8
    assert 0.5 < summary["best"]["value"] <= 1.0  # accuracy; chance is 0.1
    assert set(summary["best"]["params"]) == {"C", "gamma"}
    # A second run continues the same study (found by name) with exactly 8 more trials.
    r = subprocess.run(cmd + ["--workers", "1"], env=dict(os.environ, KB_TOKEN=d.token),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    again = json.loads(r.stdout.strip().splitlines()[-1])
    assert again["study"] == summary["study"] and again["completed"] == 16


def test_sklearn_tune_reports_errors(daemons):
    d = daemons(token="sklearn-token-0123456")
    r = subprocess.run([sys.executable, str(REPO / "examples" / "sklearn_tune.py"), "--url", d.url,
                        "--token", "wrong-token-0123456", "--trials", "1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "401" in r.stderr and "Traceback" not in r.stderr, r.stderr
