"""Issue 16 follow-up: a study whose rebuild failed went offline until a restart. After a
failed write the study is rebuilt from the database; when that rebuild could not read the
database (an I/O error, "database is locked" that goes away), the study was removed from
the registry: 503 once, then 404 for a study that exists. Now it stays registered, answers
503 JSON with Retry-After while the rebuild fails, and the next request after a bounded
backoff rebuilds it.

The storage failure is played by the fault shim (tests/fault/fault_shim.c, built as
kb-fault.so beside the daemon) without KB_FAULT: while a switch file exists, every SQLite
statement naming the events table fails, so the tell's write and the rebuild's replay
both fail."""
import os
import re
import time

from conftest import SANITIZED, ask, create_study, daemon_binary, error_of, grid, tell

SHIM = daemon_binary().parent / "kb-fault.so"


def fault_env(switch):
    env = {"LD_PRELOAD": str(SHIM), "KB_FAULT_FILE": str(switch), "KB_FAULT_SQL": "events"}
    if SANITIZED:  # the shim is loaded before the sanitizer runtime
        env["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0"
    return env


def test_failed_rebuild_answers_503_and_recovers(daemons, tmp_path):
    assert SHIM.exists(), f"{SHIM} not built (make)"
    switch = tmp_path / "fault"
    d = daemons(env=fault_env(switch))
    api = d.client()
    sid = create_study(api, "resync")["id"]
    trials = ask(api, sid, count=3)["trials"]
    tell(api, sid, trials[0]["id"], 1.0)

    switch.touch()
    r = api.post(f"/v1/studies/{sid}/trials/{trials[1]['id']}/tell", json={"value": 2.0})
    assert r.status_code == 503, r.text
    assert "study rebuild failed" in d.stderr()
    for path in (f"/v1/studies/{sid}", f"/v1/studies/{sid}/trials"):
        r = api.get(path)
        assert r.status_code == 503, (path, r.text)  # never 404: the study exists
        assert error_of(r)["code"] == "unavailable" and r.headers["Retry-After"], r.text
    listed = [s["id"] for s in api.get("/v1/studies").json()["studies"]]
    assert sid in listed
    assert api.get("/healthz").json()["studies"]["restoring"] == 1
    # Backoff: 2.5 s of requests cost at most the rebuilds at ~1 s and ~3 s, not one each.
    # Retry-After is the backoff's remaining wait (the number the message gives), so it
    # grows once a retried rebuild has failed and the wait doubled.
    t_end, waits = time.monotonic() + 2.5, []
    while time.monotonic() < t_end:
        r = api.get(f"/v1/studies/{sid}")
        assert r.status_code == 503
        wait = int(r.headers["Retry-After"])
        said = int(re.search(r"retried in (\d+) s", error_of(r)["message"]).group(1))
        assert 1 <= wait <= 30 and wait == max(said, 1), (wait, r.text)
        waits.append(wait)
        time.sleep(0.05)
    assert d.stderr().count("study rebuild failed") <= 3, d.stderr()
    assert max(waits) >= 2, waits

    switch.unlink()
    deadline = time.monotonic() + 10  # the first retry comes 1 s after the failure
    while True:
        r = api.get(f"/v1/studies/{sid}")
        if r.status_code == 200:
            break
        assert r.status_code == 503 and time.monotonic() < deadline, r.text
        time.sleep(0.2)
    assert r.json()["progress"]["trials"]["completed"] == 1  # the failed tell was not applied
    tell(api, sid, trials[1]["id"], 2.0)
    tell(api, sid, trials[2]["id"], 3.0)
    assert api.get("/healthz").json()["studies"] == {"restored": 1, "restoring": 0, "failed": 0}


def test_study_unreadable_at_registration_waits_for_a_retry(daemons, tmp_path):
    """Issue 16: a study whose registration failed at start-up (here its candidate set
    cannot be read: SQLite fails the statement while a switch file exists; out of memory
    there did the same) stopped the whole start-up ("cannot load the studies from the
    database", exit 1). Now that study answers 503 with Retry-After, the others serve,
    and once the candidate set can be read again the study is rebuilt whole."""
    assert SHIM.exists(), f"{SHIM} not built (make)"
    first = daemons(name="first")
    api = first.client()
    cs = api.post("/v1/candidate-sets", json={"rows": grid(25, 2, seed=3), "names": ["u", "v"]})
    assert cs.status_code == 201, cs.text
    sid = create_study(api, "from-set", space={"type": "candidates",
                                               "candidate_set": cs.json()["id"]})["id"]
    other = create_study(api, "inline")["id"]
    for s in (sid, other):
        tell(api, s, ask(api, s)["trials"][0]["id"], 1.0)
    trials = api.get(f"/v1/studies/{sid}/trials").json()["trials"]
    assert first.stop() == 0

    switch = tmp_path / "fault"
    switch.touch()
    env = dict(fault_env(switch), KB_FAULT_SQL="FROM candidate_sets")
    d = daemons(name="second", db=first.db, env=env)
    api = d.client()
    assert "stored study cannot be rebuilt" in d.stderr()
    r = api.get(f"/v1/studies/{sid}")
    assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 0, r.text
    assert error_of(r)["code"] == "unavailable"
    assert api.get(f"/v1/studies/{other}").status_code == 200
    tell(api, other, ask(api, other)["trials"][0]["id"], 2.0)
    assert api.get("/healthz").json()["studies"]["restoring"] == 1
    # the name stays taken while the study waits
    assert create_study(api, "from-set", expect=409)

    switch.unlink()
    deadline = time.monotonic() + 10
    while (r := api.get(f"/v1/studies/{sid}")).status_code != 200:
        assert r.status_code == 503 and time.monotonic() < deadline, r.text
        time.sleep(0.2)
    assert r.json()["space"]["candidate_set"] == cs.json()["id"]
    assert api.get(f"/v1/studies/{sid}/trials").json()["trials"] == trials
    tell(api, sid, ask(api, sid)["trials"][0]["id"], 3.0)
    listed = {s["id"] for s in api.get("/v1/studies").json()["studies"]}
    assert listed == {sid, other}
    assert api.get("/healthz").json()["studies"] == {"restored": 2, "restoring": 0, "failed": 0}
