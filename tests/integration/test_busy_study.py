"""This file contains the tests of the request workers (server/workpool.c): a study whose
asks take seconds must not hold up /healthz, other studies, or the other requests of a
kept-alive connection; and a SIGTERM while asks run answers every request read before it.

Before the workers a handler ran on one of libmicrohttpd's threads: six slow asks on one
study took all four threads (five waiting for the study's mutex), and /healthz waited 18 s
behind them; a cheap ask on a connection served by a busy thread waited for the whole slow
ask (8.3 s); and at SIGTERM an ask inside the engine committed its trial, then lost its
answer when the daemon closed the connection (ops and worker-fleet reviews, fifty-seventh
session). /healthz answers 503 once shutting down, as openapi.yaml said it did."""
import random
import signal
import threading
import time

import requests

from conftest import SANITIZED, create_study

BOX4 = {"type": "box", "params": [{"name": f"x{i}", "type": "float", "low": 0, "high": 1}
                                  for i in range(4)]}


def heavy_study(api, name, n_obs):
    """A gp-ucb study whose ask of 200 points takes about a second or more (every
    hand-out updates the exact model of n_obs noisy observations)."""
    sid = create_study(api, name, space=BOX4, engine="gp-ucb", settings={"seed": 1})["id"]
    rng = random.Random(1)
    obs = [{"x": [rng.random() for _ in range(4)], "value": rng.random()} for _ in range(n_obs)]
    assert api.post(f"/v1/studies/{sid}/observations", json={"observations": obs}).status_code == 200
    return sid


def slow_ask(url, sid, out, count=200):
    t0 = time.monotonic()
    try:
        r = requests.post(f"{url}/v1/studies/{sid}/ask", json={"worker": "slow", "count": count},
                          timeout=600)
        out.append((r.status_code, time.monotonic() - t0, r.json()))
    except requests.RequestException as e:  # a dropped connection: recorded, then failed on
        out.append(("dropped", time.monotonic() - t0, repr(e)))


def test_busy_study_holds_up_nothing_else(daemons):
    d = daemons()
    api = d.client()
    heavy = heavy_study(api, "heavy", 2000)
    cheap = create_study(api, "cheap", space=BOX4)["id"]
    # Kept-alive connections opened before the load: libmicrohttpd serves each on the
    # thread that accepted it, so some share a thread with the slow asks below.
    sessions = [requests.Session() for _ in range(8)]
    for s in sessions:
        assert s.get(f"{d.url}/healthz", timeout=30).status_code == 200
    t0 = time.monotonic()
    results = []
    slow = [threading.Thread(target=slow_ask, args=(d.url, heavy, results)) for _ in range(6)]
    # Listings read every study under its mutex: they wait for the busy one, in a lane
    # of their own (in lane 0 four of them took every worker: review of the change).
    listings = [threading.Thread(target=requests.get, args=(f"{d.url}/v1/studies",),
                                 kwargs={"timeout": 600}) for _ in range(6)]
    for t in slow + listings:
        t.start()
    time.sleep(0.5)
    probes = []
    for s in sessions:
        t = time.monotonic()
        assert s.get(f"{d.url}/healthz", timeout=60).status_code == 200
        # /metrics reads a busy study as last read instead of waiting for its mutex
        assert s.get(f"{d.url}/metrics", timeout=60).status_code == 200
        r = s.post(f"{d.url}/v1/studies/{cheap}/ask", json={"worker": "cheap"}, timeout=60)
        assert r.status_code == 200 and len(r.json()["trials"]) == 1, r.text
        probes.append(time.monotonic() - t)
    t = time.monotonic()
    assert requests.get(f"{d.url}/healthz", timeout=60).status_code == 200  # a new connection
    probes.append(time.monotonic() - t)
    probed_by = time.monotonic() - t0
    for t in slow + listings:
        t.join()
    assert all(status == 200 for status, _, _ in results), results
    slowest = max(seconds for _, seconds, _ in results)
    # The six asks of the study run one at a time (its mutex): their last answer comes
    # long after the probes, which never waited for them.
    assert slowest > probed_by + 1.0, (slowest, probed_by, probes)
    assert max(probes) < (5.0 if SANITIZED else 1.0), probes


def test_busy_study_does_not_delay_expiries(daemons):
    """The lease sweeper waited for each study's mutex in turn: a 1-s lease expired 5.6 s
    late behind another study's ask. It passes over a busy study now (server/leases.c)."""
    d = daemons()
    api = d.client()
    heavy = heavy_study(api, "heavy", 1500 if SANITIZED else 3000)
    quick = create_study(api, "quick", space=BOX4, lease_seconds=1)["id"]
    results = []
    slow = [threading.Thread(target=slow_ask, args=(d.url, heavy, results, 300)) for _ in range(2)]
    for t in slow:
        t.start()
    time.sleep(0.5)
    handed = time.monotonic()
    tid = api.post(f"/v1/studies/{quick}/ask", json={"worker": "w"}).json()["trials"][0]["id"]
    while api.get(f"/v1/studies/{quick}/trials/{tid}").json()["state"] != "expired":
        assert time.monotonic() - handed < 60
        time.sleep(0.05)
    expired_after = time.monotonic() - handed
    for t in slow:
        t.join()
    assert all(status == 200 for status, _, _ in results), results
    slowest = max(seconds for _, seconds, _ in results)
    assert slowest > expired_after + 1.0, (slowest, expired_after)  # the study stayed busy
    assert expired_after < (4.0 if SANITIZED else 2.5), expired_after


def test_sigterm_answers_the_asks_it_read(daemons):
    d = daemons()
    api = d.client()
    heavy = heavy_study(api, "heavy", 2000)
    probe = requests.Session()  # a load balancer's kept-alive connection
    assert probe.get(f"{d.url}/healthz", timeout=30).status_code == 200
    results = []
    asks = [threading.Thread(target=slow_ask, args=(d.url, heavy, results)) for _ in range(3)]
    for t in asks:
        t.start()
    time.sleep(0.5)  # one ask in the engine, two queued behind it
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    r = probe.get(f"{d.url}/healthz", timeout=30)  # it answered 200 until the end
    assert r.status_code == 503 and r.headers["Retry-After"], r.text
    assert d.stop(signal.SIGTERM) == 0
    for t in asks:
        t.join()
    assert all(status in (200, 503) for status, _, _ in results), results
    assert any(status == 200 for status, _, _ in results), results  # the one in the engine
    d.start()
    pending = d.client().get(f"/v1/studies/{heavy}/trials", params={"state": "pending", "limit": 1000}).json()
    handed = {t["id"] for status, _, body in results if status == 200 for t in body["trials"]}
    assert {t["id"] for t in pending["trials"]} == handed  # no trial handed out unanswered
