"""This file contains the concurrency, crash-recovery and deterministic-recovery tests.

- 16 worker threads on 4 studies, TRIALS trials each (2,000; 200 under KB_SANITIZED=1,
  because an ASan daemon is ~5x slower; KB_LOAD_TRIALS overrides): every trial ends
  completed, no candidate is handed to two workers while pending (repeats=no_pending),
  and the API and the database both count exactly the acknowledged tells.
- kill -9 during concurrent load (twice: the second crash hits a recovered daemon), then
  restart on the same database: every acknowledged tell is in the database (sqlite3,
  read-only) and in the API, integrity_check is ok, no trial is in an impossible state,
  asks continue; two daemons started on copies of the crashed database hand out
  identical next asks (deterministic recovery).
- bench/crash/run.py for 5 cycles: kill -9 at a random moment under 8 workers whose
  asks of 2-8 trials are answered by batch tells (the tests above tell one at a time);
  every acknowledged tell, batch items included, is read back after each restart, and
  the restart answers /healthz in under 1 s (5 s under a sanitizer build).
- A daemon stopped (SIGTERM, or kill -9 between requests) and restarted, and an
  uninterrupted daemon, given the same call sequence give the same asks, for every
  engine the daemon knows.
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import pytest
import requests

from conftest import (ENGINES, REPO, SANITIZER_MARKERS, SANITIZED, ask, daemon_binary, copy_db, create_study, db_integrity, db_trials, grid,
                      tell, toy, try_create_engine_study)

TRIALS = int(os.environ.get("KB_LOAD_TRIALS", 200 if SANITIZED else 2000))
STATES = {"pending", "completed", "failed", "expired"}


class Load:
    """Worker threads running ask(1) -> tell on studies with repeats=no_pending.

    A candidate is in `held` from the moment a worker receives it until just before that
    worker sends its tell. If an ask returns a candidate already held, the daemon handed
    a pending point to a second worker (removing it before the tell is sent rules out
    false alarms from the race between the tell's commit and our bookkeeping)."""

    def __init__(self, daemon, sids, workers, per_study=None):
        self.daemon, self.sids, self.workers = daemon, sids, workers
        self.per_study = per_study
        self.lock = threading.Lock()
        self.issued = {s: 0 for s in sids}
        self.held = {s: {} for s in sids}        # candidate -> trial ids held
        self.acked = {s: {} for s in sids}       # trial id -> value, 200 received
        self.violations = []
        self.errors = []
        self.empty_asks = 0
        self.stop = threading.Event()

    def claim(self, sid):
        with self.lock:
            if self.per_study is not None and self.issued[sid] >= self.per_study:
                return False
            self.issued[sid] += 1
            return True

    def worker(self, i):
        sid = self.sids[i % len(self.sids)]
        name = f"worker-{i}"
        api = self.daemon.client()
        try:
            while not self.stop.is_set() and self.claim(sid):
                while True:
                    res = ask(api, sid, worker=name)
                    if res["trials"]:
                        break
                    with self.lock:
                        self.empty_asks += 1
                    time.sleep(0.005)
                (t,) = res["trials"]
                assert t["state"] == "pending" and t["worker"] == name
                c = t["candidate_index"]
                with self.lock:
                    holders = self.held[sid].setdefault(c, set())
                    if holders:
                        self.violations.append((sid, c, sorted(holders), t["id"]))
                    holders.add(t["id"])
                time.sleep(0.002)  # "evaluation": widens the window in which a duplicate shows
                value = toy(t["x"]) + i * 1e-6
                with self.lock:
                    self.held[sid][c].discard(t["id"])
                done = tell(api, sid, t["id"], value)
                assert done["state"] == "completed" and done["value"] == value
                with self.lock:
                    assert t["id"] not in self.acked[sid], "trial handed out twice"
                    self.acked[sid][t["id"]] = value
        except requests.ConnectionError as e:
            if not self.stop.is_set():
                self.errors.append(repr(e))
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.errors.append(repr(e))
        finally:
            api.close()

    def start(self):
        self.threads = [threading.Thread(target=self.worker, args=(i,), daemon=True)
                        for i in range(self.workers)]
        for t in self.threads:
            t.start()
        return self

    def join(self, timeout=None):
        for t in self.threads:
            t.join(timeout)
        assert not any(t.is_alive() for t in self.threads), "workers hung"


def load_study(api, name, rows=40, engine="random"):
    return create_study(api, name, engine=engine, space={"type": "candidates",
                        "candidates": grid(rows, 2)}, settings={"repeats": "no_pending", "seed": 11})["id"]


def test_sixteen_workers_four_studies(daemons):
    if TRIALS != 2000:
        warnings.warn(f"load scaled down: {TRIALS} trials per study instead of 2,000 "
                      f"(KB_SANITIZED={int(SANITIZED)}, KB_LOAD_TRIALS)")
    d = daemons(args=["--threads", "4"])
    api = d.client()
    sids = [load_study(api, f"load-{k}") for k in range(4)]
    load = Load(d, sids, 16, per_study=TRIALS).start()
    load.join(timeout=600)
    assert not load.errors, load.errors[:5]
    assert not load.violations, f"pending candidates handed out twice: {load.violations[:5]}"
    # At most 4 of a study's 40 candidates are ever pending: an empty answer is a bug.
    assert load.empty_asks == 0, f"{load.empty_asks} asks got no trial"
    rows = db_trials(d.db)
    for sid in sids:
        assert len(load.acked[sid]) == TRIALS
        s = api.get(f"/v1/studies/{sid}").json()
        assert s["progress"]["trials"] == {"pending": 0, "completed": TRIALS, "failed": 0, "expired": 0}
        db = [r for r in rows if r["study_id"] == sid]
        assert len(db) == TRIALS
        assert {r["id"]: r["value"] for r in db} == load.acked[sid]
        assert {r["state"] for r in db} == {"completed"}
        assert not overlapping_pending(db), "a candidate was pending in two trials at once"
    assert db_integrity(d.db) == [("ok",)]


def overlapping_pending(rows):
    """Pairs of trials on one candidate whose pending intervals overlap, by the daemon's own
    clock (trials.created_ms / completed_ms, when the schema has them): with
    repeats=no_pending, a candidate is handed out again only after its tell committed."""
    if not rows or not {"created_ms", "completed_ms", "candidate_index"} <= set(rows[0]):
        return []
    bad = []
    by_cand = {}
    for r in sorted(rows, key=lambda r: (r["created_ms"], r["id"])):
        prev = by_cand.get(r["candidate_index"])
        if prev is not None and r["created_ms"] < prev["completed_ms"]:
            bad.append((prev["id"], r["id"]))
        by_cand[r["candidate_index"]] = r
    return bad


def trial_key(t):
    return (t["id"], t["candidate_index"], tuple(t["x"]), t["state"], t["worker"])


def ask_sequence(api, sids, rounds=3):
    """A fixed call sequence; returns everything the daemon handed out."""
    out = []
    for r in range(rounds):
        for sid in sids:
            res = ask(api, sid, worker="probe", count=2)
            out.append((sid, res["status"], [trial_key(t) for t in res["trials"]]))
            for t in res["trials"]:
                tell(api, sid, t["id"], toy(t["x"]))
    return out


def crash_under_load(d, sids):
    """Run 8 workers until enough tells are acknowledged, then kill -9 the daemon.
    Returns {(study, trial): value} of the acknowledged tells."""
    load = Load(d, sids, 8).start()
    deadline = time.monotonic() + 15
    while sum(len(a) for a in load.acked.values()) < (30 if SANITIZED else 150):
        assert time.monotonic() < deadline and not load.errors, load.errors[:3]
        time.sleep(0.02)
    load.stop.set()
    d.kill9()
    load.join(timeout=60)
    assert not load.errors, load.errors[:5]
    return {(sid, tid): v for sid, a in load.acked.items() for tid, v in a.items()}


def check_crashed_db(path, acked):
    """The database as a crash left it, read with sqlite3 before any daemon opens it."""
    assert db_integrity(path) == [("ok",)]
    rows = {(r["study_id"], r["id"]): r for r in db_trials(path)}
    for key, v in acked.items():
        assert key in rows, f"acknowledged tell of (study, trial) {key} lost"
        assert rows[key]["value"] == v and rows[key]["state"] == "completed", rows[key]
    for r in rows.values():
        assert r["state"] in STATES, r
        assert (r["value"] is not None) == (r["state"] == "completed"), r


def test_kill9_under_load_then_recover(daemons, tmp_path):
    d = daemons(name="crash")
    api = d.client()
    sids = [load_study(api, f"crash-{k}", rows=100) for k in range(2)]
    acked = {}
    for cycle in range(2):  # the second crash hits a daemon that itself recovered
        acked |= crash_under_load(d, sids)
        if cycle == 0:
            copy_a = copy_db(d.db, tmp_path / "copy-a")
            copy_b = copy_db(d.db, tmp_path / "copy-b")
        check_crashed_db(d.db, acked)
        # Restart on the same database: the API agrees and asks continue.
        d.start()
        api = d.client()
        for (sid, tid), v in acked.items():
            t = api.get(f"/v1/studies/{sid}/trials/{tid}").json()
            assert t["state"] == "completed" and t["value"] == v
        for sid in sids:
            s = api.get(f"/v1/studies/{sid}").json()
            assert s["progress"]["trials"]["completed"] >= sum(1 for k in acked if k[0] == sid)
            t = ask(api, sid, worker="after-crash")["trials"][0]
            acked[(sid, t["id"])] = tell(api, sid, t["id"], 0.0)["value"]
        assert db_integrity(d.db) == [("ok",)]

    # Deterministic recovery: two daemons on identical copies hand out identical asks.
    da = daemons(name="copy-a", db=copy_a)
    db_ = daemons(name="copy-b", db=copy_b)
    seq_a = ask_sequence(da.client(), sids)
    seq_b = ask_sequence(db_.client(), sids)
    assert seq_a == seq_b
    assert all(trials for _, _, trials in seq_a), "no asks after recovery"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill9"])
@pytest.mark.parametrize("engine", ENGINES)
def test_restart_equals_uninterrupted(daemons, engine, sig):
    """A daemon stopped (cleanly, or by kill -9 between requests) and restarted continues
    exactly as one that never stopped, given the same call sequence."""
    rows = grid(40, 2)
    space = {"type": "candidates", "candidates": rows}
    settings = {"seed": 21}
    x = daemons(name="restarted")
    y = daemons(name="uninterrupted")
    apis = {"x": x.client(), "y": y.client()}
    sids = {k: try_create_engine_study(a, f"det-{engine}", engine, space, settings)["id"]
            for k, a in apis.items()}
    assert sids["x"] == sids["y"]
    first = {k: ask_sequence(a, [sids[k]], rounds=3) for k, a in apis.items()}
    assert first["x"] == first["y"]
    # One trial left pending across the restart: it must survive it too.
    pend = {k: ask(a, sids[k], worker="keeper")["trials"] for k, a in apis.items()}
    assert [trial_key(t) for t in pend["x"]] == [trial_key(t) for t in pend["y"]]
    rc = x.stop(sig)
    assert rc == (0 if sig == signal.SIGTERM else -signal.SIGKILL), x.stderr()[-2000:]
    x.start()
    apis["x"] = x.client()
    assert apis["x"].get(f"/v1/studies/{sids['x']}/trials/{pend['x'][0]['id']}").json()["state"] == "pending"
    second = {k: ask_sequence(a, [sids[k]], rounds=4) for k, a in apis.items()}
    assert second["x"] == second["y"]
    for k, a in apis.items():
        tell(a, sids[k], pend[k][0]["id"], 0.5)
    third = {k: ask_sequence(a, [sids[k]], rounds=2) for k, a in apis.items()}
    assert third["x"] == third["y"]


def test_sigterm_under_load_exits_cleanly(daemons):
    """SIGTERM while workers keep asking and telling on kept-alive connections, and while
    long-polls wait: the daemon exits with status 0 (libmicrohttpd aborts if it is stopped
    with a connection still suspended, e.g. one waiting for its commit) and every
    acknowledged tell is there after the restart. Repeated, since the window is narrow."""
    for round_ in range(3):
        d = daemons(name=f"term{round_}")
        api = d.client()
        sid = create_study(api, f"term{round_}", {"type": "candidates", "candidates": grid(400, 2)},
                           settings={"repeats": "no_pending"})["id"]
        acked, stop = {}, threading.Event()

        def worker(w):
            s = requests.Session()
            while not stop.is_set():
                try:
                    r = s.post(f"{d.url}/v1/studies/{sid}/ask",
                               json={"worker": f"w{w}", "wait_ms": 2000}, timeout=30)
                    trials = r.json().get("trials", []) if r.status_code == 200 else []
                    for t in trials:
                        r = s.post(f"{d.url}/v1/studies/{sid}/trials/{t['id']}/tell",
                                   json={"value": toy(t["x"])}, timeout=30)
                        if r.status_code == 200:
                            acked[t["id"]] = r.json()["value"]
                except (requests.RequestException, ValueError):
                    return

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
        for th in threads:
            th.start()
        time.sleep(0.5 + 0.2 * round_)
        rc = d.stop()
        stop.set()
        for th in threads:
            th.join(60)
        assert rc == 0, d.stderr()[-3000:]
        assert acked, "no tell was acknowledged before SIGTERM"
        d.start()
        for tid, v in acked.items():
            t = d.client().get(f"/v1/studies/{sid}/trials/{tid}").json()
            assert t["state"] == "completed" and t["value"] == v


def test_crash_cycles_with_batch_tells(tmp_path):
    """Issue 16 target "0 acknowledged tells lost over 100 kill -9 cycles under load; restart
    to /healthz in under 1 s": the benchmark's short form (the 100-cycle figures are in
    docs/BENCHMARKS.md)."""
    work = tmp_path / "crash"
    out = subprocess.run([sys.executable, str(REPO / "bench" / "crash" / "run.py"), "--cycles", "5",
                          "--daemon", str(daemon_binary()), "--dir", str(work), "--max-seconds", "300"],
                         capture_output=True, text=True, timeout=600)
    logs = "".join(p.read_text(errors="replace") for p in sorted(work.glob("stderr.*.log")))
    assert not [m for m in SANITIZER_MARKERS if m in logs], logs[-8000:]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(out.stdout.splitlines()[-1])
    assert summary["cycles"] == 5 and summary["integrity"] == "ok", summary
    assert summary["lost_at_restart"] == 0 and summary["lost_at_end"] == 0, summary
    assert summary["acked_in_batches"] > 0 and summary["tells_per_cycle"]["min"] > 0, summary
    assert summary["restart_to_healthz_s"]["max"] < (5 if SANITIZED else 1), summary
