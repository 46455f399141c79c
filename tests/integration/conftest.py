"""This file contains the fixtures of the integration suite: it starts the real kbanditd.

Each daemon runs the binary named by $KB_DAEMON (default build/kbanditd under the repo
root) with --listen 127.0.0.1:0 and a database in the test's temporary directory. The port
is read back from the daemon's start-up JSON log line {"msg":"listening","port":N} on
stderr. stderr goes to a file (never a pipe, which would block a chatty daemon).

Invariants enforced for every test:
  - every daemon a test started is stopped at teardown (SIGTERM, then SIGKILL) and its
    stderr is scanned for sanitizer reports; any report fails the test;
  - a daemon stopped with SIGTERM must exit cleanly (status 0) within the time limit;
  - every HTTP response a Client sees is validated against openapi.yaml (route + method
    + status -> schema) by a requests response hook, see openapi_check.py, and every
    error response must have the {"error": {"code", "message", "field"}} shape.
"""
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import requests

from openapi_check import load_spec

REPO = Path(__file__).resolve().parents[2]
SANITIZED = os.environ.get("KB_SANITIZED") == "1"
START_TIMEOUT = 60 if SANITIZED else 20
STOP_TIMEOUT = 30 if SANITIZED else 10
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "LeakSanitizer",
                     "ERROR: ThreadSanitizer", "WARNING: ThreadSanitizer")  # races are WARNINGs
ENGINES = ["random", "bbkb", "bkb", "gp-ucb", "gp-bucb", "gp-ts", "sgp-ts", "pi-gp-ucb"]


def daemon_binary():
    p = Path(os.environ.get("KB_DAEMON", "build/kbanditd"))
    if not p.is_absolute():
        p = p if p.exists() else REPO / p
    return p.resolve()


def pytest_terminal_summary(terminalreporter):
    """List the documented (operation, status) pairs no test response exercised."""
    spec = load_spec()
    if spec is None or not spec.seen:
        return
    missing = []
    for template, item in spec.doc.get("paths", {}).items():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            for status in op["responses"]:
                if (method, template, str(status)) not in spec.seen and str(status) not in ("500", "503"):
                    missing.append(f"{method.upper()} {template} {status}")
    total = len(spec.seen) + len(missing)
    terminalreporter.write_line(f"openapi: {len(spec.seen)}/{total} documented responses exercised "
                                "(500/503 not counted)")
    if missing and terminalreporter.config.getoption("verbose") > 0:
        terminalreporter.write_line("  not exercised: " + ", ".join(missing))


# ------------------------------------------------------------------------ HTTP client

class Client(requests.Session):
    """A session bound to one daemon: relative URLs, optional bearer token, and the
    OpenAPI response hook on every response."""

    def __init__(self, base_url, token=None, validate=True):
        super().__init__()
        self.base_url = base_url
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"
        spec = load_spec()
        if validate and spec is not None:
            self.hooks["response"].append(spec.hook)

    def request(self, method, url, *args, **kwargs):
        if url.startswith("/"):
            url = self.base_url + url
        kwargs.setdefault("timeout", 120 if SANITIZED else 60)
        return super().request(method, url, *args, **kwargs)


# ---------------------------------------------------------------------------- daemon

class Daemon:
    """One kbanditd process. start() blocks until the listening line is logged."""

    def __init__(self, workdir, db=None, token=None, args=(), listen="127.0.0.1:0",
                 env=None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.db = Path(db) if db else self.workdir / "kbandit.db"
        self.token = token
        self.args = list(args)
        self.listen = listen
        self.env = env
        self.proc = None
        self.port = None
        self.logs = []          # one stderr file per start
        self.exit_codes = []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def command(self):
        cmd = [str(daemon_binary()), "--listen", self.listen, "--db", str(self.db)]
        if self.token is not None:
            tf = self.workdir / "token"
            tf.write_text(self.token + "\n")
            tf.chmod(0o600)
            cmd += ["--token-file", str(tf)]
        return cmd + self.args

    def start(self, expect_fail=False):
        log = self.workdir / f"stderr.{len(self.logs)}.log"
        self.logs.append(log)
        env = dict(os.environ)
        for k, v in (self.env or {}).items():  # None: unset
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                         stdout=err, stderr=err, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            line = self._listening_line(log)
            if line is not None:
                self.port = int(line["port"])
                return self
            if self.proc.poll() is not None:
                self.exit_codes.append(self.proc.returncode)
                self.proc = None
                if expect_fail:
                    return self
                raise RuntimeError(f"kbanditd exited at start-up ({self.exit_codes[-1]}):\n"
                                   + log.read_text(errors="replace"))
            time.sleep(0.02)
        self.kill9()
        raise RuntimeError("kbanditd did not log its listening line:\n"
                           + log.read_text(errors="replace"))

    @staticmethod
    def _listening_line(log):
        for raw in log.read_text(errors="replace").splitlines():
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("msg") == "listening" and "port" in msg:
                return msg
        return None

    def client(self, token=None, validate=True):
        return Client(self.url, token if token is not None else self.token, validate)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        """Signal the daemon and wait; returns the exit status (SIGKILL after timeout)."""
        if self.proc is None:
            return None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.exit_codes.append(("timeout", rc))
            self.proc = None
            return "timeout"
        self.exit_codes.append(rc)
        self.proc = None
        return rc

    def kill9(self):
        return self.stop(signal.SIGKILL)

    def stderr(self):
        return "".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def sanitizer_reports(self):
        text = self.stderr()
        return [m for m in SANITIZER_MARKERS if m in text]


@pytest.fixture
def daemons(tmp_path):
    """Factory: daemons(**kw) starts a new daemon (see Daemon). At teardown every daemon
    is stopped and checked for sanitizer reports and unclean SIGTERM exits."""
    started = []

    def make(name=None, start=True, **kw):
        d = Daemon(tmp_path / (name or f"d{len(started)}"), **kw)
        started.append(d)
        return d.start() if start else d

    yield make
    shutdown_and_check(started)


def copy_db(src, dst_dir):
    """Copies an SQLite database with its -wal and -shm files into dst_dir."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        p = src.parent / (src.name + suffix)
        if p.exists():
            shutil.copy2(p, dst_dir / p.name)
    return dst_dir / src.name


def shutdown_and_check(started):
    """Stop every daemon still running; fail on sanitizer reports or unclean exits."""
    problems = []
    for d in started:
        if d.running:
            rc = d.stop()
            if rc not in (0, -signal.SIGTERM):
                problems.append(f"{d.workdir.name}: exit status {rc} after SIGTERM; "
                                f"stderr ends:\n{d.stderr()[-4000:]}")
        reports = d.sanitizer_reports()
        if reports:
            problems.append(f"{d.workdir.name}: sanitizer report {reports}:\n{d.stderr()[-8000:]}")
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture
def daemon(daemons):
    return daemons()


@pytest.fixture
def api(daemon):
    return daemon.client()


# --------------------------------------------------------------------------- helpers

def fill(obj, ids):
    """Substitute {A}-style placeholders; a JSON string "{P}" becomes the integer id."""
    if isinstance(obj, str):
        if obj.startswith("{") and obj.endswith("}") and obj[1:-1] in ids:
            return ids[obj[1:-1]]
        return obj.format(**ids)
    if isinstance(obj, list):
        return [fill(v, ids) for v in obj]
    if isinstance(obj, dict):
        return {k: fill(v, ids) for k, v in obj.items()}
    return obj


def error_of(resp):
    """The {"code","message","field"} object of an error response (asserts the shape)."""
    body = resp.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), resp.text
    err = body["error"]
    assert isinstance(err.get("code"), str) and isinstance(err.get("message"), str), resp.text
    assert "field" in err and (err["field"] is None or isinstance(err["field"], str)), resp.text
    return err


def grid(rows, dim, seed=1):
    """A deterministic candidate set (no two rows equal)."""
    out = []
    for i in range(rows):
        out.append([round(((i + 1) * (k + 2) * 0.6180339887 + seed * 0.1) % 1.0 * 10 - 5, 6)
                    for k in range(dim)])
        out[-1][0] = round(out[-1][0] + i * 1e-3, 6)
    return out


def create_study(api, name, space=None, engine="random", settings=None, expect=201, **extra):
    body = {"name": name,
            "space": space or {"type": "candidates", "candidates": grid(30, 2)},
            "engine": {"name": engine, "settings": settings or {}}}
    body.update(extra)
    r = api.post("/v1/studies", json=body)
    assert r.status_code == expect, r.text
    return r.json()


def try_create_engine_study(api, name, engine, space, settings=None, **extra):
    """Create a study; an engine the daemon does not know fails the test (an engine dropped
    from the registry must not lose its tests silently)."""
    body = {"name": name, "space": space, "engine": {"name": engine, "settings": settings or {}}}
    body.update(extra)
    r = api.post("/v1/studies", json=body)
    if r.status_code == 400 and error_of(r).get("field") == "engine.name":
        pytest.fail(f"engine {engine!r} not in this daemon ({error_of(r)['message']})")
    assert r.status_code == 201, r.text
    return r.json()


def ask(api, sid, worker="w", count=1, **extra):
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker": worker, "count": count, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def tell(api, sid, tid, value, expect=200):
    r = api.post(f"/v1/studies/{sid}/trials/{tid}/tell", json={"value": value})
    assert r.status_code == expect, r.text
    return r.json()


def toy(x):
    """Objective used by the tests: smooth, deterministic, maximum near x = 0.3."""
    return -sum((v - 0.3) ** 2 for v in x)


# ---------------------------------------------------------------------------- SQLite

def db_connect_ro(path):
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)


def db_dump(path):
    """Every user table of the database, rows sorted (tables may be WITHOUT ROWID)."""
    con = db_connect_ro(path)
    try:
        out = {}
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name")]
        for t in tables:
            out[t] = sorted(con.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr)
        return out
    finally:
        con.close()


def db_trials(path):
    """Rows of the trials table as dicts. Trial ids are per study: key rows by
    (study_id, id). The table is 'trials', or else one with id, state and value columns."""
    con = db_connect_ro(path)
    con.row_factory = sqlite3.Row
    try:
        tables = [r[0] for r in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        def cols(t):
            return {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')}
        name = "trials" if "trials" in tables else next(
            (t for t in tables if {"id", "state", "value"} <= cols(t)), None)
        assert name is not None, f"no trials table in {tables}"
        return [dict(r) for r in con.execute(f'SELECT * FROM "{name}" ORDER BY study_id, id')]
    finally:
        con.close()


def db_integrity(path):
    con = db_connect_ro(path)
    try:
        return con.execute("PRAGMA integrity_check").fetchall()
    finally:
        con.close()


def metrics(api):
    """Prometheus text exposition -> {(name, labels): value} (labels as a sorted tuple)."""
    r = api.get("/metrics")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/plain")
    out = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?', line)
        assert m, f"not Prometheus text format: {line!r}"
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out
