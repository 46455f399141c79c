"""bench/finite_grid.py's two tables on made-up runs whose answers are known by hand: a
setting that wins on half the seeds and loses on the rest is the pick of that half in table
(b), but not table (a)'s pick, and (b) judges each pick on the other half only, in its own
row and in the row over all seeds."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import finite_grid  # noqa: E402

# Regret ratio per seed 1-4 (binary fractions, so medians compare exactly). "lucky" is best
# on seeds 1-2 and worst on 3-4; "steady" is best by the median over all four seeds
# (0.09375 against lucky's (0.0625 + 0.5) / 2).
RUNS = {"default": [0.125, 0.125, 0.25, 0.25], "lucky": [0.0625, 0.0625, 0.5, 0.5],
        "steady": [0.09375] * 4}


def cells():
    lines = [json.dumps({"setting": setting, "engine": "e", "problem": "p", "seed": seed,
                         "regret_ratio": r})
             for setting, ratios in RUNS.items() for seed, r in enumerate(ratios, 1)]
    return finite_grid.load(lines)


def test_issue_table_picks_on_all_seeds():
    [row] = finite_grid.issue_rows(cells())
    assert row == ("e", "p", [1, 2, 3, 4], (0.1875, 0.25), "steady", (0.09375, 0.09375))


def test_held_out_table_judges_each_pick_on_the_other_half():
    rows = list(finite_grid.held_out_rows(cells()))
    assert rows == [("e", "p", [1, 2], [3, 4], "lucky", (0.25, 0.25), (0.5, 0.5)),
                    ("e", "p", [3, 4], [1, 2], "steady", (0.125, 0.125), (0.09375, 0.09375)),
                    ("e", "p", [1, 2, 3, 4], [1, 2, 3, 4], "lucky / steady", (0.1875, 0.25),
                     ((0.09375 + 0.5) / 2, 0.5))]
