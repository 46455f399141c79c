"""This file contains the tests of the Python client (clients/python/kbandit) against the
real daemon: every Client, Study and Trial method, the error mapping, retries through a
proxy that drops responses and a server that answers 503, heartbeats keeping a slow trial
alive past its lease, and optimize() with threads and processes finishing exactly
n_trials. Objects the client returns are validated against openapi.yaml's schemas."""
import importlib.util
import json
import threading
import time

import numpy
import pytest

from client_util import (DroppingProxy, ScriptedServer, assert_component, assert_response)
from conftest import SANITIZED

import kbandit
import kbandit.client
import kbandit.study

SWEEP = ["--sweep-ms", "100"]
BOX = {"lr": (1e-5, 1.0, "log"), "layers": (1, 8), "opt": ["adam", "sgd"]}


@pytest.fixture
def kb(daemon):
    return kbandit.Client(daemon.url, daemon.token)


def objective(trial):
    """Module level, so worker processes can unpickle it."""
    p = trial.params
    return -(p["x"] - 0.3) ** 2 - (p["y"] - 0.6) ** 2


def xy_study(kb, name, engine="random", **kw):
    return kb.create_study(name, params={"x": (0.0, 1.0), "y": (0.0, 1.0)}, engine=engine,
                           settings={"seed": 1}, **kw)


# ------------------------------------------------------------------ client and studies

def test_url_and_token_from_environment(daemons, monkeypatch):
    d = daemons(token="env-token-0123456789")
    monkeypatch.setenv("KB_URL", d.url)
    monkeypatch.setenv("KB_TOKEN", d.token)
    kb = kbandit.Client()
    assert kb.url == d.url and kb.health()["status"] == "ok"
    assert kb.studies() == []
    monkeypatch.delenv("KB_URL")
    assert kbandit.Client(token="x").url == "http://127.0.0.1:8080"
    with pytest.raises(ValueError):
        kbandit.Client("ftp://example.org")


def test_create_box_study_from_plain_python(kb):
    s = kb.create_study("box", params=BOX, direction="minimize", engine="random",
                        settings={"seed": 4}, lease_seconds=30, max_trials=9)
    assert_component(s.data, "Study")
    params = {p["name"]: p for p in s.space["params"]}
    assert params["lr"] == {"name": "lr", "type": "float", "low": 1e-5, "high": 1.0, "log": True}
    assert params["layers"]["type"] == "int" and params["layers"]["low"] == 1
    assert params["opt"]["choices"] == ["adam", "sgd"]
    assert (s.direction, s.lease_seconds, s.max_trials) == ("minimize", 30, 9)
    assert s.engine == {"name": "random", "settings": {"seed": 4}}
    assert s.param_names() == ["lr", "layers", "opt"]
    listed = [{"name": "a", "type": "float", "low": 0, "high": 2}]
    assert kb.create_study("as-list", params=listed).space["params"][0]["high"] == 2
    with pytest.raises(ValueError):
        kb.create_study("neither")
    with pytest.raises(TypeError):
        kb.create_study("bad", params={"a": 3})


def test_candidate_sets_from_lists_numpy_and_csv(kb, tmp_path):
    s1 = kb.create_study("rows", candidates=[[0.0, 1.0], [2.0, 3.0]])
    assert s1.space == {"type": "candidates", "rows": 2, "dim": 2}
    assert kb.create_study("column", candidates=[1.0, 2.0, 3.0]).space["dim"] == 1
    s2 = kb.create_study("numpy", candidates=numpy.arange(12.0).reshape(6, 2))
    assert (s2.space["rows"], s2.space["dim"]) == (6, 2)
    csv_file = tmp_path / "c.csv"
    csv_file.write_text('"a,b",c\n1,2\n\n3,4.5\n')
    s3 = kb.create_study("csv", candidates=str(csv_file))
    assert s3.space["rows"] == 2 and s3.space["candidate_set"] >= 1
    assert s3.param_names() == ["a,b", "c"]
    assert kb.candidate_set(s3.space["candidate_set"])["names"] == ["a,b", "c"]
    (t,) = s3.ask()
    assert t.params in ({"a,b": 1.0, "c": 2.0}, {"a,b": 3.0, "c": 4.5})
    assert s2.ask()[0].params.keys() == {"x0", "x1"}
    s4 = kb.create_study("shared", candidate_set=s3.space["candidate_set"])
    assert s4.space["candidate_set"] == s3.space["candidate_set"]
    up = kb.upload_candidates(numpy.array([0.5, 0.25]), names=["only"])
    assert (up["rows"], up["dim"], up["names"]) == (2, 1, ["only"])
    with pytest.raises(TypeError):
        kb.create_study("text", candidates=[["a"]])


def test_engine_catalogue(kb):
    cat = kb.engines()
    pi = next(e for e in cat["engines"] if e["name"] == "pi-gp-ucb")
    kernel = next(o for o in pi["options"] if o["name"] == "kernel")
    assert kernel["default"] == "matern32" and "rbf" not in kernel["choices"]
    assert cat["default"] == "bbkb"


def test_get_by_id_and_name_list_paging_delete(kb, monkeypatch):
    made = [xy_study(kb, f"s{i}") for i in range(5)]
    monkeypatch.setattr(kbandit.client, "PAGE", 2)  # force the cursor to be followed
    assert [s.id for s in kb.studies()] == [s.id for s in made]
    assert kb.study("s3").id == made[3].id and kb.study(made[3].id).name == "s3"
    assert kb.get_study(made[4].id).name == "s4"
    assert kb.find_study("nope") is None
    with pytest.raises(kbandit.NotFound):
        kb.study("nope")
    kb.delete_study("s1")
    made[2].delete()
    kb.delete_study(made[0].id)
    assert [s.name for s in kb.studies()] == ["s3", "s4"]
    with pytest.raises(kbandit.NotFound) as e:
        made[2].delete()
    assert e.value.status == 404 and e.value.code == "not_found"


def test_get_or_create_races_to_one_study(kb):
    ids = []

    def worker():
        ids.append(kb.get_or_create_study("race", params={"x": (0.0, 1.0)}).id)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 6 and len(set(ids)) == 1
    assert [s.name for s in kb.studies()] == ["race"]


# ------------------------------------------------------------------ trials

def test_ask_tell_fail_heartbeat_and_reads(kb, tmp_path, monkeypatch):
    s = kb.create_study("flow", params=BOX, engine="random", settings={"seed": 2})
    trials = s.ask(count=3, worker="w-1")
    assert len(trials) == 3 and trials.status == "ok" and trials.retry_after is None
    assert_response(trials.data, "/v1/studies/{study_id}/ask", "post")
    a, b, c = trials
    assert a.worker == "w-1" and a.state == "pending" and len(a.x) == 3
    assert set(a.params) == {"lr", "layers", "opt"} and 1e-5 <= a.params["lr"] <= 1
    assert a.tell(0.93) is a and a.state == "completed" and a.value == 0.93
    assert_component(a.data, "Trial")
    assert a.tell(0.93).value == 0.93  # the same value again: exactly-once, no error
    with pytest.raises(kbandit.Conflict) as e:
        a.tell(0.5)
    assert e.value.status == 409 and e.value.field == "value"
    before = b.lease_expires_at
    time.sleep(0.01)
    assert b.heartbeat().lease_expires_at > before
    assert b.fail("out of memory").state == "failed" and b.reason == "out of memory"
    assert b.fail("again").state == "failed"  # failing a failed trial is harmless
    assert s.tell(c.id, 0.1).state == "completed"
    d = s.ask()[0]
    assert s.fail(d).state == "failed" and s.get_trial(d.id).state == "failed"
    assert s.best().id == a.id and s.best().value == 0.93
    assert s.best(by="model").id == a.id  # the random engine has no model: as by value
    with pytest.raises(kbandit.KbanditError) as e:
        s.best(by="mean")
    assert e.value.status == 400 and e.value.field == "by"
    monkeypatch.setattr(kbandit.study, "PAGE", 1)  # follow the trials cursor
    assert [t.id for t in s.trials()] == [a.id, b.id, c.id, d.id]
    assert [t.id for t in s.trials(state="failed")] == [b.id, d.id]
    assert s.trials(state="pending") == []
    assert s.refresh().progress["trials"] == {"pending": 0, "completed": 2, "failed": 2,
                                              "expired": 0}
    assert repr(a).startswith("Trial(") and repr(s) == f"Study(id={s.id}, name='flow')"


def test_best_is_none_before_the_first_tell(kb):
    s = xy_study(kb, "empty")
    assert s.best() is None
    s.delete()
    with pytest.raises(kbandit.NotFound):
        s.best()


def test_exports(kb, tmp_path):
    s = kb.create_study("export", params={"x": (0.0, 1.0), "k": ["a", "b"]}, engine="random")
    (t,) = s.ask()
    t.tell(0.93)
    assert s.add_observations([({"x": 0.25, "k": "b"}, 0.5)]) == 1
    data = s.export()
    assert_response(data, "/v1/studies/{study_id}/export")
    assert [x["value"] for x in data["trials"]] == [0.93]
    assert [(o["params"], o["value"]) for o in data["observations"]] == [({"x": 0.25, "k": "b"}, 0.5)]
    text = s.export_csv()
    assert text.splitlines()[0].startswith("id,state,worker,value") and ",0.93," in text
    assert len(text.splitlines()) == 2  # the CSV holds trials only
    s.export_csv(tmp_path / "a.csv")
    with open(tmp_path / "b.csv", "w") as f:
        s.export_csv(f)
    assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text() == text
    if importlib.util.find_spec("pandas") is None:  # optional: either branch is checked
        with pytest.raises(ImportError, match="needs pandas"):
            s.to_dataframe()
    else:
        df = s.to_dataframe()
        assert list(df["value"]) == [0.93] and list(df["k"]) == [t.params["k"]]


def test_tell_many_reports_each_item(kb):
    s = xy_study(kb, "batch")
    a, b, c = s.ask(count=3)
    c.fail()
    results = s.tell_many([(a, 1.0), (b.id, 2.0), (c, 3.0), (99, 4.0)])
    assert [r.status for r in results] == [200, 200, 409, 404]
    assert results[0].trial.value == 1.0 and results[0].error is None
    assert isinstance(results[2].error, kbandit.Conflict) and results[2].trial is None
    assert isinstance(results[3].error, kbandit.NotFound)
    assert [r.status for r in s.tell_many({a.id: 1.0})] == [200]  # a repeat is harmless


def test_add_observations(kb):
    s = xy_study(kb, "warm")
    assert s.add_observations([({"x": 0.2, "y": 0.4}, 1.5), ([0.5, 0.5], 0.5)]) == 2
    with pytest.raises(kbandit.InvalidRequest) as e:
        s.add_observations([([2.0, 0.5], 0.5)])
    assert e.value.field and e.value.field.startswith("observations[0]")


def test_ask_awaiting_feedback_and_long_poll(kb):
    s = kb.create_study("await", candidates=[[1.0], [2.0], [3.0]], engine="bbkb",
                        settings={"repeats": "no_pending"})
    (first,) = s.ask()
    empty = s.ask()
    assert empty == [] and empty.status == "awaiting_feedback" and empty.retry_after == 1.0
    assert_response(empty.data, "/v1/studies/{study_id}/ask", "post")
    threading.Timer(0.5, first.tell, args=(1.0,)).start()
    t0 = time.monotonic()
    (second,) = s.ask(wait=20)  # held by the daemon until the tell closes the batch
    assert time.monotonic() - t0 < 15 and second.id == first.id + 1
    with pytest.raises(TimeoutError):
        with s.trial(wait=0.5):
            pass
    second.tell(numpy.float32(0.5))  # numpy scalars are numbers too
    assert s.get_trial(second.id).value == 0.5


def test_ask_reports_max_trials(kb):
    s = xy_study(kb, "capped", max_trials=1)
    s.ask()[0].tell(1.0)
    done = s.ask(wait=5)
    assert done == [] and done.status == "max_trials_reached"
    with pytest.raises(kbandit.NoTrialAvailable) as e:
        with s.trial():
            pass
    assert e.value.status == "max_trials_reached"


def test_pause_resume_complete_and_list_by_state(kb, monkeypatch):
    a, b, c = (xy_study(kb, n) for n in ("a", "b", "c"))
    assert a.state == "active"
    (pending,) = b.ask()
    assert b.pause() is b and b.state == "paused"
    assert_component(b.data, "Study")
    empty = b.ask()
    assert empty == [] and empty.status == "study_paused" and empty.awaiting == 1
    assert pending.tell(1.0).state == "completed"  # work in flight is taken
    assert c.complete().state == "completed"
    monkeypatch.setattr(kbandit.client, "PAGE", 1)  # the cursor of a filtered list
    for state, want in (("active", [a]), ("paused", [b]), ("completed", [c])):
        assert [s.id for s in kb.studies(state=state)] == [s.id for s in want]
        assert [s.state for s in kb.studies(state=state)] == [state]
    assert [s.id for s in kb.studies(name="b", state="paused")] == [b.id]
    assert kb.studies(name="b", state="active") == []
    assert b.resume().state == "active" and len(b.ask()) == 1
    with pytest.raises(kbandit.Conflict) as e:
        c.resume()
    assert e.value.field == "state" and kb.get_study(c.id).state == "completed"
    with pytest.raises(kbandit.InvalidRequest) as e:
        a.set_state("done")
    assert e.value.field == "state"
    with pytest.raises(kbandit.InvalidRequest) as e:
        kb.studies(state="done")
    assert e.value.field == "state"


def test_trial_waits_through_a_pause_and_stops_at_completion(kb):
    s = xy_study(kb, "paused")
    s.pause()
    threading.Timer(0.5, s.resume).start()
    t0 = time.monotonic()
    with s.trial(wait=20) as t:  # held while paused, handed out at the resume
        t.tell(0.5)
    assert time.monotonic() - t0 < 15
    s.complete()
    done = s.ask(wait=5)
    assert done == [] and done.status == "study_completed"
    with pytest.raises(kbandit.NoTrialAvailable) as e:
        with s.trial():
            pass
    assert e.value.status == "study_completed"
    assert s.optimize(objective, 3).id == t.id  # stops at once, no trial handed out


# ------------------------------------------------------------------ errors

def test_error_mapping(daemons):
    d = daemons(token="right-token-0123456")
    kb = kbandit.Client(d.url, d.token)
    s = xy_study(kb, "errors")
    with pytest.raises(kbandit.Conflict) as e:
        xy_study(kb, "errors")
    assert (e.value.status, e.value.code) == (409, "conflict")
    with pytest.raises(kbandit.InvalidRequest) as e:
        kb.create_study("bad", params={"x": (1.0, 0.0)})
    assert (e.value.status, e.value.code, e.value.field) == (400, "invalid", "space.params[0].high")
    assert "space.params[0].high" in str(e.value)
    with pytest.raises(kbandit.NotFound):
        s.get_trial(42)
    with pytest.raises(kbandit.Unauthorized) as e:
        kbandit.Client(d.url, "wrong-token-0123456").studies()
    assert e.value.status == 401 and e.value.code == "unauthorized"
    for cls in (kbandit.InvalidRequest, kbandit.Unauthorized, kbandit.NotFound,
                kbandit.Conflict, kbandit.Unavailable, kbandit.ConnectionFailed):
        assert issubclass(cls, kbandit.KbanditError)


def test_unreachable_daemon_raises_connection_failed():
    port = _free_port()
    kb = kbandit.Client(f"http://127.0.0.1:{port}", retries=2, timeout=2)
    t0 = time.monotonic()
    with pytest.raises(kbandit.ConnectionFailed) as e:
        kb.studies()
    assert e.value.status is None and "cannot reach" in str(e.value)
    assert time.monotonic() - t0 < 5


def test_503_is_retried_honouring_retry_after():
    unavailable = (503, {"Content-Type": "application/json", "Retry-After": "1"},
                   b'{"error":{"code":"unavailable","message":"shutting down","field":null}}')
    ok = (200, {"Content-Type": "application/json"}, b'{"status":"ok","version":"x"}')
    srv = ScriptedServer([unavailable, ok])
    try:
        assert kbandit.Client(srv.url).health()["status"] == "ok"
        assert len(srv.times) == 2 and srv.times[1] - srv.times[0] >= 0.95
    finally:
        srv.close()
    srv = ScriptedServer([unavailable])
    try:
        with pytest.raises(kbandit.Unavailable) as e:
            kbandit.Client(srv.url, retries=1).health()
        assert e.value.status == 503 and e.value.message == "shutting down"
        assert len(srv.times) == 2
    finally:
        srv.close()


def test_ask_without_request_id_for_an_older_daemon():
    """Each ask carries a request_id (its retries the same one); a daemon older than the
    field refuses it (400 naming it), and the client asks without it from then on."""
    refused = (400, {"Content-Type": "application/json"},
               b'{"error":{"code":"invalid","message":"unknown field \'request_id\'",'
               b'"field":"request_id"}}')
    empty = (200, {"Content-Type": "application/json"},
             b'{"trials":[],"status":"exhausted","awaiting":0,"retry_after_ms":null}')
    srv = ScriptedServer([refused, empty])
    try:
        s = kbandit.Study(kbandit.Client(srv.url), {"id": 1, "name": "old"})
        assert s.ask().status == "exhausted" and s.ask().status == "exhausted"
        sent = [json.loads(b) for b in srv.bodies]
        assert len(sent) == 3 and len(sent[0]["request_id"]) == 32, sent
        assert all("request_id" not in b for b in sent[1:]), sent
    finally:
        srv.close()


def test_error_without_json_body():
    srv = ScriptedServer([(502, {"Content-Type": "text/html"}, b"<h1>Bad Gateway</h1>")])
    try:
        with pytest.raises(kbandit.KbanditError) as e:
            kbandit.Client(srv.url).health()
        assert (e.value.status, e.value.code) == (502, "http_error")
        assert "Bad Gateway" in e.value.message
    finally:
        srv.close()


# ------------------------------------------------------------------ retries

def test_requests_retried_after_a_dropped_response(daemon, kb):
    proxy = DroppingProxy(daemon.port)
    try:
        via = kbandit.Client(proxy.url, daemon.token)
        s = via.get_study(xy_study(kb, "dropped").id)
        a, b = s.ask(count=2)
        proxy.drop()
        assert a.tell(0.75).value == 0.75  # applied, answer lost, retried: 200 again
        assert proxy.dropped == 1
        assert kb.get_study(s.id).get_trial(a.id).value == 0.75
        proxy.drop()
        assert b.fail("crashed").state == "failed"  # the retry sees it failed already
        proxy.drop()
        got = s.ask()  # the lost answer's trial comes back: the retry has its request_id
        assert len(got) == 1
        pending = kb.get_study(s.id).trials(state="pending")
        assert [t.id for t in pending] == [got[0].id], pending  # none left behind
        proxy.drop()
        assert s.tell_many([(a, 0.75)])[0].status == 200
        proxy.drop()
        s.delete()  # the replayed DELETE's 404 means the first one succeeded
        assert proxy.dropped == 5 and kb.find_study("dropped") is None
        proxy.drop()
        with pytest.raises(kbandit.ConnectionFailed, match="may have been applied"):
            via.create_study("not-replayed", params={"x": (0.0, 1.0)})
        assert kb.find_study("not-replayed") is not None  # it was: hence no blind retry
    finally:
        proxy.close()


def test_idle_connection_closed_by_daemon_is_reopened(daemons):
    d = daemons(args=["--idle-timeout-s", "1"])
    kb = kbandit.Client(d.url)
    s = xy_study(kb, "idle")
    time.sleep(1.5)  # the daemon closes the kept-alive connection meanwhile
    assert xy_study(kb, "idle-2").id == s.id + 1  # not replayable, yet sent safely


# ------------------------------------------------------------------ heartbeats

def test_heartbeat_keeps_a_slow_trial_alive(daemons):
    d = daemons(args=SWEEP)
    kb = kbandit.Client(d.url)
    s = xy_study(kb, "slow", lease_seconds=1)
    with s.trial(worker="slow") as t:
        time.sleep(3.0)  # three leases
        t.tell(1.0)
    assert s.get_trial(t.id).state == "completed"
    (u,) = s.ask()  # the same wait without heartbeats: the lease expires
    deadline = time.monotonic() + (10 if SANITIZED else 5)
    while s.get_trial(u.id).state == "pending" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert s.get_trial(u.id).state == "expired"
    with pytest.raises(kbandit.Conflict):
        u.tell(1.0)


def test_trial_scope_fails_the_trial_on_exception(kb):
    s = xy_study(kb, "scope")
    with pytest.raises(ZeroDivisionError):
        with s.trial() as t:
            1 / 0
    assert s.get_trial(t.id).state == "failed" and "ZeroDivisionError" in s.get_trial(t.id).reason
    with pytest.raises(RuntimeError, match="neither told nor failed"):
        with s.trial() as u:
            pass
    assert s.get_trial(u.id).state == "failed"
    with s.trial() as v:
        v.fail("skipped")
    assert s.get_trial(v.id).reason == "skipped"


# ------------------------------------------------------------------ optimize

@pytest.mark.parametrize("engine", ["random", "bbkb"])
def test_optimize_threads_tell_exactly_n_trials(kb, engine):
    s = xy_study(kb, f"opt-{engine}", engine=engine)
    best = s.optimize(objective, n_trials=24, n_workers=4)
    counts = s.refresh().progress["trials"]
    assert counts == {"pending": 0, "completed": 24, "failed": 0, "expired": 0}
    assert best.value == max(t.value for t in s.trials(state="completed"))
    assert len({t.worker for t in s.trials()}) > 1


def test_optimize_processes_tell_exactly_n_trials(kb):
    s = xy_study(kb, "opt-proc", engine="bbkb")
    s.optimize(objective, n_trials=12, n_workers=4, processes=True)
    assert s.refresh().progress["trials"]["completed"] == 12
    assert s.progress["trials"]["pending"] == 0
    s.optimize(objective, n_trials=3, n_workers=4, processes=True)  # adds exactly 3 more
    assert s.refresh().progress["trials"]["completed"] == 15


def test_optimize_stops_at_max_trials(kb):
    s = xy_study(kb, "opt-cap", max_trials=5)
    s.optimize(objective, n_trials=50, n_workers=3)
    assert s.refresh().progress["trials"]["completed"] == 5


def test_optimize_stops_and_reraises_when_fn_raises(kb):
    s = xy_study(kb, "opt-err")
    calls = []

    def fn(trial):
        calls.append(trial.id)
        if len(calls) == 3:
            raise KeyError("boom")
        return 1.0

    with pytest.raises(KeyError):
        s.optimize(fn, n_trials=20, n_workers=2)
    counts = s.refresh().progress["trials"]
    assert counts["failed"] == 1 and counts["pending"] == 0 and counts["completed"] < 20


def test_optimize_process_failure_is_reported(kb):
    s = xy_study(kb, "opt-proc-err")
    with pytest.raises(RuntimeError, match="worker failed"):
        s.optimize(_raising, n_trials=4, n_workers=2, processes=True)
    assert s.refresh().progress["trials"]["pending"] == 0


def _raising(trial):
    raise OSError("disk on fire")


def _free_port():
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
