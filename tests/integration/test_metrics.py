"""This file contains the tests of GET /metrics (issue 14 item 5): the exposition passes
`promtool check metrics` (Debian's prometheus package, installed by scripts/install-deps:
missing promtool fails the test), counters never go down when studies are deleted (they
were sums over live studies, which Prometheus reads as counter resets), the process_*
metrics describe the daemon's own process, and kbandit_build_info names the version.
"""
import math
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import ask, create_study, grid, metrics, tell
from openapi_check import load_spec

COUNTERS = ("kbandit_resparsifications_total", "kbandit_engine_seconds_total",
            "kbandit_store_batches_total", "kbandit_store_operations_total")


def counters(api):
    m = metrics(api)
    return {name: m[(name, ())] for name in COUNTERS}


def run_trials(api, sid, n):
    for _ in range(n):
        for t in ask(api, sid)["trials"]:
            tell(api, sid, t["id"], math.sin(5 * t["x"][0]) + t["x"][1])


def test_promtool_accepts_the_exposition(api):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: run scripts/install-deps (Debian package prometheus)")
    sid = create_study(api, "linted", engine="bbkb")["id"]
    run_trials(api, sid, 5)
    api.get("/v1/studies/999999")  # a 404 row, and an unmatched route row
    api.get("/nowhere")
    text = api.get("/metrics").text
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"promtool: {r.stdout}{r.stderr}\n{text}"


def test_every_metric_is_documented(api):
    """Each metric family of the exposition is named in openapi.yaml's /metrics text
    (kbandit_replay_adopted_asks_total was not)."""
    text = api.get("/metrics").text
    families = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert len(families) >= 15, families
    doc = (Path(__file__).resolve().parents[2] / "openapi.yaml").read_text()
    described = doc[doc.index("operationId: metrics"):doc.index("responses:", doc.index("operationId: metrics"))]
    assert [f for f in families if f"`{f}" not in described] == []


def test_route_labels_are_openapi_paths(api):
    """The route label of every request row is its path as openapi.yaml writes it
    ({study_id}, {trial_id}, {set_id}): an operator reads one in terms of the other."""
    sid = create_study(api, "labels")["id"]
    run_trials(api, sid, 1)
    api.get(f"/v1/studies/{sid}/trials/1")
    api.get("/v1/candidate-sets/424242")
    api.get(f"/v1/studies/{sid}")
    spec = load_spec().doc
    rows = [labels for (name, labels) in metrics(api) if name == "kbandit_http_requests_total"]
    routes = {(dict(lb)["method"], dict(lb)["route"]) for lb in rows} - {("", "unmatched")}
    assert ("GET", "/v1/studies/{study_id}/trials/{trial_id}") in routes, routes
    assert len(routes) >= 6, routes
    for method, route in routes:
        assert method.lower() in spec["paths"].get(route, {}), (method, route)


def test_counters_keep_deleted_studies(api):
    sid = create_study(api, "doomed", engine="bbkb",
                       space={"type": "candidates", "candidates": grid(100, 2)})["id"]
    keep = create_study(api, "kept")["id"]
    run_trials(api, sid, 30)
    run_trials(api, keep, 3)
    before = counters(api)
    assert before["kbandit_resparsifications_total"] > 0  # bbkb resparsifies within 30 trials
    assert api.delete(f"/v1/studies/{sid}").status_code == 204
    after = counters(api)
    for name in COUNTERS:
        assert after[name] >= before[name], (name, before[name], after[name])
    assert after["kbandit_resparsifications_total"] == before["kbandit_resparsifications_total"]
    assert metrics(api)[("kbandit_studies", ())] == 1  # a gauge: it does go down


def test_counters_never_decrease_under_concurrent_deletes(api):
    """Scrapes racing with deletes: each study must be counted once (live or retired)."""
    stop = threading.Event()
    errors = []

    def churn():
        i = 0
        try:
            while not stop.is_set():
                sid = create_study(api, f"churn-{i}", engine="bbkb",
                                   space={"type": "candidates", "candidates": grid(40, 2)})["id"]
                run_trials(api, sid, 6)
                assert api.delete(f"/v1/studies/{sid}").status_code == 204
                i += 1
        except Exception as e:  # reported by the main thread
            errors.append(e)

    worker = threading.Thread(target=churn)
    worker.start()
    last = counters(api)
    deadline = time.monotonic() + 4
    try:
        while time.monotonic() < deadline and not errors:
            now = counters(api)
            for name in COUNTERS:
                assert now[name] >= last[name], (name, last[name], now[name])
            last = now
    finally:
        stop.set()
        worker.join()
    assert not errors, errors
    assert last["kbandit_resparsifications_total"] > 0


def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_ticks(fields):
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_process_metrics_and_build_info(daemon):
    api = daemon.client()
    pid = daemon.proc.pid
    # A fresh daemon may not have used one clock tick yet: give it work until it has, so
    # the CPU figure is checked against a nonzero count rather than passing on 0.
    sid = create_study(api, "cpu", engine="gp-ucb",
                       space={"type": "candidates", "candidates": grid(400, 2)})["id"]
    for _ in range(100):
        if cpu_ticks(proc_stat(pid)) >= 2:
            break
        run_trials(api, sid, 5)
    before = cpu_ticks(proc_stat(pid))
    assert before >= 2
    m = metrics(api)
    version = api.get("/healthz").json()["version"]
    assert m[("kbandit_build_info", (("version", version),))] == 1
    fields = proc_stat(pid)
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    assert m[("process_start_time_seconds", ())] == pytest.approx(btime + int(fields[19]) / ticks,
                                                                  abs=0.02)
    assert abs(m[("process_start_time_seconds", ())] - time.time()) < 600
    cpu = m[("process_cpu_seconds_total", ())]
    assert before / ticks <= cpu <= cpu_ticks(fields) / ticks + 0.01
    rss = m[("process_resident_memory_bytes", ())]
    assert 1 << 20 < rss < 1 << 34
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    assert abs(m[("process_open_fds", ())] - fds) <= 4  # the HTTP connection may come and go
    assert m[("process_max_fds", ())] >= m[("process_open_fds", ())]
