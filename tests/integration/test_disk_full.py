"""Issue 16 item 3: with the database on a full filesystem, tells got no answer at all
(16 of 16 unanswered after 6 s) and a hung tell stayed unanswered until some later durable
write succeeded. Now a failed durable write answers its waiter at once with a 503 JSON
error, nothing acknowledged is lost, and the daemon recovers by itself once space returns.

The filesystem is a small tmpfs mounted for the test (CI runs as root, as `make test`'s
install step needs); without the mount the test fails rather than skipping."""
import os
import subprocess
import time

import pytest

from conftest import ask, create_study, error_of, metrics

ROWS = {"type": "candidates", "candidates": [[float(i), float(i % 7)] for i in range(400)]}


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], check=True)
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path):
    """Writes until ENOSPC."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(fd, b"\0" * 65536) > 0:
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_full_disk_answers_at_once_and_recovers(daemons, small_disk):
    d = daemons(db=small_disk / "k.db")
    api = d.client()
    sid = create_study(api, "disk", space=ROWS)["id"]
    trials = ask(api, sid, count=300)["trials"]
    told = {}
    for t in trials[:20]:
        r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 1.0})
        assert r.status_code == 200
        told[t["id"]] = 1.0
    fill(small_disk / "filler")
    statuses = []
    for t in trials[20:120]:
        t0 = time.monotonic()
        r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 2.0},
                     timeout=10)
        assert time.monotonic() - t0 < 5, "a tell on a full disk waited"
        statuses.append(r.status_code)
        if r.status_code == 200:
            told[t["id"]] = 2.0
        else:
            assert r.status_code == 503, r.text
            assert error_of(r)["code"] == "unavailable"
    assert 503 in statuses, statuses
    # One log line per kind of failed write per second, not one per write (3,000 lines in
    # 3 s before): the run above took well under 5 s for its ~100 failed tells.
    errors = [line for line in d.stderr().splitlines() if '"database error"' in line]
    assert 0 < len(errors) <= 40, len(errors)
    assert metrics(api)[("kbandit_store_failed_writes_total", ())] > 0
    os.remove(small_disk / "filler")
    deadline = time.monotonic() + 20
    rest = [t for t in trials[120:]]
    while True:  # the writer recovers by itself: a later tell is stored
        t = rest.pop(0)
        r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 3.0})
        if r.status_code == 200:
            told[t["id"]] = 3.0
            break
        assert time.monotonic() < deadline, r.text
        time.sleep(0.2)
    d.stop()
    d.start()
    got = {t["id"]: t["value"] for t in d.client().get(
        f"/v1/studies/{sid}/trials?state=completed&limit=10000").json()["trials"]}
    for tid, v in told.items():
        assert got.get(tid) == v, (tid, v, got.get(tid))
