"""This file contains the restart of a study whose engine chooses differently after the
restart than when its trials were handed out (a newer kbandit with another default or
algorithm; simulated by changing the study's seed in the database): the replayed asks
that diverge are adopted (kb_engine_ask_recorded), so the model holds the points the
workers evaluated, the trials pending before the restart are told at their stored
points, and the daemon logs one warning with the count.

Three paths: killed (no snapshot: every event replays from the trials table's points),
stopped cleanly (the shutdown snapshot, format 3, carries the points; its seed is
patched too), and stopped cleanly with the snapshot rewritten in format 2 (no points: the
daemon passes it over and replays every event).
"""
import json
import sqlite3
import struct

import pytest

from conftest import ask, create_study, grid, metrics, tell, toy
from test_faults import shim_lines  # the log lines with a given msg

ROWS = 30


def set_seed(db, sid, seed):
    """The study's seed in its stored config and in its snapshot (if any)."""
    con = sqlite3.connect(str(db), timeout=10)
    try:
        (config,) = con.execute("SELECT config FROM studies WHERE id = ?", (sid,)).fetchone()
        doc = json.loads(config)
        doc["engine"]["settings"]["seed"] = seed
        con.execute("UPDATE studies SET config = ? WHERE id = ?", (json.dumps(doc), sid))
        for seq, blob in con.execute("SELECT event_seq, bytes FROM snapshots WHERE study_id = ?",
                                     (sid,)).fetchall():
            blob = bytearray(blob)
            # option: str name (u32 length, bytes), u8 type, f64 value
            at = blob.index(struct.pack("<I", 4) + b"seed") + 8
            blob[at + 1:at + 9] = struct.pack("<d", float(seed))
            con.execute("UPDATE snapshots SET bytes = ? WHERE study_id = ? AND event_seq = ?",
                        (bytes(blob), sid, seq))
        con.commit()
    finally:
        con.close()


def as_version2(blob, dim):
    """A format 3 snapshot rewritten as format 2 (its asks without points)."""
    at = 12

    def take(n):
        nonlocal at
        at += n
        return blob[at - n:at]

    def string():
        return take(struct.unpack("<I", take(4))[0])

    string()                                   # engine
    for _ in range(struct.unpack("<I", take(4))[0]):
        string()
        kind = take(1)[0]
        if kind == 2:                          # KB_OPT_STRING
            string()
        elif kind == 3:                        # KB_OPT_VECTOR
            take(8 * struct.unpack("<I", take(4))[0])
        else:
            take(8)
    finite = take(1)[0]
    n, d = struct.unpack("<QQ", take(16))
    assert d == dim
    if finite:
        take(8 * n * d)
    elif take(1)[0]:
        take(9 * d)
    (n_events,) = struct.unpack("<Q", take(8))
    out = bytearray(blob[:at])
    out[8:12] = struct.pack("<I", 2)
    sizes = {1: 8 * d, 2: 16, 3: 8, 4: 8 * d + 8}
    for _ in range(n_events):
        kind = take(1)[0]
        body = take(sizes[kind])
        out += bytes([kind]) + (b"" if kind == 1 else body)
    assert at == len(blob)
    return bytes(out)


def downgrade_snapshots(db, sid, dim):
    con = sqlite3.connect(str(db), timeout=10)
    try:
        rows = con.execute("SELECT event_seq, bytes FROM snapshots WHERE study_id = ?",
                           (sid,)).fetchall()
        assert rows
        for seq, blob in rows:
            con.execute("UPDATE snapshots SET bytes = ? WHERE study_id = ? AND event_seq = ?",
                        (as_version2(blob, dim), sid, seq))
        con.commit()
    finally:
        con.close()


@pytest.mark.parametrize("stop", ["kill9", "sigterm", "sigterm-v2"])
def test_restart_under_another_engine_adopts_the_recorded_points(daemons, stop):
    d = daemons("before")
    api = d.client()
    sid = create_study(api, "replay-versions", engine="random",
                       space={"type": "candidates", "candidates": grid(ROWS, 2)},
                       settings={"seed": 1, "repeats": "never"})["id"]
    first = ask(api, sid, count=10)["trials"]
    assert len(first) == 10
    for t in first[:7]:
        tell(api, sid, t["id"], toy(t["x"]))
    if stop == "kill9":
        d.kill9()
    else:
        assert d.stop() == 0
    set_seed(d.db, sid, 2)
    if stop == "sigterm-v2":  # an older kbandit's snapshot: passed over, events replayed
        downgrade_snapshots(d.db, sid, 2)

    d2 = daemons("after", db=d.db)
    api = d2.client()
    r = api.get(f"/v1/studies/{sid}")
    assert r.status_code == 200, r.text
    warnings = shim_lines(d2, "replayed asks adopted")
    assert len(warnings) == 1 and warnings[0]["study"] == sid and warnings[0]["adopted"] > 0, \
        d2.stderr()
    assert metrics(api)[("kbandit_replay_adopted_asks_total", ())] == warnings[0]["adopted"]

    # the pending trials are told at their stored points
    for t in first[7:]:
        tell(api, sid, t["id"], toy(t["x"]))
    told = {t["id"]: toy(t["x"]) for t in first}
    best = api.get(f"/v1/studies/{sid}/best").json()
    best_id = max(told, key=told.get)
    assert best["id"] == best_id and best["x"] == next(t["x"] for t in first if t["id"] == best_id)
    exported = {t["id"]: t for t in api.get(f"/v1/studies/{sid}/export").json()["trials"]}
    for t in first:
        assert exported[t["id"]]["x"] == t["x"] and exported[t["id"]]["value"] == told[t["id"]]

    # the engine knows the recorded points: "never" hands out exactly the other ones
    later = ask(api, sid, count=ROWS)
    assert later["status"] == "exhausted" or len(later["trials"]) == ROWS - 10, later
    assert len(later["trials"]) == ROWS - 10
    assert [t["id"] for t in later["trials"]] == list(range(11, ROWS + 1))
    seen = {tuple(t["x"]) for t in first}
    assert not seen & {tuple(t["x"]) for t in later["trials"]}
