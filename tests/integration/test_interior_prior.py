"""This file checks the interior prior mean of a candidate-set study over HTTP
(core/src/engine.c, kb__hyper_refit): its fitted height shows as
progress.hyperparameters.interior_prior once the GP has been fitted, it stays 0 on a box and
with the engine setting prior_mean = constant, and a restart replays it to the same value.
"""
import time

from conftest import ask, create_study, grid, toy

BOX = {"type": "box", "params": [{"name": "a", "type": "float", "low": -5, "high": 5},
                                 {"name": "b", "type": "float", "low": -5, "high": 5}]}


def run(api, sid, trials=12):
    for _ in range(trials):
        t = ask(api, sid)["trials"][0]
        r = api.post(f"/v1/studies/{sid}/tell",
                     json={"results": [{"trial_id": t["id"], "value": toy(t["x"])}]})
        assert r.status_code == 200, r.text
    return api.get(f"/v1/studies/{sid}").json()["progress"]["hyperparameters"]


def test_a_candidate_set_fits_the_prior_height(api):
    space = {"type": "candidates", "candidates": grid(60, 2)}
    auto = create_study(api, "auto", space=space, engine="gp-ucb")["id"]
    const = create_study(api, "const", space=space, engine="gp-ucb",
                         settings={"prior_mean": "constant"})["id"]
    box = create_study(api, "box", space=BOX, engine="gp-ucb")["id"]
    h = run(api, auto)
    assert h["fits"] > 0 and h["interior_prior"] != 0.0 and h["interior_prior"] != 1.0, h
    assert run(api, const)["interior_prior"] == 0.0
    assert run(api, box)["interior_prior"] == 0.0


def test_the_height_survives_a_restart(daemons):
    d = daemons()
    api = d.client()
    space = {"type": "candidates", "candidates": grid(60, 2)}
    sid = create_study(api, "restart", space=space, engine="bbkb")["id"]
    before = run(api, sid, 20)
    d.stop()
    d.start()
    deadline = time.time() + 30  # the restore replays the study in the background
    while True:
        after = d.client().get(f"/v1/studies/{sid}").json()["progress"]["hyperparameters"]
        if after["fits"] == before["fits"] or time.time() > deadline:
            break
        time.sleep(0.05)
    assert after["interior_prior"] == before["interior_prior"] != 0.0, (before, after)
