"""This file contains the tests of a study's state (issue 14, the last item): PATCH
/v1/studies/{id} with {"state": "active" | "paused" | "completed"}, the ?state= filter of
GET /v1/studies, what asks answer in each state, that feedback on trials already handed
out is taken in every state, and that the state survives kill -9, a clean restart and
the upgrade of a database made before it existed (schema 2).
"""
import signal
import sqlite3
import threading
import time

import pytest

from conftest import ask, create_study, error_of, tell


def patch(api, sid, body, expect=200):
    r = api.patch(f"/v1/studies/{sid}", json=body)
    assert r.status_code == expect, r.text
    return r


def set_state(api, sid, state, expect=200):
    return patch(api, sid, {"state": state}, expect)


def state_of(api, sid):
    r = api.get(f"/v1/studies/{sid}")
    assert r.status_code == 200, r.text
    return r.json()["state"]


def listed(api, **params):
    """The ids of every page of GET /v1/studies with params, walked by cursor."""
    ids, cursor = [], None
    while True:
        q = dict(params, **({"cursor": cursor} if cursor else {}))
        r = api.get("/v1/studies", params=q)
        assert r.status_code == 200, r.text
        page = r.json()
        if "state" in params:
            assert {s["state"] for s in page["studies"]} <= {params["state"]}, page
        ids += [s["id"] for s in page["studies"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return ids


def test_a_new_study_is_active_everywhere_it_is_shown(api):
    made = create_study(api, "fresh")
    sid = made["id"]
    assert made["state"] == "active"
    assert state_of(api, sid) == "active"
    assert api.get("/v1/studies").json()["studies"][0]["state"] == "active"
    assert api.get(f"/v1/studies/{sid}/export").json()["study"]["state"] == "active"


def test_transitions_and_the_final_completed(api):
    sid = create_study(api, "moves")["id"]
    assert set_state(api, sid, "paused").json()["state"] == "paused"
    assert set_state(api, sid, "paused").json()["state"] == "paused"  # staying: no-op
    assert set_state(api, sid, "active").json()["state"] == "active"
    assert set_state(api, sid, "paused").json()["state"] == "paused"
    done = set_state(api, sid, "completed").json()
    assert done["state"] == "completed" and done["id"] == sid
    assert set_state(api, sid, "completed").json()["state"] == "completed"
    for to in ("active", "paused"):
        err = error_of(set_state(api, sid, to, expect=409))
        assert (err["code"], err["field"]) == ("conflict", "state"), err
    assert state_of(api, sid) == "completed"
    other = create_study(api, "straight")["id"]
    assert set_state(api, other, "completed").json()["state"] == "completed"


def test_final_empty_answers_suggest_no_retry(api):
    """An empty ask that no feedback can change (completed, max_trials reached, exhausted
    with nothing pending) has retry_after_ms null and no Retry-After (they said "retry in
    1 s"); exhausted while a trial is pending still suggests one."""
    done = create_study(api, "done")["id"]
    set_state(api, done, "completed")
    capped = create_study(api, "capped", max_trials=1)["id"]
    tell(api, capped, ask(api, capped)["trials"][0]["id"], 1.0)
    tiny = create_study(api, "tiny", space={"type": "candidates", "candidates": [[0.0], [1.0]]},
                        settings={"repeats": "never"})["id"]
    first, second = ask(api, tiny, count=2)["trials"]
    r = api.post(f"/v1/studies/{tiny}/ask", json={"worker": "w"})
    assert r.json()["status"] == "exhausted" and r.json()["retry_after_ms"] == 1000, r.text
    assert r.headers["Retry-After"] == "1"
    tell(api, tiny, first["id"], 1.0)
    tell(api, tiny, second["id"], 2.0)
    for sid, status in ((done, "study_completed"), (capped, "max_trials_reached"),
                        (tiny, "exhausted")):
        r = api.post(f"/v1/studies/{sid}/ask", json={"worker": "w", "wait_ms": 200})
        assert r.status_code == 200 and "Retry-After" not in r.headers, r.headers
        assert r.json() == {"trials": [], "status": status, "awaiting": 0,
                            "retry_after_ms": None}, r.text


def test_paused_hands_out_nothing_but_takes_feedback(api):
    sid = create_study(api, "paused")["id"]
    first, second, third = ask(api, sid, count=3)["trials"]
    set_state(api, sid, "paused")
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker": "w", "count": 2})
    assert r.status_code == 200, r.text
    assert r.json() == {"trials": [], "status": "study_paused", "awaiting": 3,
                        "retry_after_ms": 1000}
    assert r.headers["Retry-After"] == "1"
    # work in flight is not lost: tell, fail, heartbeat and observations are taken
    assert tell(api, sid, first["id"], 1.5)["state"] == "completed"
    assert api.post(f"/v1/studies/{sid}/trials/{second['id']}/heartbeat").status_code == 200
    assert api.post(f"/v1/studies/{sid}/trials/{second['id']}/fail",
                    json={"reason": "r"}).json()["state"] == "failed"
    r = api.post(f"/v1/studies/{sid}/tell", json={"results": [{"trial_id": third["id"], "value": 2.0}]})
    assert r.json()["results"][0]["status"] == 200, r.text
    r = api.post(f"/v1/studies/{sid}/observations",
                 json={"observations": [{"x": [0.5, 0.5], "value": 3.0}]})
    assert r.status_code == 200, r.text
    assert ask(api, sid)["trials"] == []
    progress = api.get(f"/v1/studies/{sid}").json()["progress"]
    assert progress["trials"] == {"pending": 0, "completed": 2, "failed": 1, "expired": 0}
    set_state(api, sid, "active")
    got = ask(api, sid)
    assert got["status"] == "ok" and [t["id"] for t in got["trials"]] == [4]


def test_completed_hands_out_nothing_and_does_not_long_poll(api):
    sid = create_study(api, "done")["id"]
    pending = ask(api, sid)["trials"][0]
    set_state(api, sid, "completed")
    t0 = time.monotonic()
    got = ask(api, sid, wait_ms=3000)
    assert time.monotonic() - t0 < 2.0, "a completed study's ask must not wait"
    assert (got["trials"], got["status"], got["awaiting"]) == ([], "study_completed", 1)
    assert tell(api, sid, pending["id"], 0.5)["state"] == "completed"
    assert api.get(f"/v1/studies/{sid}/best").json()["id"] == pending["id"]


def long_poll(api, sid, out):
    t0 = time.monotonic()
    out["answer"] = ask(api, sid, wait_ms=20000)
    out["seconds"] = time.monotonic() - t0


@pytest.mark.parametrize("to,status,n", [("active", "ok", 1), ("completed", "study_completed", 0)])
def test_a_paused_long_poll_ends_at_the_change(api, to, status, n):
    sid = create_study(api, f"poll-{to}")["id"]
    set_state(api, sid, "paused")
    out = {}
    th = threading.Thread(target=long_poll, args=(api.__class__(api.base_url), sid, out))
    th.start()
    time.sleep(0.5)
    assert th.is_alive(), f"the long-poll of a paused study answered at once: {out}"
    set_state(api, sid, to)
    th.join(15)
    assert not th.is_alive()
    assert out["answer"]["status"] == status and len(out["answer"]["trials"]) == n, out
    assert out["seconds"] < 10, out


def test_list_filters_by_state_with_name_and_pages(api):
    states = ["active", "paused", "completed", "paused", "active", "paused", "completed"]
    ids = [create_study(api, f"s{i}")["id"] for i in range(len(states))]
    for sid, st in zip(ids, states):
        if st != "active":
            set_state(api, sid, st)
    for st in ("active", "paused", "completed"):
        want = [sid for sid, s in zip(ids, states) if s == st]
        assert listed(api, state=st) == want
        assert listed(api, state=st, limit=1) == want  # one study a page, by cursor
        assert listed(api, state=st, limit=2) == want
        assert listed(api, state=st, name="s1") == ([ids[1]] if st == "paused" else [])
    assert listed(api) == ids
    # next_cursor is only given when a further study matches
    last_paused = [sid for sid, s in zip(ids, states) if s == "paused"][-1]
    page = api.get("/v1/studies", params={"state": "paused", "cursor": str(last_paused - 1),
                                          "limit": 1}).json()
    assert [s["id"] for s in page["studies"]] == [last_paused] and page["next_cursor"] is None


@pytest.mark.parametrize("query", ["state=", "state=ACTIVE", "state=done", "state=active%00",
                                   "state=active%20", "state", "state=active&state=paused"])
def test_bad_state_filter_is_400(api, query):
    create_study(api, "one")
    r = api.get(f"/v1/studies?{query}")
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert (err["code"], err["field"]) == ("invalid", "state"), err


@pytest.mark.parametrize("body,field", [
    ({}, "state"), ({"state": "done"}, "state"), ({"state": "Active"}, "state"),
    ({"state": 1}, "state"), ({"state": None}, "state"), ({"state": ["paused"]}, "state"),
    ({"state": ""}, "state"), ({"state": "paused" * 10}, "state"),
    ({"state": "paused", "name": "renamed"}, "name"), ({"bogus": 1}, "bogus")])
def test_bad_patch_is_400_naming_the_field(daemon, api, body, field):
    sid = create_study(api, "target")["id"]
    err = error_of(patch(api, sid, body, expect=400))
    assert (err["code"], err["field"]) == ("invalid", field), err
    assert state_of(api, sid) == "active"
    assert api.get(f"/v1/studies/{sid}").json()["name"] == "target"


def test_patch_of_no_study_and_of_no_json(api):
    sid = create_study(api, "gone")["id"]
    r = api.patch(f"/v1/studies/{sid}", data=b"{", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_json", r.text
    assert api.delete(f"/v1/studies/{sid}").status_code == 204
    err = error_of(set_state(api, sid, "paused", expect=404))
    assert err["code"] == "not_found"


def test_state_survives_kill9_and_a_clean_restart(daemons):
    d = daemons()
    api = d.client()
    sids = {st: create_study(api, st)["id"] for st in ("active", "paused", "completed")}
    set_state(api, sids["paused"], "paused")
    set_state(api, sids["completed"], "completed")
    for stop in (d.kill9, d.stop):
        assert stop() in (-signal.SIGKILL, 0)
        d.start()
        api = d.client()
        for st, sid in sids.items():
            assert listed(api, state=st) == [sid]  # listed before the restore too
            assert state_of(api, sid) == st
        assert ask(api, sids["paused"])["status"] == "study_paused"
        assert ask(api, sids["completed"])["status"] == "study_completed"


def test_a_schema_2_database_upgrades_with_its_studies_active(daemons, tmp_path):
    d = daemons()
    api = d.client()
    sid = create_study(api, "old")["id"]
    trial = ask(api, sid)["trials"][0]
    assert d.stop() == 0
    con = sqlite3.connect(d.db)  # back to what kbandit stored before migration 0003
    con.executescript("ALTER TABLE studies DROP COLUMN state; "
                      "ALTER TABLE trials DROP COLUMN request_id; PRAGMA user_version = 2;")
    con.close()
    d.start()
    api = d.client()
    assert state_of(api, sid) == "active"
    assert listed(api, state="active") == [sid]
    assert tell(api, sid, trial["id"], 1.0)["state"] == "completed"
    set_state(api, sid, "paused")
    con = sqlite3.connect(d.db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 4  # 0003 and 0004 applied
    assert con.execute("SELECT state FROM studies WHERE id = ?", (sid,)).fetchone()[0] == "paused"
    with pytest.raises(sqlite3.IntegrityError):  # the table refuses other values
        con.execute("UPDATE studies SET state = 'done' WHERE id = ?", (sid,))
    con.close()
