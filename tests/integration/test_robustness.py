"""This file contains races and transport edge cases: long-poll asks woken by a tell,
SIGTERM while asks are suspended, deleting a study under load, chunked bodies over the
size limit, requests cut off mid-body, and the memory budget of bodies (--max-body-memory).
Sanitizer reports fail each test (conftest)."""
import socket
import threading
import time

import requests

from conftest import SANITIZED, ask, create_study, error_of, metrics, tell

ONE = {"type": "candidates", "candidates": [[0.0, 1.0]]}


def test_long_poll_woken_by_tell(api):
    sid = create_study(api, "poll", space=ONE, settings={"repeats": "no_pending"})["id"]
    held = ask(api, sid, worker="holder")["trials"][0]
    result = {}

    def waiter():
        t0 = time.monotonic()
        result["body"] = ask(api, sid, worker="waiter", wait_ms=20000)
        result["elapsed"] = time.monotonic() - t0

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.5)
    assert th.is_alive(), f"wait_ms was not honoured: {result}"
    tell(api, sid, held["id"], 1.0)
    th.join(30)
    assert not th.is_alive()
    assert [t["candidate_index"] for t in result["body"]["trials"]] == [0], result
    assert result["elapsed"] < 10, f"the tell did not wake the waiting ask ({result['elapsed']:.1f}s)"


def test_long_poll_times_out_empty(api):
    sid = create_study(api, "poll2", space=ONE, settings={"repeats": "no_pending"})["id"]
    ask(api, sid, worker="holder")
    t0 = time.monotonic()
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker": "w", "wait_ms": 400})
    elapsed = time.monotonic() - t0
    assert r.status_code == 200 and r.json()["trials"] == []
    assert 0.35 <= elapsed < 5, elapsed
    assert int(r.headers["Retry-After"]) >= 1 and r.json()["retry_after_ms"] >= 1


def test_sigterm_with_suspended_asks(daemons):
    d = daemons()
    api = d.client()
    sid = create_study(api, "term", space=ONE, settings={"repeats": "no_pending"})["id"]
    ask(api, sid, worker="holder")
    statuses = []

    def waiter(i):
        try:
            r = d.client().post(f"/v1/studies/{sid}/ask", json={"worker": f"w{i}", "wait_ms": 60000},
                                timeout=90)
            statuses.append(r.status_code)
        except requests.ConnectionError:
            statuses.append("closed")

    ths = [threading.Thread(target=waiter, args=(i,)) for i in range(4)]
    for t in ths:
        t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    rc = d.stop()
    assert rc == 0, (rc, d.stderr()[-3000:])
    assert time.monotonic() - t0 < (20 if SANITIZED else 8), "suspended asks delayed the shutdown"
    for t in ths:
        t.join(30)
    assert all(s in (200, 503, "closed") for s in statuses), statuses
    # The pending trial survived the shutdown.
    d.start()
    s = d.client().get(f"/v1/studies/{sid}").json()
    assert s["progress"]["trials"]["pending"] == 1


def test_delete_study_under_load(daemons):
    d = daemons()
    api = d.client()
    sid = create_study(api, "doomed", settings={"seed": 4})["id"]
    stop = threading.Event()
    bad = []

    def worker(i):
        c = d.client()
        while not stop.is_set():
            r = c.post(f"/v1/studies/{sid}/ask", json={"worker": f"w{i}"})
            if r.status_code == 404:
                continue
            if r.status_code != 200:
                bad.append((r.status_code, r.text))
                return
            for t in r.json()["trials"]:
                r = c.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 1.0})
                if r.status_code not in (200, 404):
                    bad.append((r.status_code, r.text))

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in ths:
        t.start()
    time.sleep(0.4)
    assert api.delete(f"/v1/studies/{sid}").status_code == 204
    time.sleep(0.3)
    stop.set()
    for t in ths:
        t.join(30)
    assert not bad, bad[:3]
    assert api.get(f"/v1/studies/{sid}").status_code == 404
    assert api.get("/healthz").status_code == 200
    create_study(api, "doomed")  # the name is free again


def test_chunked_body_over_limit(daemons):
    d = daemons(args=["--max-body-bytes", "4096"])
    api = d.client()

    def chunks():
        yield b'{"name": "'
        for _ in range(64):
            yield b"x" * 1024
        yield b'"}'

    r = api.post("/v1/studies", data=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and error_of(r)["code"] == "payload_too_large"
    assert api.get("/v1/studies").json()["studies"] == []


def wait_metric(api, name, pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        v = metrics(api)[(name, ())]
        if pred(v) or time.monotonic() > deadline:
            return v
        time.sleep(0.02)


def test_body_memory_budget(daemons):
    """A body read while others hold the budget gets a 503 with Retry-After and changes
    nothing; one larger than the budget alone still goes through; nothing stays held."""
    d = daemons(args=["--max-body-memory", str(1 << 20), "--max-body-bytes", str(2 << 20)])
    api = d.client()
    big = b'{"name": "' + b"b" * 1_100_000 + b'"}'
    s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    s.sendall(b"POST /v1/studies HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(big) + big[:1_050_000])
    held = wait_metric(api, "kbandit_body_memory_bytes", lambda v: v >= 1 << 20)
    assert held >= 1 << 20, held

    r = api.post("/v1/studies", json={"name": "small", "space": ONE})
    assert r.status_code == 503 and error_of(r)["code"] == "unavailable", r.text
    assert "--max-body-memory" in error_of(r)["message"]
    assert r.headers["Retry-After"] == "1"
    assert api.get("/v1/studies").json()["studies"] == []
    assert api.get("/healthz").status_code == 200  # bodiless requests are not held up
    # a route that reads no body neither keeps nor reserves one
    assert api.get("/healthz", data=b"x" * 10000).status_code == 200
    # a body over --max-body-bytes gets its 413 (a 503 would be retried for ever)
    r = api.post("/v1/studies", data=(b"x" * 65536 for _ in range(48)),
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and error_of(r)["code"] == "payload_too_large", r.text

    s.sendall(big[1_050_000:])  # alone, the large body is parsed (then refused: its name)
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += s.recv(65536)
    s.close()
    assert reply.startswith(b"HTTP/1.1 400"), reply[:200]

    assert create_study(api, "small", space=ONE)["name"] == "small"
    assert wait_metric(api, "kbandit_body_memory_bytes", lambda v: v == 0) == 0
    assert metrics(api)[("kbandit_body_memory_refused_total", ())] == 1


def test_truncated_request_does_not_hurt(daemon):
    """A client that announces a body and vanishes half-way must cost nothing."""
    for partial in (b'{"name": "tr', b""):
        s = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
        s.sendall(b"POST /v1/studies HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 1000\r\n\r\n" + partial)
        s.close()
    s = socket.create_connection(("127.0.0.1", daemon.port), timeout=10)
    s.sendall(b"GARBAGE / HTTP/9.9\r\n\r\n")
    s.settimeout(5)
    try:
        s.recv(1000)
    except (socket.timeout, ConnectionError):
        pass
    s.close()
    api = daemon.client()
    assert api.get("/healthz").status_code == 200
    assert api.get("/v1/studies").json()["studies"] == []


def test_deleted_study_id_never_comes_back(daemons):
    """Issue 16 item 2: deleting the newest study and creating another used to give the new
    study the old id, so a stale worker's tell to (old study, trial 1) was stored in the new,
    unrelated study with 200. Restarts must not bring the id back either."""
    d = daemons()
    api = d.client()
    create_study(api, "first", space=ONE)
    old = create_study(api, "old", space=ONE)["id"]
    tid = ask(api, old)["trials"][0]["id"]
    assert api.delete(f"/v1/studies/{old}").status_code in (200, 204)
    new = create_study(api, "new", space=ONE)["id"]
    assert new > old
    ask(api, new)
    r = api.post(f"/v1/studies/{old}/trials/{tid}/tell", json={"value": 1.0})
    assert r.status_code == 404, r.text
    assert error_of(r)["code"] == "not_found"
    assert api.get(f"/v1/studies/{new}/trials?state=completed").json()["trials"] == []
    api.delete(f"/v1/studies/{new}")
    d.stop()
    d.start()
    assert create_study(d.client(), "after-restart", space=ONE)["id"] > new


def test_engine_dimension_limit_refused_at_creation(api):
    """Issue 16 item 1: pi-gp-ucb on a box of 64 parameters crashed the daemon at the first
    tell (1 << d). A space wider than an engine's stated limit is a 400 naming the space, and
    nothing is created; every other engine serves the same box."""
    params = [{"name": f"p{i}", "type": "float", "low": 0, "high": 1} for i in range(64)]
    space = {"type": "box", "params": params}
    r = api.post("/v1/studies", json={"name": "wide-pi", "space": space,
                                      "engine": {"name": "pi-gp-ucb"}})
    assert r.status_code == 400, r.text
    e = error_of(r)
    assert e["code"] == "invalid" and e["field"] == "space", e
    assert "at most" in e["message"], e
    assert api.get("/v1/studies").json()["studies"] == []
    for engine in ("bbkb", "bkb", "gp-ucb", "gp-bucb", "gp-ts", "sgp-ts", "random"):
        sid = create_study(api, f"wide-{engine}", space=space, engine=engine)["id"]
        for i in range(5):
            t = ask(api, sid)["trials"][0]
            tell(api, sid, t["id"], float(i))
        assert ask(api, sid)["status"] in ("ok", "awaiting_feedback")
