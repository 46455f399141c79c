"""This file tests kb-bench's --dump (bench/kb_bench.c) and the finite-set peer that reads
it (bench/finite_peer.py): the dump is the problem a kb-bench run uses (its size, its
noise, f rescaled to [0, 1]), written without an engine or a run; a file that cannot be
written is an error; the peer runs on the dump and reports kb-bench's fields.
"""
import json
import subprocess

from conftest import REPO

BENCH = REPO / "build" / "kb-bench"
PEER = REPO / "bench" / "finite_peer.py"


def bench(*args):
    return subprocess.run([str(BENCH), *args], capture_output=True, text=True, timeout=120,
                          env={"OPENBLAS_NUM_THREADS": "1"})


def read_dump(path):
    lines = path.read_text().splitlines()
    header = dict(kv.split("=") for kv in lines[0].lstrip("# ").split())
    rows = [[float(v) for v in line.split(",")] for line in lines[1:]]
    return header, rows


def test_the_dump_is_the_problem_a_run_uses(tmp_path):
    path = tmp_path / "branin.csv"
    r = bench("--problem", "branin", "--seed", "4", "--noise", "0.05", "--dump", str(path))
    assert r.returncode == 0 and r.stdout == "", r.stderr
    header, rows = read_dump(path)
    assert header == {"noise_sd": "0.050000000000000003", "noise_uniform": "0"}
    run = json.loads(bench("--engine", "random", "--problem", "branin", "--seed", "4",
                           "--T", "5").stdout)
    assert len(rows) == run["A"] and all(len(x) == run["d"] + 1 for x in rows)
    f = [x[-1] for x in rows]
    assert max(f) == 1.0 and min(f) == 0.0  # finite sets are rescaled to [0, 1]
    # the candidates depend on the seed, as the run's do
    bench("--problem", "branin", "--seed", "5", "--dump", str(tmp_path / "b5.csv"))
    assert read_dump(tmp_path / "b5.csv")[1] != rows


def test_a_problem_with_uniform_noise_says_so(tmp_path):
    path = tmp_path / "m.csv"
    assert bench("--problem", "matern-rkhs", "--seed", "1", "--dump", str(path)).returncode == 0
    assert read_dump(path)[0]["noise_uniform"] == "1"


def test_an_unwritable_dump_fails(tmp_path):
    r = bench("--problem", "branin", "--dump", str(tmp_path / "no" / "such" / "dir.csv"))
    assert r.returncode == 2 and r.stdout == "" and "dir.csv" in r.stderr


def test_the_peer_runs_on_the_dump():
    r = subprocess.run(["/usr/bin/python3", str(PEER), "--bench", str(BENCH), "--problems",
                        "branin", "--seeds", "2", "--T", "12"],
                       capture_output=True, text=True, timeout=300,
                       env={"OPENBLAS_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    line = json.loads(r.stdout)
    assert (line["engine"], line["problem"], line["A"], line["d"], line["T"]) == \
        ("sklearn-gp-ucb", "branin", 1000, 2, 12)
    assert 0 < line["regret_ratio"] < 5 and line["simple_regret"] >= 0
    assert "Matern" in line["kernel"]
