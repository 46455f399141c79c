"""Issue 16, fault injection during start-up: the n-th malloc, SQLite xWrite (I/O error or
disk full), SQLite xSync, fdatasync or pthread_create of the daemon's process fails,
counted from the first line of main (KB_FAULT_ARM=start, tests/fault/fault_shim.c),
while the daemon binds its socket, opens a prepared database, starts its threads and
restores its studies; docs/TESTING.md, "Faults during start-up".

The prepared database holds five studies: gp-ucb and sgp-ts on inline candidates, bbkb
on an uploaded candidate set and gp-ucb on a mixed box (float, int, categorical), each
with a snapshot (taken at a clean shutdown) and events after it, and a random study with
events only; the daemon that wrote the last events was killed (SIGKILL), so its WAL is
recovered too. A clean start of a copy gives the baseline: every study's trials and the
choice of one more ask. A second sweep starts on no database at all, so that creating it
and its migrations fail (migrations/*.sql, applied in order, each in a transaction).

For each kind, one start with n = 0 counts the calls (start-up, the checks, shutdown);
then for each n of a sample (or every n with KB_STARTUP_FAULT_ALL=1) a fresh copy is
started with the n-th call failing once. Checked for every n:
  - the daemon either exits during start-up with a non-zero status and an error line in
    its log that says why (never "invalid" data for a malloc fault; the failed thread
    for a thread fault), or (fsync kinds) aborts by design after "fsync failed: aborting", or it
    starts and serves: every study answers its baseline trials and the baseline's next
    choice, or 503 with Retry-After and then the same after that many seconds (the
    rebuild retry); one 500 or dropped connection per request is allowed for the one
    fault when it lands in that request; no hang (every wait is bounded);
  - SIGTERM stops it with status 0 (under `make asan` LeakSanitizer checks that exit,
    and any sanitizer report fails the test);
  - the database passes PRAGMA integrity_check, and a clean restart serves every
    baseline trial unchanged (so every acknowledged tell is there); after a fault while
    migrating, the clean restart brings the schema to the latest version and serves, and
    a tell acknowledged before the fault is there.
"""
import os
import signal
import time
from pathlib import Path

import pytest
import requests

from conftest import (SANITIZED, Daemon, copy_db, db_connect_ro, db_integrity, grid,
                      shutdown_and_check, toy)
from test_faults import FSYNC, SHIM, fresh_study_works, shim_env, shim_lines

KINDS = ["malloc", "write", "full", "sync", "fdatasync", "thread"]
# The first HEAD calls, then SPREAD more spread up to the count: every early failure of
# start-up (options, socket, database, migrations check, registry) and a sample of the
# restores and the shutdown; KB_STARTUP_FAULT_SPREAD=S spreads S points instead, and
# KB_STARTUP_FAULT_ALL=1 runs every n (docs/TESTING.md).
HEAD, SPREAD = (10, 10) if SANITIZED else (15, 15)
SPREAD = int(os.environ.get("KB_STARTUP_FAULT_SPREAD", SPREAD))
ALL = os.environ.get("KB_STARTUP_FAULT_ALL") == "1"
LEASE = 604800  # no lease expires between the runs: the choices stay the baseline's
BOX = {"type": "box", "params": [
    {"name": "lr", "type": "float", "low": 1e-4, "high": 1.0, "log": True},
    {"name": "layers", "type": "int", "low": 1, "high": 6},
    {"name": "act", "type": "categorical", "choices": ["relu", "tanh", "gelu"]}]}


def ok(r, status=(200, 201)):
    assert r.status_code in status, r.text
    return r.json() if r.content else None


def ask_tell(api, sid, asks, tells):
    """Asks `asks` trials and tells the first `tells` of them with toy values."""
    trials = ok(api.post(f"/v1/studies/{sid}/ask", json={"worker": "w", "count": asks}))
    for t in trials["trials"][:tells]:
        ok(api.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": toy(t["x"])}))


def create(api, name, engine, space):
    return ok(api.post("/v1/studies", json={"name": name, "space": space,
                                           "engine": {"name": engine, "settings": {}},
                                           "lease_seconds": LEASE}))["id"]


def prepare(workdir):
    """The database every start of the sweep opens (see the module's docstring)."""
    d = Daemon(workdir).start()
    try:
        api = d.client()
        cands = {"type": "candidates", "candidates": grid(30, 2)}
        cs = ok(api.post("/v1/candidate-sets", json={"rows": grid(25, 2, seed=3),
                                                     "names": ["u", "v"]}))["id"]
        ids = [create(api, "gp", "gp-ucb", cands),
               create(api, "bbkb", "bbkb", {"type": "candidates", "candidate_set": cs}),
               create(api, "box", "gp-ucb", BOX),
               create(api, "sgp", "sgp-ts", cands)]
        for sid in ids:
            ask_tell(api, sid, 4, 4)
        ok(api.post(f"/v1/studies/{ids[0]}/observations",
                    json={"observations": [{"x": cands["candidates"][5], "value": -0.1}]}))
        assert d.stop() == 0  # snapshots every study
        d.start()
        api = d.client()
        for sid in ids:
            ask_tell(api, sid, 3, 2)  # events after the snapshot, one trial pending
        ids.append(create(api, "events-only", "random", cands))
        ask_tell(api, ids[-1], 3, 2)
        d.kill9()  # no snapshot, the WAL left to recover
    finally:
        shutdown_and_check([d])
    return d.db, ids


def trials_of(api, sid):
    return ok(api.get(f"/v1/studies/{sid}/trials?limit=1000"))["trials"]


def next_choice(api, sid):
    t = ok(api.post(f"/v1/studies/{sid}/ask", json={"worker": "w"}))["trials"][0]
    return t["x"], t["params"]


def baseline_of(db, ids, workdir):
    """Every study's trials, its next choice, and the OPENBLAS_CORETYPE the daemon runs
    with (the sweep sets it, so that no start re-executes itself: a fault armed at main
    would be armed again in the new image)."""
    d = Daemon(workdir, db=copy_db(db, workdir)).start()
    try:
        api = d.client()
        base = {sid: trials_of(api, sid) for sid in ids}
        choice = {sid: next_choice(api, sid) for sid in ids}
        core = Daemon._listening_line(d.logs[-1]).get("openblas_coretype")
        assert d.stop() == 0
    finally:
        shutdown_and_check([d])
    return base, choice, core


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    assert SHIM.exists(), f"{SHIM} is not built (make builds it)"
    root = tmp_path_factory.mktemp("startup")
    db, ids = prepare(root / "prepare")
    base, choice, core = baseline_of(db, ids, root / "baseline")
    return {"root": root, "db": db, "ids": ids, "base": base, "choice": choice, "core": core}


def attempt(call, tries):
    """Runs call() until it answers 200, waiting out 503s by their Retry-After and
    allowing `tries` - 1 answers 500 or dropped connections (the one fault may land in
    the request). Returns the last response."""
    deadline = time.monotonic() + (120 if SANITIZED else 60)
    for _ in range(tries + 4):
        try:
            r = call()
        except requests.ConnectionError:
            r = None
        if r is not None and r.status_code == 503:
            wait = int(r.headers["Retry-After"])
            assert 1 <= wait <= 30, r.headers
            assert time.monotonic() + wait < deadline, "a study kept answering 503"
            time.sleep(wait)
            continue
        if r is not None and r.status_code == 200:
            return r
        tries -= 1
        assert tries > 0, r.text if r is not None else "connection dropped twice"
    raise AssertionError("no answer but 503s")


def serves_baseline(api, prepared):
    """Every study answers its baseline trials, and its next ask hands out the baseline's
    choice. That trial is read back rather than taken from the ask's answer: an ask
    answered 500 (the fault in its answer) may have been applied, and the retry then
    hands out the choice after it."""
    for sid in prepared["ids"]:
        base = prepared["base"][sid]
        trials = lambda: api.get(f"/v1/studies/{sid}/trials?limit=1000")
        assert attempt(trials, 2).json()["trials"] == base, sid
        attempt(lambda: api.post(f"/v1/studies/{sid}/ask", json={"worker": "w"}), 2)
        now = attempt(trials, 2).json()["trials"]
        assert now[:len(base)] == base, sid
        assert (now[len(base)]["x"], now[len(base)]["params"]) == prepared["choice"][sid], sid


def startup_env(prepared, spec):
    env = shim_env(spec, arm_at_start=True)
    if prepared["core"]:
        env["OPENBLAS_CORETYPE"] = prepared["core"]
    return env


def exited_clearly(d, kind):
    """A daemon that stopped during start-up said why, with a non-zero status."""
    rc = d.exit_codes[-1]
    log = d.stderr()
    if rc == -signal.SIGABRT:
        assert kind in FSYNC and "fsync failed: aborting" in log, log[-3000:]
    else:
        assert isinstance(rc, int) and rc > 0, (rc, log[-3000:])
        errors = [line for line in log.splitlines() if '"level":"error"' in line]
        assert errors, log[-3000:]
        if kind == "thread":  # the reason, not stale bytes of an unset message
            assert "thread" in errors[-1], errors  # "cannot start the HTTP daemon" says which
        if kind == "malloc":  # never blamed on the data
            assert not [e for e in errors if "invalid" in e or "malformed" in e], errors


def check_then_stop(d, kind, check):
    """Runs check() on the started daemon d, then stops it; returns check()'s result (None
    when the daemon aborted) and whether it aborted. An fsync fault aborts the daemon by
    design (after logging "fsync failed: aborting"), which may cut the check short: its
    requests then fail while the process is still dying."""
    result = None
    try:
        result = check()
    except (requests.ConnectionError, AssertionError):
        if kind not in FSYNC or "fsync failed: aborting" not in d.stderr():
            raise
    rc = d.stop() if d.running else d.proc.wait(30)
    d.proc = None
    if rc == -signal.SIGABRT:
        assert kind in FSYNC and "fsync failed: aborting" in d.stderr(), d.stderr()[-3000:]
    else:
        assert rc == 0, d.stderr()[-3000:]
    return result, rc == -signal.SIGABRT


def database_errors_say_why(d, kind):
    """Under a malloc fault, every "database error" line of the log says out of memory."""
    if kind == "malloc":
        for line in d.stderr().splitlines():
            assert '"msg":"database error"' not in line or "out of memory" in line, line


def start_with_fault(prepared, kind, n):
    """One point of the sweep; returns what happened ('exited', 'aborted', 'served'). A
    failed check names the point (KIND:n, for KB_FAULT to replay it)."""
    try:
        return start_one_with_fault(prepared, kind, n)
    except AssertionError as e:
        raise AssertionError(f"at {kind}:{n}: {e}") from e


def start_one_with_fault(prepared, kind, n):
    workdir = prepared["root"] / f"{kind}-{n}"
    d = Daemon(workdir, db=copy_db(prepared["db"], workdir),
               env=startup_env(prepared, f"{kind}:{n}"))
    started = [d]
    try:
        d.start(expect_fail=True)
        if d.proc is None:
            exited_clearly(d, kind)
            outcome = "exited"
        else:
            _, aborted = check_then_stop(d, kind, lambda: serves_baseline(d.client(), prepared))
            outcome = "aborted" if aborted else "served"
        injected = bool(shim_lines(d, "fault injected"))
        database_errors_say_why(d, kind)
        assert db_integrity(d.db) == [("ok",)]
        d.env = None
        d.start()
        api = d.client()
        for sid in prepared["ids"]:
            now = {t["id"]: t for t in trials_of(api, sid)}
            for t in prepared["base"][sid]:
                assert now.get(t["id"]) == t, (kind, n, sid, t, now.get(t["id"]))
        assert d.stop() == 0
    finally:
        shutdown_and_check(started)
    return outcome, injected


def count_calls(prepared, kind, fresh=False):
    """Calls of kind in one run without a fault: a start on the prepared database (or
    none, `fresh`), its checks and the shutdown."""
    workdir = prepared["root"] / f"{kind}-count{'-fresh' if fresh else ''}"
    d = Daemon(workdir, db=None if fresh else copy_db(prepared["db"], workdir),
               env=startup_env(prepared, f"{kind}:0"))
    try:
        d.start()
        if fresh:
            fresh_study_works(d.client())
        else:
            serves_baseline(d.client(), prepared)
        assert d.stop() == 0
    finally:
        shutdown_and_check([d])
    return shim_lines(d, "fault calls")[-1]["calls"]


def migrate_with_fault(prepared, kind, n):
    """One point of the sweep over a start on no database."""
    d = Daemon(prepared["root"] / f"fresh-{kind}-{n}", env=startup_env(prepared, f"{kind}:{n}"))
    acked = None
    try:
        d.start(expect_fail=True)
        if d.proc is None:
            exited_clearly(d, kind)
        else:
            acked, _ = check_then_stop(d, kind, lambda: fresh_study_works(d.client()))
        database_errors_say_why(d, kind)
        if d.db.exists():
            assert db_integrity(d.db) == [("ok",)]
        d.env = None
        d.start()
        con = db_connect_ro(d.db)
        latest = len(list((Path(__file__).resolve().parents[2] / "migrations").glob("*.sql")))
        assert con.execute("PRAGMA user_version").fetchone()[0] == latest
        con.close()
        api = d.client()
        if acked:
            r = api.get(f"/v1/studies/{acked[0]}/trials/{acked[1]}")
            assert r.status_code == 200 and r.json()["value"] == 9.0, r.text
        fresh_study_works(api, name="restarted")
        assert d.stop() == 0
    finally:
        shutdown_and_check([d])
    return bool(shim_lines(d, "fault injected"))


def points(total):
    if ALL:
        return list(range(1, total + 1))
    step = max(1, -(-(total - HEAD) // SPREAD))  # rounded up: at most SPREAD points
    return list(range(1, min(HEAD, total) + 1)) + list(range(HEAD + step, total + 1, step))


@pytest.mark.parametrize("kind", KINDS)
def test_fault_during_startup(prepared, kind):
    total = count_calls(prepared, kind)
    assert total > 0, f"start-up made no {kind} call"
    sweep = points(total)
    runs = [start_with_fault(prepared, kind, n) for n in sweep]
    outcomes = {o: sum(1 for r in runs if r[0] == o) for o in ("exited", "aborted", "served")}
    print(f"\nstart-up {kind}: {total} calls, {len(sweep)} points, "
          f"{sum(r[1] for r in runs)} injected, {outcomes}")
    assert sum(r[1] for r in runs) >= len(sweep) // 2, runs


@pytest.mark.parametrize("kind", ["malloc", "write", "full", "sync", "fdatasync", "thread"])
def test_fault_while_creating_the_database(prepared, kind):
    total = count_calls(prepared, kind, fresh=True)
    sweep = points(total)
    injected = sum(migrate_with_fault(prepared, kind, n) for n in sweep)
    print(f"\nfresh database {kind}: {total} calls, {len(sweep)} points, {injected} injected")
    assert injected >= len(sweep) // 2
