"""bench/quality/compare.py: runs paired by seed, the mean log10 regret ratio, its
bootstrap interval and the verdict. A comparison tool that called a build better on
luck, or paired the wrong runs, would send a candidate to the held-out sets (or keep it
from them) for no reason."""
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "bench" / "quality" / "compare.py"


def write(path, runs):
    with open(path, "w") as f:
        for fn, seed, regret, engine in runs:
            f.write(json.dumps({"function": fn, "budget": 200, "workers": 4, "noise": 0.0,
                                "seed": seed, "engine": engine,
                                "simple_regret": regret}) + "\n")
    return str(path)


def compare(*args):
    p = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def rows(out):
    """{name: (pairs, won/lost/tied, mean, verdict)} of the Markdown table."""
    got = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 6 and cells[1].isdigit():
            got[cells[0]] = (int(cells[1]), cells[2], float(cells[3]), cells[5])
    return got


def test_a_hundred_times_smaller_regret_is_better(tmp_path):
    rng = random.Random(3)
    a = [("branin", s, rng.uniform(0.1, 1.0), "default") for s in range(1, 11)]
    b = [(fn, s, r / 100.0, e) for fn, s, r, e in a]
    rc, out, _ = compare(write(tmp_path / "a", a), write(tmp_path / "b", b))
    assert rc == 0
    got = rows(out)
    assert got["all"][:3] == (10, "10 / 0 / 0", -2.0)
    assert got["all"][3] == "B better"
    # the same files the other way round
    rc, out, _ = compare(write(tmp_path / "b", b), write(tmp_path / "a", a))
    assert rows(out)["all"][3] == "B worse"


def test_luck_alone_is_undecided_and_the_output_reproducible(tmp_path):
    # B's regret is A's times a symmetric random factor: no build is better
    rng = random.Random(5)
    a = [("f%d" % (s % 3), s, rng.uniform(0.1, 1.0), "default") for s in range(60)]
    b = [(fn, s, r * 10 ** rng.choice([-0.5, 0.5]), e) for fn, s, r, e in a]
    b[0] = (b[0][0], b[0][1], a[0][2], "default")  # one tie
    fa, fb = write(tmp_path / "a", a), write(tmp_path / "b", b)
    rc, out, _ = compare(fa, fb)
    assert rc == 0
    mean = sum(math.log10(y[2] / x[2]) for x, y in zip(a, b)) / len(a)
    got = rows(out)["all"]
    assert got[0] == 60 and got[1].endswith("/ 1")
    assert abs(got[2] - mean) < 1e-3
    assert got[3] == "undecided"
    assert compare(fa, fb)[1] == out


def test_only_partners_are_paired_and_the_engine_filter_holds(tmp_path):
    a = [("branin", 1, 1.0, "default"), ("branin", 2, 1.0, "default"),
         ("branin", 3, 1.0, "gp-ucb")]
    b = [("branin", 1, 0.1, "default"), ("branin", 9, 0.1, "default"),
         ("branin", 3, 1e-12, "gp-ucb")]
    rc, out, _ = compare(write(tmp_path / "a", a), write(tmp_path / "b", b),
                         "--engine", "default")
    assert rc == 0
    assert rows(out)["branin (4x50, 0)"][:3] == (1, "1 / 0 / 0", -1.0)
    assert "2 runs have no partner" in out
    # every engine, and the floor: 1e-12 counts as 1e-9
    rc, out, _ = compare(write(tmp_path / "a", a), write(tmp_path / "b", b))
    assert rows(out)["all"][0] == 2
    assert abs(rows(out)["all"][2] - (-1.0 - 9.0) / 2) < 1e-9


@pytest.mark.parametrize("line", ['{"function": "branin"}', "not json", '{"function": 1, '
                                  '"budget": 200, "workers": 4, "seed": 1, '
                                  '"simple_regret": "x"}'])
def test_a_line_that_is_not_a_result_is_named(tmp_path, line):
    good = write(tmp_path / "a", [("branin", 1, 1.0, "default")])
    bad = tmp_path / "b"
    bad.write_text(json.dumps({"function": "branin", "budget": 200, "workers": 4,
                               "seed": 1, "simple_regret": 0.5}) + "\n" + line + "\n")
    rc, _, err = compare(good, str(bad))
    assert rc != 0 and f"{bad}:2:" in err


def test_a_nan_regret_is_named(tmp_path):
    good = write(tmp_path / "a", [("branin", 1, 1.0, "default")])
    bad = write(tmp_path / "b", [("branin", 1, 0.5, "default"),
                                 ("branin", 2, float("nan"), "default")])
    rc, _, err = compare(good, bad)
    assert rc != 0 and f"{bad}:2:" in err and "nan" in err


def test_a_repeated_run_is_refused_unless_an_engine_is_chosen(tmp_path):
    # two engines' runs of the same seed in one file: without --engine one would be lost
    a = write(tmp_path / "a", [("branin", 1, 1.0, "default"), ("branin", 1, 0.01, "optuna-tpe")])
    b = write(tmp_path / "b", [("branin", 1, 0.1, "default")])
    rc, _, err = compare(a, b)
    assert rc != 0 and f"{a}:2:" in err and "line 1" in err
    rc, out, _ = compare(a, b, "--engine", "default")
    assert rc == 0 and rows(out)["all"][2] == -1.0


def test_no_partner_at_all_fails(tmp_path):
    rc, _, err = compare(write(tmp_path / "a", [("branin", 1, 1.0, "default")]),
                         write(tmp_path / "b", [("branin", 2, 1.0, "default")]))
    assert rc != 0 and "no run" in err


def test_the_metric_option_pairs_the_recommended_regrets(tmp_path):
    # equal simple regrets, B's recommended points 10x better: only --metric sees it
    def lines(path, scale):
        with open(path, "w") as f:
            for seed in range(1, 11):
                f.write(json.dumps({"function": "branin", "budget": 200, "workers": 4,
                                    "noise": 0.1, "seed": seed, "engine": "default",
                                    "simple_regret": 0.5,
                                    "recommended_regret": seed * scale}) + "\n")
        return str(path)
    a, b = lines(tmp_path / "a", 1.0), lines(tmp_path / "b", 0.1)
    assert rows(compare(a, b)[1])["all"][3] == "undecided"
    rc, out, _ = compare(a, b, "--metric", "recommended_regret")
    assert rc == 0 and rows(out)["all"][:3] == (10, "10 / 0 / 0", -1.0)
    rc, _, err = compare(a, b, "--metric", "regret")
    assert rc != 0 and "invalid choice" in err
