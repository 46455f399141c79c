"""This file checks what a study's choices must not depend on, through the daemon: other
studies served beside it (no state shared between engines), the study's direction
(minimizing f chooses what maximizing -f chooses) and the units of a box's parameters (an
affine change of every range, log ones included, leaves the unit-cube points the same).
A static cache or RNG in the core, a sign lost on one path, or a parameter mapped in its
own units would each fail one of them (all three held for every engine when written)."""
import pytest

from conftest import ENGINES, ask, create_study, tell

STEPS = 30
MODEL_ENGINES = [e for e in ENGINES if e != "random"]


def box(lo=0.0, hi=1.0):
    return {"type": "box", "params": [
        {"name": f"x{i}", "type": "float", "low": lo, "high": hi} for i in range(3)] + [
        {"name": "lr", "type": "float", "low": 1e-5 * (hi - lo), "high": 0.1 * (hi - lo),
         "log": True},
        {"name": "n", "type": "int", "low": 1, "high": 9}]}


def objective(x):
    """A smooth function of the unit-cube point, so that every space above sees the same."""
    return -sum((v - 0.3) ** 2 for v in x[:3]) - 0.05 * (x[3] - 0.6) ** 2 - 0.01 * x[4]


def run(api, sid, sign=1.0, other=None):
    """STEPS ask/tell rounds on sid (each followed by one on `other` when given); the
    points handed out, in unit-cube coordinates."""
    points = []
    for _ in range(STEPS):
        t = ask(api, sid)["trials"][0]
        points.append(t["x"])
        tell(api, sid, t["id"], sign * objective(t["x"]))
        if other is not None:
            o = ask(api, other)["trials"][0]
            tell(api, other, o["id"], objective(o["x"]))
    return points


@pytest.mark.parametrize("engine", ENGINES)
def test_other_studies_do_not_change_a_studys_choices(api, engine):
    alone = create_study(api, "alone", space=box(), engine=engine, settings={"seed": 5})
    points = run(api, alone["id"])
    other = create_study(api, "other", space=box(), engine="gp-ts", settings={"seed": 9})
    run(api, other["id"])  # the other study is ahead, with its own model
    twin = create_study(api, "twin", space=box(), engine=engine, settings={"seed": 5})
    assert run(api, twin["id"], other=other["id"]) == points


@pytest.mark.parametrize("engine", MODEL_ENGINES)
def test_minimizing_f_chooses_what_maximizing_minus_f_does(api, engine):
    lo = create_study(api, "min", space=box(), engine=engine, settings={"seed": 5},
                      direction="minimize")
    hi = create_study(api, "max", space=box(), engine=engine, settings={"seed": 5},
                      direction="maximize")
    assert run(api, lo["id"], sign=-1.0) == run(api, hi["id"])
    assert (api.get(f"/v1/studies/{lo['id']}/best").json()["x"] ==
            api.get(f"/v1/studies/{hi['id']}/best").json()["x"])


@pytest.mark.parametrize("engine", ["bbkb", "gp-ts"])
def test_parameter_units_do_not_change_the_choices(api, engine):
    a = create_study(api, "unit", space=box(), engine=engine, settings={"seed": 2})
    b = create_study(api, "wide", space=box(-5.0, 995.0), engine=engine, settings={"seed": 2})
    pa, pb = run(api, a["id"]), run(api, b["id"])
    worst = max(abs(u - v) for p, q in zip(pa, pb) for u, v in zip(p, q))
    assert worst < 1e-6, worst  # the maps' rounding only
