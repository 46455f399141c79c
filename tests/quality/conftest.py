"""Shared by the quality tests: bench/quality (run.py, functions.py) on the import path,
and a `daemon` fixture: one BUILD/kbanditd per test module, BUILD being the directory of
KB_BENCH (tests/run-all sets it; build/ by default)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "quality"))
import run  # noqa: E402

DAEMON = os.path.join(os.path.dirname(
    os.environ.get("KB_BENCH", os.path.join(ROOT, "build", "kb-bench"))), "kbanditd")


@pytest.fixture(scope="module")
def daemon():
    d = run.Daemon(DAEMON)
    yield d
    d.close()
