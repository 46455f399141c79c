"""This file contains the lease tests: with lease_seconds=1 and a 100 ms sweeper, a trial
whose worker vanished becomes expired and its point is handed out again; heartbeats keep
a trial alive past its original lease."""
import time

from conftest import SANITIZED, ask, create_study, error_of, tell

SWEEP = ["--sweep-ms", "100"]
SLACK = 10 if SANITIZED else 5  # seconds beyond the lease before we call it a failure


def wait_state(api, sid, tid, state, limit):
    deadline = time.monotonic() + limit
    while True:
        t = api.get(f"/v1/studies/{sid}/trials/{tid}").json()
        if t["state"] == state or time.monotonic() > deadline:
            return t
        time.sleep(0.1)


def test_vanished_worker_expires_and_point_returns(daemons):
    d = daemons(args=SWEEP)
    api = d.client()
    sid = create_study(api, "lease", space={"type": "candidates", "candidates": [[0.5, 0.5]]},
                       settings={"repeats": "no_pending"}, lease_seconds=1)["id"]
    t1 = ask(api, sid, worker="vanishes")["trials"][0]
    assert t1["candidate_index"] == 0
    # The only candidate is pending: nobody else gets it.
    assert ask(api, sid, worker="other")["trials"] == []
    t = wait_state(api, sid, t1["id"], "expired", 1 + SLACK)
    assert t["state"] == "expired", t
    s = api.get(f"/v1/studies/{sid}").json()
    assert s["progress"]["trials"]["expired"] == 1 and s["progress"]["trials"]["pending"] == 0
    t2 = ask(api, sid, worker="other")["trials"][0]
    assert t2["candidate_index"] == 0 and t2["id"] != t1["id"] and t2["worker"] == "other"
    # The vanished worker comes back too late.
    r = api.post(f"/v1/studies/{sid}/trials/{t1['id']}/tell", json={"value": 1.0})
    assert r.status_code == 409 and error_of(r)["code"] == "conflict"
    tell(api, sid, t2["id"], 2.0)
    expired = api.get(f"/v1/studies/{sid}/trials", params={"state": "expired"}).json()["trials"]
    assert [x["id"] for x in expired] == [t1["id"]]


def test_heartbeat_keeps_trial_alive(daemons):
    d = daemons(args=SWEEP)
    api = d.client()
    sid = create_study(api, "beat", lease_seconds=1)["id"]
    t = ask(api, sid, worker="alive")["trials"][0]
    first_expiry = t["lease_expires_at"]
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        time.sleep(0.2)
        r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/heartbeat", json={})
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "pending"
    assert r.json()["lease_expires_at"] > first_expiry  # RFC 3339 UTC strings sort by time
    # An empty body is a heartbeat too.
    r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/heartbeat",
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    done = tell(api, sid, t["id"], 3.0)
    assert done["state"] == "completed"
    r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/heartbeat", json={})
    assert r.status_code == 409


def test_lease_expires_across_restart(daemons):
    """A lease that ran out while the daemon was down expires after the restart."""
    d = daemons(args=SWEEP)
    api = d.client()
    sid = create_study(api, "restart-lease", space={"type": "candidates", "candidates": [[1.0]]},
                       settings={"repeats": "no_pending"}, lease_seconds=1)["id"]
    t1 = ask(api, sid, worker="gone")["trials"][0]
    assert d.stop() == 0
    time.sleep(1.5)
    d.start()
    api = d.client()
    t = wait_state(api, sid, t1["id"], "expired", SLACK)
    assert t["state"] == "expired", t
    t2 = ask(api, sid, worker="next")["trials"][0]
    assert t2["candidate_index"] == 0 and t2["id"] != t1["id"]


def test_retried_ask_gets_its_trials_again(daemons):
    """An ask whose answer was lost (a dropped connection, kill -9 after the commit) left
    its trials pending for the whole lease, and a closed bbkb batch waited for them
    (worker-fleet review, fifty-seventh session). Retried with its request_id it is
    answered with those trials, after a restart too; other workers and ids ask anew."""
    d = daemons()
    api = d.client()
    sid = create_study(api, "retry", engine="gp-ucb", settings={"seed": 3},
                       space={"type": "box", "params": [
                           {"name": "x", "type": "float", "low": 0, "high": 1}]})["id"]
    first = ask(api, sid, worker="w1", count=3, request_id="r-1")
    assert first["status"] == "ok" and len(first["trials"]) == 3, first
    ids = [t["id"] for t in first["trials"]]
    time.sleep(0.01)
    again = ask(api, sid, worker="w1", count=3, request_id="r-1")
    lease = [t.pop("lease_expires_at") for t in first["trials"]]
    relet = [t.pop("lease_expires_at") for t in again["trials"]]
    assert again == first  # the same trials, their leases started again:
    assert all(b > a for a, b in zip(lease, relet)), (lease, relet)
    assert ask(api, sid, worker="w2", count=1, request_id="r-1")["trials"][0]["id"] not in ids
    fresh = ask(api, sid, worker="w1", count=1, request_id="r-2")["trials"]
    assert fresh and fresh[0]["id"] not in ids
    d.kill9()
    d.start()
    api = d.client()
    after = ask(api, sid, worker="w1", count=3, request_id="r-1")["trials"]
    for t in after:
        t.pop("lease_expires_at")
    assert after == first["trials"]
    tell(api, sid, ids[0], 1.0)  # only the trials still pending come back
    assert [t["id"] for t in ask(api, sid, worker="w1", count=3, request_id="r-1")["trials"]] == ids[1:]
    total = api.get(f"/v1/studies/{sid}").json()["progress"]["trials"]
    assert sum(total.values()) == 5, total  # three, w2's one, r-2's one: no more
    for bad in ("", 5, "x" * 201, None):
        r = api.post(f"/v1/studies/{sid}/ask", json={"worker": "w1", "request_id": bad})
        assert r.status_code == 400 and error_of(r)["field"] == "request_id", (bad, r.text)
