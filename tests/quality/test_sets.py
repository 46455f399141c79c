"""Which functions and seeds bench/quality/run.py runs (its plan()): the tuning / held-out
split of bench/quality/functions.py is what keeps the quality protocol honest
(docs/REFERENCES.md), so a --set that let another set's functions through, or gave them the
wrong seeds, would silently tune on held-out problems or report the wrong runs."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "quality"))
import run  # noqa: E402
from functions import FUNCTIONS, SETS  # noqa: E402


def test_every_function_is_in_exactly_one_set():
    for name in FUNCTIONS:
        assert sum(name in members for members, _ in SETS.values()) == 1, name


def test_each_set_runs_its_functions_with_its_seeds():
    for set_name, (members, seeds) in SETS.items():
        assert run.plan(None, set_name, None) == [(f, set_name, seeds) for f in members]


def test_both_is_tuning_and_held_out_only():
    want = ([(f, "tuning", SETS["tuning"][1]) for f in SETS["tuning"][0]]
            + [(f, "held-out", SETS["held-out"][1]) for f in SETS["held-out"][0]])
    assert run.plan(None, "both", None) == want


def test_seeds_replace_the_seeds_but_not_the_filter():
    # the thirteenth session's bug: --seeds made run.py ignore --set and run tuning functions
    got = run.plan(None, "held-out", "106,107")
    assert [f for f, _, _ in got] == SETS["held-out"][0]
    assert all(seeds == [106, 107] for _, _, seeds in got)
    got = run.plan("branin,hartmann6,dixon_price6", "held-out", "7")
    assert got == [("hartmann6", "held-out", [7])]


def test_named_functions_keep_their_own_sets_seeds():
    got = run.plan("dixon_price6,branin", "both", None)
    assert got == [("dixon_price6", "held-out2", SETS["held-out2"][1]),
                   ("branin", "tuning", SETS["tuning"][1])]


def test_unknown_function_is_refused():
    with pytest.raises(SystemExit, match="unknown function 'nope'"):
        run.plan("branin,nope", "both", None)
