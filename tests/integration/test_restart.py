"""This file contains the restart tests of issue 16 item 5, its box pool memory limit, and
issue 13's restart of a study that refines its box pool (the same asks after a replay and
after a restore from the shutdown snapshot as from the engine that never restarted).

The daemon listens before its studies are restored: /healthz answers at once and counts
the studies restored / still restoring / failed; restore threads rebuild studies in id
order; an operation on a study not restored yet restores it first (with the same asks as
a background restore); listing works meanwhile (progress null where not restored);
creation during the restore gets a new id; SIGTERM during the restore exits 0.

A real database that is slow to restore is built once per module (no test hook): STUDIES
bbkb box studies of ~480 events each, stopped by kill -9 so that no shutdown snapshot is
written and every study replays its events (about 1 s each; under 500 events, so no
periodic snapshot either). Each test runs on its own copy.
"""
import json
import random
import signal
import sqlite3
import threading
import time

import pytest

from conftest import (SANITIZED, Daemon, ask, copy_db, create_study, db_dump, error_of, metrics,
                      shutdown_and_check, tell, toy)

STUDIES = 8
TRIALS = 120 if SANITIZED else 240   # per study: an ask and a tell event each
RESTORE_TIMEOUT = 600 if SANITIZED else 180
BOX = {"type": "box", "params": [{"name": f"p{i}", "type": "float", "low": 0, "high": 1}
                                 for i in range(4)]}


def drive(api, sid, errors):
    """TRIALS trials through batch asks and batch tells; a failure goes to errors."""
    try:
        drive_trials(api, sid)
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append(repr(e))


def drive_trials(api, sid):
    done = 0
    while done < TRIALS:
        res = ask(api, sid, worker="build", count=min(4, TRIALS - done))
        items = [{"trial_id": t["id"], "value": toy(t["x"])} for t in res["trials"]]
        r = api.post(f"/v1/studies/{sid}/tell", json={"results": items})
        assert r.status_code == 200 and all(x["status"] == 200 for x in r.json()["results"]), r.text
        done += len(items)


@pytest.fixture(scope="module")
def slow_db(tmp_path_factory):
    """(database path, [(id, name)]) of the module's slow-to-restore database."""
    work = tmp_path_factory.mktemp("slow-db")
    d = Daemon(work / "build").start()
    try:
        api = d.client()
        studies = [(create_study(api, f"slow-{k}", BOX, engine="bbkb", settings={"seed": k})["id"],
                    f"slow-{k}") for k in range(STUDIES)]
        errors = []
        threads = [threading.Thread(target=drive, args=(d.client(), sid, errors))
                   for sid, _ in studies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for sid, _ in studies:
            counts = api.get(f"/v1/studies/{sid}").json()["progress"]["trials"]
            assert counts["completed"] == TRIALS, counts
        assert d.kill9() == -signal.SIGKILL
    finally:
        shutdown_and_check([d])
    return d.db, studies


def healthz_studies(d):
    r = d.client().get("/healthz")
    assert r.status_code == 200, r.text
    return r.json()["studies"]


def wait_restored(d):
    deadline = time.monotonic() + RESTORE_TIMEOUT
    while (h := healthz_studies(d))["restoring"]:
        assert time.monotonic() < deadline, h
        time.sleep(0.05)
    return h


def restored_by(d, sid):
    """How the daemon logged the restore of study sid ("background" or "request")."""
    for raw in d.stderr().splitlines():
        try:
            m = json.loads(raw)
        except ValueError:
            continue
        if m.get("msg") == "study restored" and m.get("study") == sid:
            return m["by"]
    return None


def asks(api, sid):
    """Three asks of two: what they hand out (times aside)."""
    return [[(t["id"], t["x"], t["params"]) for t in ask(api, sid, worker="probe", count=2)["trials"]]
            for _ in range(3)]


def start_on_copy(daemons, slow_db, tmp_path, name):
    path, studies = slow_db
    d = daemons(name=name, db=copy_db(path, tmp_path / name))
    return d, studies


def test_healthz_listing_and_creation_while_restoring(daemons, slow_db, tmp_path):
    t0 = time.monotonic()
    d, studies = start_on_copy(daemons, slow_db, tmp_path, "listing")
    h = healthz_studies(d)
    assert time.monotonic() - t0 < 5, "the daemon waited for its studies before listening"
    assert h["restoring"] > 0 and h["failed"] == 0, h
    assert h["restored"] + h["restoring"] == STUDIES, h
    api = d.client()

    # Listing answers at once, from every registered study; progress null = not restored.
    listed = api.get("/v1/studies", params={"limit": 1000}).json()["studies"]
    assert [s["id"] for s in listed] == [sid for sid, _ in studies]
    assert any(s["progress"] is None for s in listed), "listing waited for the restore"
    # The state is read with the config at start-up: filtering by it restores nothing.
    active = api.get("/v1/studies", params={"limit": 1000, "state": "active"}).json()["studies"]
    assert [s["id"] for s in active] == [sid for sid, _ in studies]
    assert any(s["progress"] is None for s in active), "the state filter waited for the restore"

    # Creation during the restore: a new id, and the names of unrestored studies are taken.
    new = create_study(api, "created-while-restoring")
    assert new["id"] > max(sid for sid, _ in studies)
    r = api.post("/v1/studies", json={"name": studies[-1][1], "space": BOX})
    assert r.status_code == 409 and error_of(r)["field"] == "name", r.text

    h = wait_restored(d)
    assert h == {"restored": STUDIES + 1, "restoring": 0, "failed": 0}, h
    listed = api.get("/v1/studies", params={"limit": 1000}).json()["studies"]
    assert all(s["progress"]["trials"]["completed"] == TRIALS for s in listed[:-1]), listed
    assert {restored_by(d, sid) for sid, _ in studies} == {"background"}


def test_unrestored_study_restores_on_first_use_with_the_same_asks(daemons, slow_db, tmp_path):
    last = slow_db[1][-1][0]  # restored last by the background threads (id order)
    a, _ = start_on_copy(daemons, slow_db, tmp_path, "background")
    wait_restored(a)
    assert restored_by(a, last) == "background"
    seq_a = asks(a.client(), last)

    b, _ = start_on_copy(daemons, slow_db, tmp_path, "on-demand")
    assert healthz_studies(b)["restoring"] > 0
    api = b.client()
    s = api.get(f"/v1/studies/{last}").json()  # restores it now, before its turn
    assert s["progress"]["trials"]["completed"] == TRIALS, s
    assert restored_by(b, last) == "request"
    assert healthz_studies(b)["restoring"] > 0, "the restore was not done on first use"
    seq_b = asks(api, last)
    assert seq_a == seq_b
    assert wait_restored(b)["failed"] == 0
    # Restored once: by the request, never again by a restore thread.
    assert sum(f'"study":{last},' in line and "study restored" in line
               for line in b.stderr().splitlines()) == 1


def test_client_finds_an_unrestored_study_with_its_progress(daemons, slow_db, tmp_path):
    """The Python client's lookup by name reads the listing, where a study not restored
    yet has progress null (`kbandit show NAME` then failed with a TypeError): such a
    study is fetched by id, which restores it."""
    import client_util  # noqa: F401 - puts the client on sys.path
    import kbandit
    last = slow_db[1][-1]  # (id, name), restored last by the background threads
    d, _ = start_on_copy(daemons, slow_db, tmp_path, "client")
    assert healthz_studies(d)["restoring"] > 0
    study = kbandit.Client(d.url).find_study(last[1])
    assert study.id == last[0] and study.progress["trials"]["completed"] == TRIALS
    assert restored_by(d, last[0]) == "request"


def test_sigterm_during_restore_exits_cleanly(daemons, slow_db, tmp_path):
    d, studies = start_on_copy(daemons, slow_db, tmp_path, "term")
    assert healthz_studies(d)["restoring"] > 0
    rc = d.stop()
    assert rc == 0, d.stderr()[-3000:]
    assert "restore stopped" in d.stderr()
    d.start()
    assert wait_restored(d) == {"restored": STUDIES, "restoring": 0, "failed": 0}
    api = d.client()
    for sid, _ in studies:
        assert api.get(f"/v1/studies/{sid}").json()["progress"]["trials"]["completed"] == TRIALS
    t = ask(api, studies[0][0])["trials"][0]
    tell(api, studies[0][0], t["id"], 1.0)


def test_study_that_cannot_be_restored_answers_500(daemons, slow_db, tmp_path):
    """Its events no longer replay (a tell of an unknown trial): the others serve on."""
    path, studies = slow_db
    db = copy_db(path, tmp_path / "broken")
    broken = studies[0][0]
    con = sqlite3.connect(db)
    con.execute("UPDATE events SET trial_id = 999999 WHERE study_id = ? AND seq = "
                "(SELECT MIN(seq) FROM events WHERE study_id = ? AND kind = 'tell')",
                (broken, broken))
    con.commit()
    con.close()
    d = daemons(name="broken", db=db)
    api = d.client()
    r = api.get(f"/v1/studies/{broken}")
    assert r.status_code == 500 and "cannot be restored" in error_of(r)["message"], r.text
    assert wait_restored(d) == {"restored": STUDIES - 1, "restoring": 0, "failed": 1}
    r = api.post(f"/v1/studies/{broken}/ask", json={"worker": "w"})
    assert r.status_code == 500, r.text
    r = api.patch(f"/v1/studies/{broken}", json={"state": "paused"})  # all or nothing
    assert r.status_code == 500, r.text
    assert api.get("/v1/studies", params={"state": "paused"}).json()["studies"] == []
    listed = api.get("/v1/studies", params={"limit": 1000}).json()["studies"]
    assert [s["progress"] is None for s in listed] == [True] + [False] * (STUDIES - 1)
    ask(api, studies[1][0])
    assert api.delete(f"/v1/studies/{broken}").status_code == 204
    assert healthz_studies(d) == {"restored": STUDIES - 1, "restoring": 0, "failed": 0}


def test_box_pool_memory_limit(daemons):
    """pool_size x dim over KB_MAX_POOL_POINTS (2^22) is refused at creation, naming the
    field; nothing is created. 65,536 x 1,000 took the daemon to 1.17 GB (issue 16)."""
    d = daemons()
    api = d.client()
    wide = {"type": "box", "params": [{"name": f"p{i}", "type": "float", "low": 0, "high": 1}
                                      for i in range(1000)]}
    before = db_dump(d.db)
    r = api.post("/v1/studies", json={"name": "huge", "space": wide,
                                      "engine": {"name": "random", "settings": {"pool_size": 65536}}})
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["code"] == "invalid" and err["field"] == "engine.settings.pool_size", err
    assert "4194304" in err["message"], err
    assert db_dump(d.db) == before
    assert api.get("/v1/studies").json()["studies"] == []
    # At the limit (64 x 65,536 = 2^22) the study is created; the default pool always fits.
    narrow = {"type": "box", "params": wide["params"][:64]}
    create_study(api, "at-limit", narrow, settings={"pool_size": 65536})
    create_study(api, "widest-default", {"type": "box", "params": wide["params"][:1000]})


MIXED = {"type": "box", "params": [
    {"name": "a", "type": "float", "low": 0, "high": 1},
    {"name": "b", "type": "float", "low": -2, "high": 2},
    {"name": "k", "type": "int", "low": 0, "high": 4},
    {"name": "c", "type": "categorical", "choices": ["x", "y", "z"]}]}
COST = {"x": 0.0, "y": 0.5, "z": 1.0}


def mixed_value(p):
    return -(p["a"] - 0.3) ** 2 - (p["b"] - 0.6) ** 2 - 0.1 * (p["k"] - 2) ** 2 - COST[p["c"]]


def next_asks(api, sid):
    """Three asks of two, never told: the points they hand out."""
    return [[(t["x"], t["params"]) for t in ask(api, sid, worker="probe", count=2)["trials"]]
            for _ in range(3)]


def test_refining_study_restarts_with_the_same_asks(daemons, tmp_path):
    """Issue 13: a gp-ucb box study refines its pool points on the UCB (acq.c) from the
    fitted GP. Two identical studies take the same 40 trials; the second then asks (the
    engine never restarted). The daemon is killed (-9: the first study replays its events)
    and restarted on copies of its database: once right away, once after a SIGTERM (a
    shutdown snapshot, then a restore from it). Both must hand out what the second study
    did, exactly, int and categorical values included."""
    a = daemons(name="first")
    api = a.client()
    sids = [create_study(api, f"refining-{k}", MIXED, engine="gp-ucb",
                         settings={"seed": 5})["id"] for k in range(2)]
    for _ in range(40):
        for sid in sids:
            t = ask(api, sid)["trials"][0]
            tell(api, sid, t["id"], mixed_value(t["params"]))
    check_restarts(daemons, a, sids, tmp_path)


def check_restarts(daemons, a, sids, tmp_path):
    """sids[1]'s next asks, then a kill -9 of daemon a: on copies of its database, sids[0]
    hands out the same after a replay of its events, after a restore from the shutdown
    snapshot, and when that snapshot is damaged (passed over, every event replayed: such
    a study failed for good)."""
    expected = next_asks(a.client(), sids[1])
    assert a.kill9() == -signal.SIGKILL

    replayed = daemons(name="replayed", db=copy_db(a.db, tmp_path / "replayed"))
    assert next_asks(replayed.client(), sids[0]) == expected

    snap = daemons(name="snapshot", db=copy_db(a.db, tmp_path / "snapshot"))
    wait_restored(snap)
    assert snap.stop() == 0
    con = sqlite3.connect(snap.db)
    assert con.execute("SELECT COUNT(*) FROM snapshots WHERE study_id = ?",
                       (sids[0],)).fetchone()[0] == 1
    con.close()
    damaged = copy_db(snap.db, tmp_path / "damaged")
    snap.start()
    assert next_asks(snap.client(), sids[0]) == expected
    con = sqlite3.connect(damaged)
    with con:
        con.execute("UPDATE snapshots SET bytes = substr(bytes, 1, length(bytes) - 9) "
                    "WHERE study_id = ?", (sids[0],))
    con.close()
    d = daemons(name="damaged", db=damaged)
    assert next_asks(d.client(), sids[0]) == expected
    assert "snapshot passed over" in d.stderr()


@pytest.mark.parametrize("engine", ["gp-ucb", "gp-bucb", "gp-ts", "sgp-ts"])
def test_warm_started_study_restarts_with_the_same_asks(daemons, tmp_path, engine):
    """The exact engines take a run of observes as blocks at the next operation (a warm
    start of 600 here: three blocks; later 3 observes between trials: row by row), sgp-ts
    grows its sparse model over them in stages (256, 512, 600 observations). Two
    identical studies take the same calls, the second then asks; after a kill -9 (replay
    of the events) and after a SIGTERM (restore from the shutdown snapshot) the first hands
    out exactly what the second did."""
    rng = random.Random(3)
    warm = []
    for _ in range(600):
        p = {"a": rng.random(), "b": rng.uniform(-2, 2), "k": rng.randrange(5),
             "c": rng.choice("xyz")}
        warm.append({"params": p, "value": mixed_value(p) + 0.01 * rng.gauss(0, 1)})
    a = daemons(name="first")
    api = a.client()
    sids = [create_study(api, f"warm-{k}", MIXED, engine=engine,
                         settings={"seed": 7})["id"] for k in range(2)]
    for sid in sids:
        r = api.post(f"/v1/studies/{sid}/observations", json={"observations": warm})
        assert r.status_code == 200, r.text
    for i in range(12):
        for sid in sids:
            if i == 6:
                r = api.post(f"/v1/studies/{sid}/observations", json={"observations": warm[:3]})
                assert r.status_code == 200, r.text
            t = ask(api, sid)["trials"][0]
            tell(api, sid, t["id"], mixed_value(t["params"]))
    check_restarts(daemons, a, sids, tmp_path)


def test_damaged_database_file_fails_its_studies_for_good(daemons):
    """A damaged page (here the root of the events table) was taken for a passing read
    error: the studies stayed "restoring" for good, answered 503 with Retry-After, and the
    log said only "database read failed". SQLite's SQLITE_CORRUPT is final: the studies
    count as failed, answer 500, and the log gives SQLite's reason (ops review,
    fifty-seventh session)."""
    d = daemons(name="damaged")
    api = d.client()
    sids = [create_study(api, f"s{i}")["id"] for i in range(2)]
    for sid in sids:
        ask(api, sid)
    d.stop()
    con = sqlite3.connect(d.db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page = con.execute("PRAGMA page_size").fetchone()[0]
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    con.close()
    with open(d.db, "r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\xff" * 8)
    d.start()
    assert wait_restored(d) == {"restored": 0, "restoring": 0, "failed": 2}
    r = d.client().get(f"/v1/studies/{sids[0]}")
    assert r.status_code == 500 and "cannot be restored" in error_of(r)["message"], r.text
    failed = [json.loads(line) for line in d.stderr().splitlines()
              if '"study rebuild failed"' in line]
    assert failed and all("malformed" in m.get("reason", "") and m["retried"] is False
                          for m in failed), failed
    m = metrics(d.client())
    assert [m[("kbandit_studies_restore", (("state", s),))] for s in ("restored", "restoring", "failed")] == [0, 0, 2]
    # the 500's log line names its route and study (it gave the message alone)
    logged = [json.loads(line) for line in d.stderr().splitlines() if '"internal error"' in line]
    assert any(m["route"] == "/v1/studies/{study_id}" and m["id"] == sids[0] for m in logged), logged
