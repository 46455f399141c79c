"""This file contains the tests of the OpenBLAS kernel choice at start-up (issue 14 item
3): started without OPENBLAS_CORETYPE on an AVX2 + FMA CPU where OpenBLAS fell back to
kernels without AVX2, kbanditd executes itself once with OPENBLAS_CORETYPE=Haswell, says
so in its log, and runs with the variable in its environment; a value the user set, or a
family with AVX2 kernels that OpenBLAS chose, is kept.

OpenBLAS's fallback happens only on CPU models it does not know, so the tests that need
it put a shim in LD_PRELOAD whose openblas_get_corename() answers "Prescott" while the
variable is unset (as Debian's OpenBLAS does on such a CPU) and the real name after.
"""
import json
import os
import subprocess

import pytest

from conftest import SANITIZED

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
char *openblas_get_corename(void)
{
    if (!getenv("OPENBLAS_CORETYPE"))
        return "Prescott";
    char *(*real)(void) = (char *(*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
    return real();
}
"""

REEXEC_MSG = "executing again with OPENBLAS_CORETYPE set"


def cpu_has_avx2_fma():
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    return "avx2" in flags and "fma" in flags


@pytest.fixture
def shim(tmp_path):
    src, lib = tmp_path / "shim.c", tmp_path / "shim.so"
    src.write_text(SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], check=True)
    return str(lib)


def shim_env(shim, **extra):
    env = {"LD_PRELOAD": shim, **extra}
    if SANITIZED:  # ASan wants its runtime first; the shim only wraps one OpenBLAS call
        env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    return env


def log_lines(daemon):
    return [json.loads(line) for line in daemon.stderr().splitlines() if line.startswith("{")]


def listening(daemon):
    return next(line for line in log_lines(daemon) if line["msg"] == "listening")


def environ_of(daemon):
    with open(f"/proc/{daemon.proc.pid}/environ", "rb") as f:
        pairs = [p.split(b"=", 1) for p in f.read().split(b"\0") if b"=" in p]
    return {k.decode(): v.decode() for k, v in pairs}


def test_reexec_when_openblas_falls_back(daemons, shim):
    d = daemons(env=shim_env(shim, OPENBLAS_CORETYPE=None))
    reexecs = [line for line in log_lines(d) if line["msg"] == REEXEC_MSG]
    line = listening(d)
    assert d.client().get("/healthz").status_code == 200
    if not cpu_has_avx2_fma():  # the rule needs both: nothing to improve on this CPU
        assert reexecs == [] and line["openblas_coretype"] is None
        assert "OPENBLAS_CORETYPE" not in environ_of(d)
        return
    assert [(r["detected"], r["coretype"]) for r in reexecs] == [("Prescott", "Haswell")]
    assert (line["blas_core"], line["openblas_coretype"]) == ("Haswell", "Haswell")
    assert environ_of(d)["OPENBLAS_CORETYPE"] == "Haswell"  # same pid, new image


def test_user_choice_is_kept(daemons, shim):
    d = daemons(env=shim_env(shim, OPENBLAS_CORETYPE="Sandybridge"))
    assert not [line for line in log_lines(d) if line["msg"] == REEXEC_MSG]
    line = listening(d)
    assert (line["blas_core"], line["openblas_coretype"]) == ("Sandybridge", "Sandybridge")
    assert environ_of(d)["OPENBLAS_CORETYPE"] == "Sandybridge"


def test_openblas_own_choice_without_shim(daemons):
    """No shim: the real detection. Whatever it is, the log and the environment agree,
    and the daemon executes itself at most once."""
    d = daemons(env={"OPENBLAS_CORETYPE": None})
    reexecs = [line for line in log_lines(d) if line["msg"] == REEXEC_MSG]
    line = listening(d)
    assert len(reexecs) <= 1
    env = environ_of(d).get("OPENBLAS_CORETYPE")
    assert line["openblas_coretype"] == env
    assert (env == "Haswell") == bool(reexecs)
    assert line["blas_core"]
