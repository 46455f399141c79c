"""This file contains every engine under concurrent workers, and the batch semantics of
the engines that wait for feedback (BBKB, BKB).

- 8 worker threads share one study per engine (candidate set and box): ask(1) with
  long-poll, tell; every trial handed out is told exactly once, and the study ends with
  all trials completed and none pending.
- bbkb/bkb: asking while the batch is closed returns no trial, status awaiting_feedback,
  a Retry-After header and awaiting >= 1; a long-poll ask is woken by the feedback that
  closes the batch.
"""
import threading
import time

import pytest

from conftest import ENGINES, SANITIZED, ask, grid, tell, toy, try_create_engine_study

TRIALS = 40 if SANITIZED else 120
WORKERS = 8


def run_workers(d, sid, n, objective):
    lock = threading.Lock()
    state = {"issued": 0, "told": {}, "errors": []}

    def worker(i):
        api = d.client()
        try:
            while True:
                with lock:
                    if state["issued"] >= n:
                        return
                    state["issued"] += 1
                while True:
                    res = ask(api, sid, worker=f"w{i}", wait_ms=2000)
                    if res["trials"]:
                        break
                    assert res["status"] == "awaiting_feedback", res
                (t,) = res["trials"]
                v = objective(t)
                done = tell(api, sid, t["id"], v)
                with lock:
                    assert t["id"] not in state["told"]
                    state["told"][t["id"]] = done["value"]
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            state["errors"].append(repr(e))

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(300)
    assert not any(t.is_alive() for t in ths), "workers hung (an ask never got a trial?)"
    assert not state["errors"], state["errors"][:3]
    return state["told"]


@pytest.mark.parametrize("space", ["candidates", "box"])
@pytest.mark.parametrize("engine", ENGINES)
def test_engine_under_concurrent_workers(daemons, engine, space):
    d = daemons()
    api = d.client()
    if space == "candidates":
        sp = {"type": "candidates", "candidates": grid(60, 2)}
        # toy() is deterministic: unset, repeats would stop once the values show it
        # (progress.deterministic) and 60 candidates could not give 120 trials
        settings = {"seed": 9, "repeats": "allow"}
    else:
        sp = {"type": "box", "params": [{"name": "a", "type": "float", "low": -1, "high": 1},
                                        {"name": "b", "type": "int", "low": 0, "high": 9}]}
        settings = {"seed": 9, "pool_size": 128}
    sid = try_create_engine_study(api, f"conc-{engine}-{space}", engine, sp, settings)["id"]
    told = run_workers(d, sid, TRIALS, lambda t: toy(t["x"]))
    assert len(told) == TRIALS
    s = api.get(f"/v1/studies/{sid}").json()
    assert s["progress"]["trials"]["completed"] == TRIALS
    assert s["progress"]["trials"]["pending"] == 0
    assert api.get(f"/v1/studies/{sid}/best").json()["value"] == max(told.values())


@pytest.mark.parametrize("engine", ["bbkb", "bkb"])
def test_closed_batch_waits_for_feedback(daemons, engine):
    d = daemons()
    api = d.client()
    sid = try_create_engine_study(api, f"batch-{engine}", engine,
                                  {"type": "candidates", "candidates": grid(80, 2)}, {"seed": 1})["id"]
    pending = []
    for _ in range(100):
        r = api.post(f"/v1/studies/{sid}/ask", json={"worker": "b", "count": 1000})
        assert r.status_code == 200, r.text
        body = r.json()
        if not body["trials"]:
            break
        pending += body["trials"]
    else:
        pytest.fail("the batch never closed: 100 asks of 1000 all got trials")
    assert pending, "the first ask got no trial"
    assert body["status"] == "awaiting_feedback", body
    assert 1 <= body["awaiting"] <= len(pending), body
    assert int(r.headers["Retry-After"]) >= 1 and body["retry_after_ms"] >= 1

    result = {}

    def waiter():
        t0 = time.monotonic()
        result["body"] = ask(api, sid, worker="waiter", wait_ms=30000)
        result["elapsed"] = time.monotonic() - t0

    th = threading.Thread(target=waiter)
    th.start()
    time.sleep(0.3)
    for t in pending:
        tell(api, sid, t["id"], toy(t["x"]))
    th.join(60)
    assert not th.is_alive()
    assert result["body"]["trials"], result["body"]
    assert result["elapsed"] < 20, "the feedback did not wake the waiting ask"


def test_model_window_in_progress(daemons):
    """A box study's progress shows the rows bbkb's model is built on: all of them by
    default at this size, model_rows once the study has more (a noise-free objective)."""
    d = daemons()
    api = d.client()
    sp = {"type": "box", "params": [{"name": "a", "type": "float", "low": -1, "high": 1},
                                    {"name": "b", "type": "float", "low": 0, "high": 9}]}
    rows = {}
    for window in (None, 24):
        settings = {"seed": 9, "pool_size": 128}
        if window:
            settings["model_rows"] = window
        sid = try_create_engine_study(api, f"window-{window}", "bbkb", sp, settings)["id"]
        run_workers(d, sid, TRIALS, lambda t: toy(t["x"]))
        rows[window] = api.get(f"/v1/studies/{sid}").json()["progress"]["model_rows"]
    assert rows[24] == 24
    assert 24 < rows[None] <= TRIALS
