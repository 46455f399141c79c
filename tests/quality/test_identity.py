"""bench/identity/compare.py on made-up run files: runs that differ only in timers and work
counters are equal; a changed regret, a missing file or a missing run is a difference."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "identity"))
import compare  # noqa: E402

BOX = {"bench": "box_ask", "seed": 1, "told": 300, "dict_size": 88, "simple_regret": 1.5e-05,
       "lengthscales": [0.33, 0.29], "cpu_ms_per_round_trip": 0.699, "sec_embed": 0.021,
       "epochs_bounded": 6, "bound_resolved": 320}


def write(d, name, runs):
    d.mkdir(exist_ok=True)
    (d / name).write_text("".join(json.dumps(r) + "\n" for r in runs))


def test_timers_and_work_counters_do_not_count(tmp_path):
    faster = dict(BOX, cpu_ms_per_round_trip=0.5, sec_embed=0.01, epochs_bounded=9,
                  bound_resolved=100)
    write(tmp_path / "a", "box.jsonl", [BOX, BOX])
    write(tmp_path / "b", "box.jsonl", [faster, faster])
    assert compare.main(["compare.py", str(tmp_path / "a"), str(tmp_path / "b")]) == 0


def test_a_changed_choice_is_a_difference(tmp_path, capsys):
    write(tmp_path / "a", "box.jsonl", [BOX, BOX])
    write(tmp_path / "b", "box.jsonl", [BOX, dict(BOX, simple_regret=1.6e-05)])
    assert compare.main(["compare.py", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    assert "1 of 2 runs differ" in capsys.readouterr().out


def test_missing_file_or_run_is_a_difference(tmp_path):
    write(tmp_path / "a", "box.jsonl", [BOX, BOX])
    write(tmp_path / "a", "bench.jsonl", [BOX])
    write(tmp_path / "b", "box.jsonl", [BOX])
    equal, msg = compare.compare_file(tmp_path / "a" / "box.jsonl", tmp_path / "b" / "box.jsonl")
    assert not equal and msg == "2 runs against 1"
    assert compare.main(["compare.py", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
