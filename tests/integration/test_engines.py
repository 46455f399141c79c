"""This file contains the full ask/tell loop over HTTP for every engine the daemon knows.

Engines are discovered by name: a study is created with each name of conftest.ENGINES
and a name the daemon does not know fails the test (conftest.try_create_engine_study), so
an engine dropped from the registry cannot lose its tests silently. Each engine runs on a finite candidate set and on a box space with
float (linear and log), int and categorical parameters. The engine catalogue (GET
/v1/engines) lists exactly those engines, and each setting it declares is accepted at its
default and refused, with its field, just outside its range or choices.
"""
import csv
import io
import json
import math
import random
import sqlite3

import pytest

from conftest import (ENGINES, ask, create_study, error_of, grid, metrics, tell, toy,
                      try_create_engine_study)

BOX = {"type": "box", "params": [
    {"name": "lr", "type": "float", "low": 1e-5, "high": 1.0, "log": True},
    {"name": "x", "type": "float", "low": -2.0, "high": 2.0},
    {"name": "layers", "type": "int", "low": 1, "high": 8},
    {"name": "opt", "type": "categorical", "choices": ["adam", "sgd", "rmsprop"]},
]}
TRIALS = 12


def box_objective(params):
    return (-(math.log10(params["lr"]) + 3) ** 2 - (params["x"] - 0.5) ** 2
            - 0.1 * (params["layers"] - 4) ** 2 + {"adam": 1, "sgd": 0, "rmsprop": 0.5}[params["opt"]])


def check_box_trial(t):
    p = t["params"]
    assert set(p) == {"lr", "x", "layers", "opt"}, t
    assert 1e-5 * (1 - 1e-9) <= p["lr"] <= 1.0 * (1 + 1e-9), t
    assert -2.0 <= p["x"] <= 2.0, t
    assert isinstance(p["layers"], int) and 1 <= p["layers"] <= 8, t
    assert p["opt"] in ("adam", "sgd", "rmsprop"), t
    assert all(0.0 <= u <= 1.0 for u in t["x"]), t
    assert t["candidate_index"] is None


def run_loop(api, study, objective, n):
    """ask(2)/tell until n trials are completed; returns {trial_id: value}."""
    sid = study["id"]
    told = {}
    rounds = 0
    while len(told) < n:
        rounds += 1
        assert rounds <= 4 * n, f"no progress after {rounds} asks: {told}"
        res = ask(api, sid, worker="loop", count=min(2, n - len(told)))
        if not res["trials"]:
            # Nothing is pending, so the engine must not wait for feedback.
            assert res["status"] in ("exhausted", "max_trials_reached"), res
            break
        assert res["status"] == "ok", res
        for t in res["trials"]:
            assert t["state"] == "pending" and t["study_id"] == sid and t["worker"] == "loop"
            v = objective(t)
            done = tell(api, sid, t["id"], v)
            assert done["state"] == "completed" and done["value"] == v and done["id"] == t["id"]
            told[t["id"]] = v
    return told


def check_summary(api, study, told, maximize=True):
    sid = study["id"]
    s = api.get(f"/v1/studies/{sid}").json()
    assert s["progress"]["trials"]["completed"] == len(told)
    assert s["progress"]["trials"]["pending"] == 0
    best = api.get(f"/v1/studies/{sid}/best").json()
    target = max(told.values()) if maximize else min(told.values())
    assert best["value"] == target and told[best["id"]] == target
    listed = api.get(f"/v1/studies/{sid}/trials", params={"state": "completed", "limit": 1000}).json()
    assert {t["id"]: t["value"] for t in listed["trials"]} == told
    export = api.get(f"/v1/studies/{sid}/export", params={"format": "json"}).json()
    assert export["study"]["id"] == sid and len(export["trials"]) == len(told)
    r = api.get(f"/v1/studies/{sid}/export", params={"format": "csv"})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0][:4] == ["id", "state", "worker", "value"] and len(rows) == 1 + len(told)


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_candidates(api, engine):
    rows = grid(40, 3)
    study = try_create_engine_study(api, f"cand-{engine}", engine,
                                    {"type": "candidates", "candidates": rows},
                                    settings={"seed": 3})
    assert study["engine"]["name"] == engine
    assert study["space"]["rows"] == 40 and study["space"]["dim"] == 3

    def objective(t):
        assert t["x"] == rows[t["candidate_index"]] and t["params"] is None
        return toy(t["x"])
    told = run_loop(api, study, objective, TRIALS)
    assert len(told) == TRIALS
    check_summary(api, study, told)


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_box(api, engine):
    study = try_create_engine_study(api, f"box-{engine}", engine, BOX,
                                    settings={"seed": 5, "pool_size": 256})
    assert [p["name"] for p in study["space"]["params"]] == ["lr", "x", "layers", "opt"]

    def objective(t):
        check_box_trial(t)
        return box_objective(t["params"])
    told = run_loop(api, study, objective, TRIALS)
    assert len(told) == TRIALS
    check_summary(api, study, told)


def test_minimize_best_is_smallest(api):
    study = create_study(api, "min", direction="minimize")
    assert study["direction"] == "minimize"
    told = run_loop(api, study, lambda t: toy(t["x"]), 8)
    check_summary(api, study, told, maximize=False)


@pytest.mark.parametrize("direction", ["maximize", "minimize"])
def test_best_by_model(api, direction):
    """GET /best?by=model (kb_engine_recommend): 404 before a tell, then a completed trial;
    on a noisy 1-d objective (gp-ucb, 40 trials) the model's pick lies near the true
    optimum, x = 0.3, where the best told value is partly noise; a random-engine study
    (no model) answers as by=value."""
    sign = 1.0 if direction == "maximize" else -1.0
    space = {"type": "box", "params": [{"name": "x", "type": "float", "low": 0.0, "high": 1.0}]}
    study = create_study(api, f"by-model-{direction}", space=space, engine="gp-ucb",
                         settings={"seed": 3}, direction=direction)
    sid = study["id"]
    r = api.get(f"/v1/studies/{sid}/best", params={"by": "model"})
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"
    rng = random.Random(7)
    told = run_loop(api, study, lambda t: sign * (-(t["params"]["x"] - 0.3) ** 2 +
                                                  0.05 * rng.gauss(0.0, 1.0)), 40)
    pick = api.get(f"/v1/studies/{sid}/best", params={"by": "model"}).json()
    assert pick["state"] == "completed" and told[pick["id"]] == pick["value"]
    assert abs(pick["params"]["x"] - 0.3) < 0.1, pick
    plain = create_study(api, f"by-model-random-{direction}", engine="random",
                         direction=direction)
    run_loop(api, plain, lambda t: toy(t["x"]), 8)
    by_value = api.get(f"/v1/studies/{plain['id']}/best").json()
    assert api.get(f"/v1/studies/{plain['id']}/best", params={"by": "model"}).json() == by_value


def test_candidate_set_upload_json_and_csv(api):
    r = api.post("/v1/candidate-sets", json={"rows": [[1, 2], [3, 4], [5, 6]], "names": ["a", "b"]})
    assert r.status_code == 201, r.text
    cs = r.json()
    assert cs["rows"] == 3 and cs["dim"] == 2 and cs["names"] == ["a", "b"]
    assert api.get(f"/v1/candidate-sets/{cs['id']}").json() == cs
    r = api.post("/v1/candidate-sets", data="p,q\n1,2\n3,4\n",
                 headers={"Content-Type": "text/csv"})
    assert r.status_code == 201, r.text
    csv = r.json()
    assert csv["rows"] == 2 and csv["dim"] == 2 and csv["names"] == ["p", "q"]
    study = create_study(api, "from-set",
                         space={"type": "candidates", "candidate_set": cs["id"]})
    assert study["space"]["rows"] == 3 and study["space"].get("candidate_set") == cs["id"]
    t = ask(api, study["id"])["trials"][0]
    assert t["x"] == [[1, 2], [3, 4], [5, 6]][t["candidate_index"]]


def test_observations_warm_start(daemons):
    """Observations are counted in progress (not as trials), a batch with one bad item
    adds none of them, and the count and the JSON export's observations (in the order
    taken, values as given) survive a restart."""
    d = daemons()
    api = d.client()
    rows = grid(10, 2)
    sid = create_study(api, "warm", space={"type": "candidates", "candidates": rows})["id"]
    r = api.post(f"/v1/studies/{sid}/observations",
                 json={"observations": [{"x": rows[0], "value": 1.5}, {"x": rows[1], "value": -2}]})
    assert r.status_code == 200, r.text
    assert r.json()["added"] == 2
    r = api.post(f"/v1/studies/{sid}/observations",
                 json={"observations": [{"x": rows[2], "value": 1.0}, {"x": rows[3], "value": "x"}]})
    assert r.status_code == 400 and error_of(r)["field"] == "observations[1].value", r.text
    progress = api.get(f"/v1/studies/{sid}").json()["progress"]
    assert progress["observations"] == 2 and progress["best"] is None
    assert progress["trials"] == {"pending": 0, "completed": 0, "failed": 0, "expired": 0}
    assert d.stop() == 0
    d.start()
    api = d.client()
    assert api.get(f"/v1/studies/{sid}").json()["progress"]["observations"] == 2
    exported = api.get(f"/v1/studies/{sid}/export").json()
    assert [(o["x"], o["params"], o["value"]) for o in exported["observations"]] == [
        (rows[0], None, 1.5), (rows[1], None, -2)]
    assert exported["trials"] == []
    # a minimizing study exports a value as given, not as its engine sees it (negated)
    box = {"type": "box", "params": [{"name": "a", "type": "float", "low": 0, "high": 1}]}
    mid = create_study(api, "warm-min", space=box, direction="minimize")["id"]
    r = api.post(f"/v1/studies/{mid}/observations",
                 json={"observations": [{"params": {"a": 0.2}, "value": 1.25}]})
    assert r.status_code == 200, r.text
    obs = api.get(f"/v1/studies/{mid}/export").json()["observations"]
    assert [(o["params"], o["value"]) for o in obs] == [({"a": 0.2}, 1.25)]


def test_batch_tell(api):
    study = create_study(api, "batch")
    sid = study["id"]
    trials = ask(api, sid, count=3)["trials"]
    assert len(trials) == 3
    r = api.post(f"/v1/studies/{sid}/tell", json={"results": [
        {"trial_id": trials[0]["id"], "value": 1.0},
        {"trial_id": trials[1]["id"], "value": 2.0},
        {"trial_id": 999999, "value": 3.0}]})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [x["status"] for x in res] == [200, 200, 404]
    assert res[0]["trial"]["state"] == "completed" and res[2]["error"]["code"] == "not_found"
    # The same batch again is harmless (exactly-once per item) and answers the same trials.
    again = api.post(f"/v1/studies/{sid}/tell", json={"results": [
        {"trial_id": trials[0]["id"], "value": 1.0}, {"trial_id": trials[1]["id"], "value": 2.0}]})
    assert [x["status"] for x in again.json()["results"]] == [200, 200]
    assert [x["trial"] for x in again.json()["results"]] == [res[0]["trial"], res[1]["trial"]]
    # Telling the first again with a different value is a per-item conflict.
    r = api.post(f"/v1/studies/{sid}/tell", json={"results": [
        {"trial_id": trials[0]["id"], "value": 5.0}, {"trial_id": trials[2]["id"], "value": 0.5}]})
    assert [x["status"] for x in r.json()["results"]] == [409, 200]


def test_fail_trial(api):
    study = create_study(api, "fail")
    sid = study["id"]
    t = ask(api, sid)["trials"][0]
    r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/fail", json={"reason": "OOM"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "failed" and r.json()["reason"] == "OOM"
    assert api.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 1}).status_code == 409
    s = api.get(f"/v1/studies/{sid}").json()
    assert s["progress"]["trials"]["failed"] == 1
    # A retried fail (its answer lost) is exactly-once, as a tell: the same reason answers
    # the stored trial, another reason 409 (it answered 409 "is failed" whatever the reason).
    r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/fail", json={"reason": "OOM"})
    assert r.status_code == 200 and r.json() == api.get(f"/v1/studies/{sid}/trials/{t['id']}").json()
    assert api.post(f"/v1/studies/{sid}/trials/{t['id']}/fail", json={"reason": "other"}).status_code == 409
    assert api.post(f"/v1/studies/{sid}/trials/{t['id']}/fail").status_code == 409
    u = ask(api, sid)["trials"][0]
    for _ in range(2):  # no reason, twice
        assert api.post(f"/v1/studies/{sid}/trials/{u['id']}/fail").status_code == 200
    assert api.get(f"/v1/studies/{sid}").json()["progress"]["trials"]["failed"] == 2


def test_max_trials(api):
    study = create_study(api, "cap", max_trials=3)
    sid = study["id"]
    got = ask(api, sid, count=5)
    assert len(got["trials"]) <= 3
    for t in got["trials"]:
        tell(api, sid, t["id"], 1.0)
    while True:
        res = ask(api, sid, count=1)
        if not res["trials"]:
            break
        tell(api, sid, res["trials"][0]["id"], 1.0)
    assert res["status"] == "max_trials_reached"
    assert api.get(f"/v1/studies/{sid}").json()["progress"]["trials"]["completed"] == 3


def test_list_studies_pagination(api):
    ids = {create_study(api, f"page-{i}")["id"] for i in range(5)}
    seen, cursor = [], None
    for _ in range(10):
        params = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = api.get("/v1/studies", params=params).json()
        assert len(page["studies"]) <= 2
        seen += [s["id"] for s in page["studies"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert set(seen) == ids and len(seen) == len(ids)


def test_healthz_and_metrics(daemon):
    api = daemon.client()
    h = api.get("/healthz")
    assert h.status_code == 200 and h.json()["status"] == "ok" and "version" in h.json()
    sid = create_study(api, "metered")["id"]
    create_study(api, "other")
    trials = ask(api, sid, count=3)["trials"]
    tell(api, sid, trials[0]["id"], 1.0)
    api.post(f"/v1/studies/{sid}/trials/{trials[1]['id']}/fail", json={})
    m = metrics(api)
    names = {k[0] for k in m}
    for name in ("kbandit_http_requests_total", "kbandit_http_request_duration_seconds_bucket",
                 "kbandit_studies", "kbandit_trials", "kbandit_resparsifications_total",
                 "kbandit_engine_seconds_total"):
        assert name in names, f"{name} missing from /metrics"
    assert m[("kbandit_studies", ())] == 2
    for state, n in (("pending", 1), ("completed", 1), ("failed", 1), ("expired", 0)):
        assert m[("kbandit_trials", (("state", state),))] == n, state
    asks = [v for (n, labels), v in m.items() if n == "kbandit_http_requests_total"
            and ("status", "200") in labels and any(l[0] == "route" and l[1].endswith("/ask") for l in labels)]
    assert sum(asks) == 1


def test_trials_pagination_and_box_export(api):
    study = create_study(api, "pages", space=BOX, settings={"pool_size": 64})
    sid = study["id"]
    told = run_loop(api, study, lambda t: box_objective(t["params"]), 20)
    seen, cursor = [], None
    for _ in range(10):
        params = {"limit": 7} | ({"cursor": cursor} if cursor else {})
        page = api.get(f"/v1/studies/{sid}/trials", params=params).json()
        assert len(page["trials"]) <= 7
        seen += [t["id"] for t in page["trials"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(told) and len(seen) == 20
    text = api.get(f"/v1/studies/{sid}/export", params={"format": "csv"}).text
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["id", "state", "worker", "value", "lr", "x", "layers", "opt"], rows[0]
    assert len(rows) == 21
    by_id = {int(r[0]): r for r in rows[1:]}
    assert {i: float(r[3]) for i, r in by_id.items()} == told


@pytest.mark.parametrize("engine", ENGINES)
def test_extreme_finite_values(api, engine):
    """Finite extremes (coordinates and values near DBL_MAX, tiny differences): every tell
    is accepted, the engine keeps handing out points, and nothing turns into NaN/inf.
    Coordinates whose spread overflows a double may be refused at creation (400)."""
    rows = [[1e308, -1e308], [-1e308, 1e308], [0.0, 5e-324], [1.0, 1.0 + 2.2e-16]]
    r = api.post("/v1/studies", json={"name": f"extreme-{engine}", "engine": {
        "name": engine, "settings": {"seed": 2}}, "space": {"type": "candidates", "candidates": rows}})
    if r.status_code == 400 and error_of(r)["field"] == "engine.name":
        pytest.fail(f"engine {engine!r} not in this daemon")
    if r.status_code == 400:  # refusing coordinates whose spread overflows is fine too
        assert error_of(r)["field"].startswith("space.candidates"), r.text
        rows[:2] = [[1e300, -1e300], [-1e300, 1e300]]
        r = api.post("/v1/studies", json={"name": f"extreme-{engine}", "engine": {
            "name": engine, "settings": {"seed": 2}}, "space": {"type": "candidates", "candidates": rows}})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    values = [1.7976931348623157e308, -1.7976931348623157e308, 5e-324, 0.0]
    for v in values:
        res = ask(api, sid, worker="x")
        assert res["trials"], res
        t = res["trials"][0]
        assert t["x"] == rows[t["candidate_index"]]
        tell(api, sid, t["id"], v)
    res = ask(api, sid, worker="x", count=2)
    assert res["status"] in ("ok", "awaiting_feedback"), res
    for t in res["trials"]:
        assert all(math.isfinite(u) for u in t["x"])
    best = api.get(f"/v1/studies/{sid}/best").json()
    assert best["value"] == 1.7976931348623157e308


def test_box_param_values_always_present(api):
    """Every param of a box has a finite value in every trial, even when high - low
    overflows a double (the daemon must then refuse the space or map without overflow)."""
    space = {"type": "box", "params": [{"name": "wide", "type": "float", "low": -1e308, "high": 1e308},
                                        {"name": "k", "type": "int", "low": -2 ** 53, "high": 2 ** 53}]}
    r = api.post("/v1/studies", json={"name": "wide", "space": space, "engine": {"name": "random"}})
    if r.status_code == 400:
        assert error_of(r)["field"].startswith("space.params["), r.text
        return
    assert r.status_code == 201, r.text
    for t in ask(api, r.json()["id"], count=5)["trials"]:
        assert set(t["params"]) == {"wide", "k"}, t
        assert -1e308 <= t["params"]["wide"] <= 1e308 and math.isfinite(t["params"]["wide"])
        assert -2 ** 53 <= t["params"]["k"] <= 2 ** 53


def test_csv_upload_with_bom_and_crlf(api):
    """Spreadsheet exports start with a UTF-8 byte-order mark and end lines with CRLF."""
    r = api.post("/v1/candidate-sets", data=b"\xef\xbb\xbfp,q\r\n1,2\r\n3,4\r\n",
                 headers={"Content-Type": "text/csv"})
    assert r.status_code == 201, r.text
    assert r.json()["names"] == ["p", "q"] and r.json()["rows"] == 2


def test_one_value_ranges(api):
    """low == high is a one-value parameter for int and float alike (log or not): every
    trial has that value, and telling it back as params is accepted."""
    space = {"type": "box", "params": [
        {"name": "f", "type": "float", "low": 0.3, "high": 0.3},
        {"name": "g", "type": "float", "low": 2.5, "high": 2.5, "log": True},
        {"name": "k", "type": "int", "low": 7, "high": 7},
        {"name": "m", "type": "int", "low": 3, "high": 3, "log": True},
        {"name": "u", "type": "float", "low": 0, "high": 1}]}
    study = create_study(api, "one-value", space=space)
    assert study["space"]["params"][0]["low"] == study["space"]["params"][0]["high"] == 0.3
    sid = study["id"]
    told = []
    for t in ask(api, sid, count=4)["trials"]:
        p = t["params"]
        assert (p["f"], p["g"], p["k"], p["m"]) == (0.3, 2.5, 7, 3), t
        assert all(0.0 <= u <= 1.0 for u in t["x"]), t
        told.append(tell(api, sid, t["id"], p["u"])["value"])
    r = api.post(f"/v1/studies/{sid}/observations", json={"observations": [
        {"params": {"f": 0.3, "g": 2.5, "k": 7, "m": 3, "u": 0.5}, "value": 2.0}]})
    assert r.status_code == 200 and r.json()["added"] == 1, r.text
    r = api.post(f"/v1/studies/{sid}/observations", json={"observations": [
        {"params": {"f": 0.4, "g": 2.5, "k": 7, "m": 3, "u": 0.5}, "value": 2.0}]})
    assert r.status_code == 400 and error_of(r)["field"] == "observations[0].params.f", r.text
    assert api.get(f"/v1/studies/{sid}/best").json()["value"] == max(told)


def test_stored_repeated_choices_still_load(daemons, tmp_path):
    """Repeated categorical choices are refused for new studies only: a study stored
    with them (by an earlier daemon; here written into the database) still loads."""
    d = daemons()
    api = d.client()
    space = {"type": "box", "params": [{"name": "c", "type": "categorical", "choices": ["a", "b"]}]}
    sid = create_study(api, "old", space=space)["id"]
    t = ask(api, sid)["trials"][0]
    tell(api, sid, t["id"], 1.0)
    assert d.stop() == 0
    con = sqlite3.connect(d.db)
    with con:
        config = json.loads(con.execute("SELECT config FROM studies WHERE id = ?", (sid,)).fetchone()[0])
        config["space"]["params"][0]["choices"] = ["a", "a"]
        con.execute("UPDATE studies SET config = ? WHERE id = ?", (json.dumps(config), sid))
    con.close()
    d.start()
    api = d.client()
    assert api.get(f"/v1/studies/{sid}").json()["space"]["params"][0]["choices"] == ["a", "a"]
    assert ask(api, sid)["trials"][0]["params"]["c"] == "a"
    r = api.post("/v1/studies", json={"name": "new", "space": {"type": "box", "params": [
        {"name": "c", "type": "categorical", "choices": ["a", "a"]}]}})
    assert r.status_code == 400 and error_of(r)["field"] == "space.params[0].choices[1]", r.text


@pytest.mark.parametrize("engine", ENGINES)
def test_the_shortest_lengthscale_allowed_serves(api, engine):
    """lengthscale 1e-12 (the least an option may set) keeps every posterior finite: a
    study set to 1e-160, accepted before, answered 500 to every ask after its first tell."""
    for space in ({"type": "candidates", "candidates": grid(20, 2)},
                  {"type": "box", "params": [{"name": "a", "type": "float", "low": 0, "high": 1},
                                             {"name": "b", "type": "float", "low": 0, "high": 1}]}):
        sid = create_study(api, f"short-{space['type']}", space=space, engine=engine,
                           settings={"lengthscale": 1e-12})["id"]
        for i in range(6):
            (t,) = ask(api, sid)["trials"]
            tell(api, sid, t["id"], toy(t["x"]) + 0.01 * i)


@pytest.mark.parametrize("engine", ENGINES)
def test_values_near_the_largest_double_keep_a_study_serving(api, engine):
    """Told values of -1.7e308 and +1.7e308 in turn (finite, accepted) made the
    standardized outputs overflow: gp-ucb and gp-bucb answered 500 "out of memory" to
    every later ask, restarts included."""
    space = {"type": "box", "params": [{"name": "a", "type": "float", "low": 0, "high": 1}]}
    sid = create_study(api, f"huge-{engine}", space=space, engine=engine, settings={"seed": 2})["id"]
    for i in range(14):
        (t,) = ask(api, sid)["trials"]
        tell(api, sid, t["id"], 1.7e308 if i % 2 else -1.7e308)
    assert api.get(f"/v1/studies/{sid}/best").json()["value"] == 1.7e308


def test_float_params_read_back_as_written(api):
    """A warm start's 0.001 on a log scale (and 0.3 on a linear one) comes back as 0.001
    (it was 0.0010000000000000002: mapped to the unit cube and back); handed-out floats
    have at most 15 significant digits and stay in range."""
    space = {"type": "box", "params": [
        {"name": "lr", "type": "float", "low": 1e-5, "high": 1.0, "log": True},
        {"name": "p", "type": "float", "low": 0.1, "high": 0.7}]}
    sid = create_study(api, "as-written", space=space, engine="gp-ucb")["id"]
    r = api.post(f"/v1/studies/{sid}/observations", json={"observations": [
        {"params": {"lr": 0.001, "p": 0.3}, "value": 1.0}, {"params": {"lr": 1.0, "p": 0.7}, "value": 0.0}]})
    assert r.status_code == 200, r.text
    obs = api.get(f"/v1/studies/{sid}/export").json()["observations"]
    assert [o["params"] for o in obs] == [{"lr": 0.001, "p": 0.3}, {"lr": 1.0, "p": 0.7}]
    for _ in range(10):
        (t,) = ask(api, sid)["trials"]
        for name, v in t["params"].items():
            assert float(f"{v:.15g}") == v, (name, v)
        assert 1e-5 <= t["params"]["lr"] <= 1.0 and 0.1 <= t["params"]["p"] <= 0.7, t
        tell(api, sid, t["id"], -abs(math.log10(t["params"]["lr"]) + 3) - t["params"]["p"])


def test_numeric_choices_match_by_value(api):
    """Choices 1.0 and 3 are told by value, as a new study's repeats are (1 and 1.0 are
    one choice): an observation naming 1 or 3.0 is taken as that choice (it was "not one
    of the choices"); a string or a boolean is not a number's choice."""
    space = {"type": "box", "params": [{"name": "c", "type": "categorical", "choices": [1.0, 2.5, 3]},
                                       {"name": "u", "type": "float", "low": 0, "high": 1}]}
    sid = create_study(api, "by-value", space=space)["id"]
    r = api.post(f"/v1/studies/{sid}/observations", json={"observations": [
        {"params": {"c": 1, "u": 0.5}, "value": 1.0}, {"params": {"c": 3.0, "u": 0.5}, "value": 2.0},
        {"params": {"c": 2.5, "u": 0.5}, "value": 3.0}]})
    assert r.status_code == 200, r.text
    obs = api.get(f"/v1/studies/{sid}/export").json()["observations"]
    assert [o["params"]["c"] for o in obs] == [1.0, 3, 2.5]
    big = create_study(api, "by-value-big", space={"type": "box", "params": [
        {"name": "c", "type": "categorical", "choices": [2 ** 53, 2 ** 53 + 1]}]})["id"]
    r = api.post(f"/v1/studies/{big}/observations", json={"observations": [
        {"params": {"c": 2 ** 53 + 1}, "value": 1.0}]})
    assert r.status_code == 200, r.text
    assert api.get(f"/v1/studies/{big}/export").json()["observations"][0]["params"]["c"] == 2 ** 53 + 1
    for bad in ("1", True, 2):
        r = api.post(f"/v1/studies/{sid}/observations",
                     json={"observations": [{"params": {"c": bad, "u": 0.5}, "value": 1.0}]})
        assert r.status_code == 400 and error_of(r)["field"] == "observations[0].params.c", r.text


def test_integer_options_are_exact_up_to_2_53(api):
    """The seed's maximum, 2^53, is taken and shown exactly; 2^53 + 1, which reads as
    2^53 in a double, is refused; range messages print integer bounds whole."""
    sid = create_study(api, "seed-max", settings={"seed": 2 ** 53})["id"]
    assert api.get(f"/v1/studies/{sid}").json()["engine"]["settings"]["seed"] == 2 ** 53
    r = api.post("/v1/studies", json={"name": "s", "space": {"type": "candidates",
                 "candidates": grid(5, 2)}, "engine": {"name": "random",
                 "settings": {"seed": 2 ** 53 + 1}}})
    assert r.status_code == 400 and "2^53" in error_of(r)["message"], r.text
    r = api.post("/v1/studies", json={"name": "s", "space": {"type": "candidates",
                 "candidates": grid(5, 2)}, "engine": {"name": "random",
                 "settings": {"pool_size": 2000000}}})
    assert r.status_code == 400 and error_of(r)["message"].endswith("must be <= 1000000"), r.text


def test_int_bounds_past_2_53_are_refused_new_and_kept_stored(daemons):
    """Int bounds live as doubles: a new study's must lie within +-(2^53 - 1), kept
    exactly (a high of 2^63 - 1 used to be stored as -2^63, below low, and the study
    failed at the next start); a study stored with a wider bound still loads."""
    d = daemons()
    api = d.client()
    safe = 2 ** 53 - 1
    space = {"type": "box", "params": [{"name": "k", "type": "int", "low": -safe, "high": safe}]}
    sid = create_study(api, "wide", space=space)["id"]
    assert api.get(f"/v1/studies/{sid}").json()["space"]["params"][0]["high"] == safe
    r = api.post(f"/v1/studies/{sid}/observations",
                 json={"observations": [{"params": {"k": safe}, "value": 1.0}]})
    assert r.status_code == 200, r.text
    r = api.post(f"/v1/studies/{sid}/observations",
                 json={"observations": [{"params": {"k": safe + 1}, "value": 1.0}]})
    assert r.status_code == 400, r.text
    assert error_of(r)["message"] == f"must be in [{-safe}, {safe}]", r.text
    old = create_study(api, "old", space={"type": "box", "params": [
        {"name": "k", "type": "int", "low": 0, "high": 1000}]})["id"]
    assert d.stop() == 0
    con = sqlite3.connect(d.db)
    with con:
        config = json.loads(con.execute("SELECT config FROM studies WHERE id = ?", (old,)).fetchone()[0])
        config["space"]["params"][0]["high"] = 2 ** 60
        con.execute("UPDATE studies SET config = ? WHERE id = ?", (json.dumps(config), old))
    con.close()
    d.start()
    api = d.client()
    assert api.get(f"/v1/studies/{sid}").json()["space"]["params"][0]["low"] == -safe
    assert api.get(f"/v1/studies/{old}").json()["space"]["params"][0]["high"] == 2 ** 60
    k = ask(api, old)["trials"][0]["params"]["k"]
    assert isinstance(k, int) and 0 <= k <= 2 ** 60


def test_a_study_whose_config_no_longer_loads_is_named_by_its_conflict(daemons):
    """A stored config that no longer parses leaves a study that is not listed (nothing
    but its name to show) and answers 500; creating its name again says which id holds
    it, and deleting that id frees the name."""
    d = daemons()
    api = d.client()
    sid = create_study(api, "broken")["id"]
    assert d.stop() == 0
    con = sqlite3.connect(d.db)
    with con:
        con.execute("UPDATE studies SET config = '{\"name\": 1}' WHERE id = ?", (sid,))
    con.close()
    d.start()
    api = d.client()
    assert api.get(f"/v1/studies/{sid}").status_code == 500
    assert api.get("/v1/studies", params={"name": "broken"}).json()["studies"] == []
    r = api.post("/v1/studies", json={"name": "broken", "space": {"type": "candidates",
                                                                  "candidates": grid(5, 2)}})
    assert r.status_code == 409 and f"(id {sid})" in error_of(r)["message"], r.text
    assert api.delete(f"/v1/studies/{sid}").status_code == 204
    create_study(api, "broken")


def sequential_until_empty(api, sid, objective, limit):
    """ask(1)/tell one trial at a time until an ask hands out nothing; returns the points
    handed out (as tuples) and that last answer."""
    points = []
    for _ in range(limit):
        res = ask(api, sid, worker="seq")
        if not res["trials"]:
            return points, res
        (t,) = res["trials"]
        points.append(tuple(t["x"]))
        tell(api, sid, t["id"], objective(t))
    pytest.fail(f"still handing out points after {limit} asks")


@pytest.mark.parametrize("engine", ENGINES)
def test_deterministic_catalogue_visits_new_rows(api, engine):
    """A finite set told a deterministic objective, repeats unset: once a row was told
    three times with one value, told rows are not handed out again (progress.deterministic),
    so the study goes through the catalogue to "exhausted" instead of handing out its best
    row for ever; a noisy objective keeps repeats."""
    sp = {"type": "candidates", "candidates": grid(15, 2)}
    sid = try_create_engine_study(api, f"det-{engine}", engine, sp, {"seed": 2})["id"]
    points, res = sequential_until_empty(api, sid, lambda t: toy(t["x"]), 200)
    assert res["status"] == "exhausted" and res["awaiting"] == 0, res
    assert len(set(points)) == 15, points
    first_third = next(i for i, p in enumerate(points) if points[:i + 1].count(p) == 3)
    later = points[first_third + 1:]
    assert not set(later) & set(points[:first_third + 1]) and len(set(later)) == len(later)
    assert api.get(f"/v1/studies/{sid}").json()["progress"]["deterministic"] is True
    sid = try_create_engine_study(api, f"noisy-{engine}", engine, sp, {"seed": 2})["id"]
    rng = random.Random(3)
    for _ in range(40):
        (t,) = ask(api, sid, worker="seq")["trials"]
        tell(api, sid, t["id"], toy(t["x"]) + rng.gauss(0, 0.01))
    assert api.get(f"/v1/studies/{sid}").json()["progress"]["deterministic"] is False


@pytest.mark.parametrize("engine", ENGINES)
def test_discrete_box_hands_out_each_point_once(api, engine):
    """A box of int and categorical parameters (4 x 3 x 2 = 24 points) hands out each
    point once, then answers "exhausted" (its pools repeat points; the repeats policy
    holds for points, not pool rows)."""
    sp = {"type": "box", "params": [
        {"name": "a", "type": "int", "low": 0, "high": 3},
        {"name": "b", "type": "int", "low": -1, "high": 1},
        {"name": "c", "type": "categorical", "choices": ["u", "v"]}]}
    sid = try_create_engine_study(api, f"disc-{engine}", engine, sp, {"seed": 2})["id"]

    def objective(t):
        p = t["params"]
        return -(p["a"] - 2) ** 2 - p["b"] ** 2 + (p["c"] == "v")

    points, res = sequential_until_empty(api, sid, objective, 200)
    assert res["status"] == "exhausted" and res["awaiting"] == 0, res
    assert len(points) == 24 and len(set(points)) == 24, points


@pytest.mark.parametrize("engine", ENGINES)
def test_log_scale_ints_are_points_of_their_own(daemons, engine):
    """A log-scale int is a discrete coordinate too (its values at their log positions):
    a box of a log int 1..20 and a categorical (40 points) hands out each point once, then
    answers "exhausted" (the int was a continuum rounded: g = 1, 2, 30 of 1..1000 came
    again and again); its params are ints in range, and a restart from the kill replays
    to the same next point."""
    d = daemons()
    api = d.client()
    sp = {"type": "box", "params": [
        {"name": "g", "type": "int", "low": 1, "high": 20, "log": True},
        {"name": "c", "type": "categorical", "choices": ["u", "v"]}]}
    sid = try_create_engine_study(api, f"logint-{engine}", engine, sp, {"seed": 5})["id"]

    def objective(t):
        return -(math.log(t["params"]["g"]) - 1.5) ** 2 + 0.1 * (t["params"]["c"] == "v")

    for _ in range(15):
        (t,) = ask(api, sid, worker="seq")["trials"]
        tell(api, sid, t["id"], objective(t))
    (nxt,) = ask(api, sid, worker="seq")["trials"]
    d.kill9()
    d.start()
    api = d.client()
    r = api.get(f"/v1/studies/{sid}/trials/{nxt['id']}").json()
    assert r["params"] == nxt["params"] and r["x"] == nxt["x"], (r, nxt)
    tell(api, sid, nxt["id"], objective(nxt))
    # the replay chose what the engine had handed out: nothing adopted
    assert metrics(api)[("kbandit_replay_adopted_asks_total", ())] == 0
    points, res = sequential_until_empty(api, sid, objective, 200)
    trials = api.get(f"/v1/studies/{sid}/trials", params={"limit": 1000}).json()["trials"]
    params = [(t["params"]["g"], t["params"]["c"]) for t in trials]
    assert res["status"] == "exhausted" and len(params) == 40 and len(set(params)) == 40, params
    assert all(isinstance(g, int) and 1 <= g <= 20 for g, _ in params), params


@pytest.mark.parametrize("engine", ENGINES)
def test_one_value_params_leave_a_box_discrete(api, engine):
    """A one-value int, float (low == high) or one-choice categorical is one point of its
    coordinate: with a 2-choice categorical and a 2-value int the box holds 4 points,
    handed out once each, then "exhausted" (a one-value param made the box a continuum
    that handed out one point forever)."""
    sp = {"type": "box", "params": [
        {"name": "c", "type": "categorical", "choices": ["a", "b"]},
        {"name": "i", "type": "int", "low": 7, "high": 7},
        {"name": "f", "type": "float", "low": 0.5, "high": 0.5},
        {"name": "o", "type": "categorical", "choices": ["only"]},
        {"name": "k", "type": "int", "low": 0, "high": 1}]}
    sid = try_create_engine_study(api, f"one-{engine}", engine, sp, {"seed": 1})["id"]
    points, res = sequential_until_empty(
        api, sid, lambda t: float(t["params"]["k"]) + (t["params"]["c"] == "b"), 50)
    assert res["status"] == "exhausted" and len(set(points)) == 4 == len(points), points
    for t in api.get(f"/v1/studies/{sid}/trials").json()["trials"]:
        assert (t["params"]["i"], t["params"]["f"], t["params"]["o"]) == (7, 0.5, "only"), t


def test_stored_log_ints_keep_their_continuum(daemons):
    """A study stored before log-scale ints became levels (its config has no "rules")
    keeps its continuum however the daemon stopped, and a new study's config says
    "rules": 2. An int too large for its log positions to be told apart (2e14 ..
    2e14 + 100) is a continuum, accepted."""
    d = daemons()
    api = d.client()
    sp = {"type": "box", "params": [{"name": "g", "type": "int", "low": 1, "high": 6, "log": True}]}
    old = create_study(api, "old-log", space=sp, engine="random", settings={"seed": 3})["id"]
    new = create_study(api, "new-log", space=sp, engine="random", settings={"seed": 3})["id"]
    big = create_study(api, "big-log", engine="random", space={"type": "box", "params": [
        {"name": "g", "type": "int", "low": 2 * 10 ** 14, "high": 2 * 10 ** 14 + 100, "log": True}]})["id"]
    assert ask(api, big)["trials"][0]["params"]["g"] >= 2 * 10 ** 14
    assert d.stop() == 0
    con = sqlite3.connect(d.db)
    with con:
        config = json.loads(con.execute("SELECT config FROM studies WHERE id = ?", (new,)).fetchone()[0])
        assert config["rules"] == 2, config
        del config["rules"]
        con.execute("UPDATE studies SET config = ? WHERE id = ?", (json.dumps(config), old))
    con.close()
    d.start()
    api = d.client()
    # the levels: six points, then exhausted
    assert len({ask(api, new)["trials"][0]["params"]["g"] for _ in range(6)}) == 6
    assert ask(api, new)["status"] == "exhausted"
    for stop in ("kill9", "sigterm", None):
        # the continuum: points anywhere, 12 distinct after each kind of stop
        assert len({ask(api, old)["trials"][0]["x"][0] for _ in range(12)}) == 12, stop
        if stop:
            d.kill9() if stop == "kill9" else d.stop()
            d.start()
            api = d.client()


def test_stored_options_past_the_new_limits_still_load(daemons):
    """lengthscale 1e-13 and seed 2^53 + 1, accepted by earlier versions, are refused for
    new studies only: a study stored with them still serves."""
    d = daemons()
    api = d.client()
    sid = create_study(api, "old-opts", engine="gp-ucb")["id"]
    assert d.stop() == 0
    con = sqlite3.connect(d.db)
    with con:
        config = json.loads(con.execute("SELECT config FROM studies WHERE id = ?", (sid,)).fetchone()[0])
        config["engine"]["settings"].update({"lengthscale": 1e-13, "seed": 2 ** 53 + 1})
        con.execute("UPDATE studies SET config = ? WHERE id = ?", (json.dumps(config), sid))
    con.close()
    d.start()
    api = d.client()
    for i in range(4):
        (t,) = ask(api, sid)["trials"]
        tell(api, sid, t["id"], float(i))
    body = {"name": "new-opts", "space": {"type": "candidates", "candidates": grid(5, 2)},
            "engine": {"name": "gp-ucb", "settings": {"lengthscale": 1e-13}}}
    assert api.post("/v1/studies", json=body).status_code == 400


@pytest.mark.parametrize("engine", ENGINES)
def test_discrete_box_larger_than_its_pool(api, engine):
    """A grid of 80 points searched through a pool of 32: every point is handed out
    once before the first "exhausted" (pools drawn near the end missed the last points,
    and engines answered "exhausted" with points left)."""
    sp = {"type": "box", "params": [
        {"name": "a", "type": "int", "low": 1, "high": 10},
        {"name": "c", "type": "categorical", "choices": list("pqrstuvw")}]}
    sid = try_create_engine_study(api, f"disc80-{engine}", engine, sp,
                                  {"seed": 3, "pool_size": 32})["id"]
    points, res = sequential_until_empty(
        api, sid, lambda t: -(t["params"]["a"] - 4) ** 2 + (t["params"]["c"] in "pw"), 300)
    assert res["status"] == "exhausted" and res["awaiting"] == 0, res
    assert len(points) == 80 and len(set(points)) == 80, len(set(points))


# ------------------------------------------------------------------ engine catalogue

PLAIN_BOX = {"type": "box", "params": [{"name": "a", "type": "float", "low": 0, "high": 1},
                                       {"name": "b", "type": "float", "low": 0, "high": 1}]}


def catalogue_entry(api, engine):
    cat = api.get("/v1/engines").json()
    return cat, next(e for e in cat["engines"] if e["name"] == engine)


def test_catalogue_lists_every_engine(api):
    cat = api.get("/v1/engines").json()
    assert sorted(e["name"] for e in cat["engines"]) == sorted(ENGINES)
    assert all(e["summary"] and e["max_dim"] >= 1 for e in cat["engines"])
    study = api.post("/v1/studies", json={"name": "no-engine", "space": PLAIN_BOX}).json()
    assert study["engine"]["name"] == cat["default"] == "bbkb"
    names = [o["name"] for o in cat["common_options"]]
    assert {"seed", "kernel", "lengthscale", "repeats", "pool_size"} <= set(names)


def outside(option):
    """Values just outside what the option declares."""
    lo, hi, kind = option["minimum"], option["maximum"], option["type"]
    if kind == "string":
        return ["no-such-" + option["name"]] if option["choices"] else []
    bad = []
    if lo is not None:
        bad.append(lo if option["exclusive_minimum"] else lo - 1)
    if hi is not None:
        bad.append(hi * 2 + 1)
    if kind == "integer" and lo is not None and (hi is None or hi - lo >= 1):
        bad.append(lo + 1.5)
    return [[v, v] for v in bad] if kind == "vector" else bad


@pytest.mark.parametrize("engine", ENGINES)
def test_catalogue_matches_what_a_study_accepts(api, engine):
    cat, entry = catalogue_entry(api, engine)
    # an engine's own entry of a common option's name replaces it (pi-gp-ucb's kernel)
    options = list({o["name"]: o for o in cat["common_options"] + entry["options"]}.values())
    defaults = {o["name"]: o["default"] for o in options if o["default"] is not None}
    create_study(api, f"defaults-{engine}", space=PLAIN_BOX, engine=engine, settings=defaults)
    tried = 0
    for o in options:
        for v in outside(o):
            r = api.post("/v1/studies", json={"name": f"bad-{engine}-{o['name']}",
                                              "space": PLAIN_BOX,
                                              "engine": {"name": engine,
                                                         "settings": {o["name"]: v}}})
            assert r.status_code == 400, (o, v, r.text)
            assert error_of(r)["field"].startswith("engine.settings." + o["name"]), (o, r.text)
            tried += 1
    assert tried >= len(cat["common_options"])


def test_unseeded_studies_draw_their_own_seed(daemons):
    """A study created without engine.settings.seed gets one drawn at creation, shown in its
    settings and stored with its config (a restart restores it with the same seed, so the
    replay makes the same choices); two such studies of one space start at different
    points; a given seed stays as given."""
    d = daemons()
    api = d.client()
    space = {"type": "box", "params": [{"name": "a", "type": "float", "low": 0, "high": 1},
                                       {"name": "b", "type": "float", "low": 0, "high": 1}]}
    studies = [create_study(api, n, space=space, engine="bbkb") for n in ("u1", "u2")]
    seeds = [s["engine"]["settings"]["seed"] for s in studies]
    assert all(isinstance(v, int) and v >= 0 for v in seeds) and seeds[0] != seeds[1], seeds
    firsts = [ask(api, s["id"])["trials"][0]["x"] for s in studies]
    assert firsts[0] != firsts[1]
    given = create_study(api, "given", space=space, engine="bbkb", settings={"seed": 7})
    assert given["engine"]["settings"] == {"seed": 7}
    sid = studies[0]["id"]
    assert d.stop() == 0
    d.start()
    api = d.client()
    assert api.get(f"/v1/studies/{sid}").json()["engine"]["settings"]["seed"] == seeds[0]
    assert api.get(f"/v1/studies/{given['id']}").json()["engine"]["settings"] == {"seed": 7}
