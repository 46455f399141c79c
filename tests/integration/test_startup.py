"""This file contains start-up tests of issue 14: strict KB_* booleans (KB_INSECURE=false
used to turn insecure mode on), --version, and the defaults shown by --help; and of issue
16: a database another connection holds locked for a moment is waited for, not refused."""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import requests

from conftest import create_study, daemon_binary
from test_faults import shim_env


def test_insecure_false_keeps_auth_rules(daemons):
    d = daemons(listen="0.0.0.0:0", env={"KB_INSECURE": "false"}, start=False)
    d.start(expect_fail=True)
    assert not d.running and d.exit_codes[-1] != 0, d.stderr()
    assert "--insecure" in d.stderr()


def test_insecure_true_allows_open_listen(daemons):
    d = daemons(listen="0.0.0.0:0", env={"KB_INSECURE": "true"})
    assert d.running and "auth disabled" in d.stderr()
    assert requests.get(f"{d.url}/healthz", timeout=10).status_code == 200


def test_insecure_garbage_is_refused(daemons):
    for bad in ("yes", "2", "TRUE ", "off"):
        d = daemons(env={"KB_INSECURE": bad}, start=False)
        d.start(expect_fail=True)
        assert not d.running and d.exit_codes[-1] != 0, (bad, d.stderr())
        assert "invalid KB_INSECURE" in d.stderr(), d.stderr()


def test_version_and_help():
    out = subprocess.run([str(daemon_binary()), "--version"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode == 0 and out.stdout.startswith("kbanditd ") and out.stdout.split()[1][0].isdigit()
    helptext = subprocess.run([str(daemon_binary()), "--help"], capture_output=True, text=True,
                              timeout=10).stdout
    for default in ("127.0.0.1:8080", "./kbandit.db", "(default 4)", "67108864", "(default info)",
                    "(default 200)"):
        assert default in helptext, default


def start_fails(daemons, **kw):
    d = daemons(start=False, **kw)
    d.start(expect_fail=True)
    assert not d.running and d.exit_codes[-1] != 0, d.stderr()
    return d.stderr()


def test_token_file_errors_say_why(daemons, tmp_path):
    (tmp_path / "tokdir").mkdir()
    err = start_fails(daemons, args=["--token-file", str(tmp_path / "tokdir")])
    assert "cannot read token file" in err and "Is a directory" in err, err
    err = start_fails(daemons, args=["--token-file", str(tmp_path / "missing")])
    assert "No such file or directory" in err, err


def test_listen_errors_carry_errno(daemons):
    busy = daemons()
    err = start_fails(daemons, listen=f"127.0.0.1:{busy.port}")
    assert "cannot listen" in err and "Address already in use" in err, err


def test_listen_port_out_of_range_is_refused(daemons):
    """getaddrinfo reads a port of 99999 as 34463 (mod 2^16) and 65536 as 0 (any free
    port): a port outside 0-65535 stops the start-up instead."""
    for spec in ("127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:abc", "127.0.0.1:-1",
                 "127.0.0.1:"):
        err = start_fails(daemons, listen=spec)
        assert "cannot listen" in err and "from 0 to 65535" in err, (spec, err)


def test_bad_log_level_is_named(daemons):
    """--log-level verbose printed the usage text alone, naming nothing."""
    err = start_fails(daemons, args=["--log-level", "verbose"])
    assert "invalid --log-level" in err and "verbose" in err, err


def test_http_start_failure_says_why(daemons):
    """"cannot start the HTTP daemon" said nothing more. The daemon binds its socket
    itself ("cannot listen" above carries the errno), so what fails there is a thread
    (the long-poll timer, the header-timeout sweeper, the request workers, libmicrohttpd's
    threads) or libmicrohttpd itself: the line now has the reason, libmicrohttpd's own
    message for its failures. Thread creation fails at each n-th call from main (fault
    shim)."""
    reasons = []
    for n in range(1, 17):
        d = daemons(name=f"thread{n}", args=["--threads", "2"], start=False,
                    env=shim_env(f"thread:{n}", arm_at_start=True))
        d.start(expect_fail=True)
        if d.running:
            continue  # the n-th thread is a later one
        assert d.exit_codes[-1] == 1, d.stderr()
        reasons += [line["reason"] for line in map(json.loads, d.stderr().splitlines())
                    if line.get("msg") == "cannot start the HTTP daemon"]
    assert len(reasons) >= 4, reasons  # timer, sweeper, request workers, libmicrohttpd's
    assert any(r.startswith("cannot start the long-poll timer thread: ") for r in reasons)
    assert any(r.startswith("cannot start a request worker thread: ") for r in reasons)
    assert any("pool thread" in r for r in reasons), reasons  # libmicrohttpd's message
    assert all("thread" in r for r in reasons), reasons


def test_database_locked_for_a_moment_is_waited_for(daemons):
    """Issue 16, found by bench/crash/run.py: every new SQLite connection ran its pragmas
    before setting its busy timeout, so one opened while another held a lock (a
    checkpoint, WAL recovery after a crash) failed at once with "database is locked"; the
    study rebuild that needed it failed and the study answered 404. Here the lock is held
    by another process's connection while the daemon starts."""
    d = daemons(name="locked")
    d.stop()
    holder = sqlite3.connect(d.db, isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(1.0, holder.close)  # closing ends the transaction and the lock
    release.start()
    try:
        t0 = time.monotonic()
        d.start()
        assert requests.get(f"{d.url}/healthz", timeout=10).status_code == 200
        assert time.monotonic() - t0 >= 0.9, "the lock was not held while the daemon opened"
    finally:
        release.join()
    assert "database is locked" not in d.stderr()


def test_second_daemon_on_one_database_is_refused(daemons, tmp_path):
    """Two daemons on one database took the same trial ids: tells of valid trials were
    answered 404 and asks 503 (ops review, fifty-seventh session). The second one exits,
    also when it names the file through a symbolic link (whose WAL is beside the target:
    a link alone used to fail with "cannot open the WAL file"); once the first stops, the
    link serves."""
    first = daemons(name="first")
    sid = create_study(first.client(), "held")["id"]
    err = start_fails(daemons, db=first.db)
    assert f"database {first.db} is in use by another kbanditd" in err, err
    link = tmp_path / "link.db"
    link.symlink_to(first.db)
    err = start_fails(daemons, db=link)
    assert "is in use by another kbanditd" in err, err
    assert first.client().get(f"/v1/studies/{sid}").status_code == 200
    first.stop()
    via_link = daemons(name="link", db=link)
    assert via_link.client().get(f"/v1/studies/{sid}").json()["name"] == "held"


def test_sighup_is_ignored(daemons):
    """SIGHUP (a closed terminal, a logrotate hook) killed the daemon without its orderly
    shutdown; it is logged and the daemon serves on, and SIGTERM stops it cleanly."""
    d = daemons()
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "SIGHUP ignored" not in d.stderr() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "SIGHUP ignored" in d.stderr() and d.running
    assert requests.get(f"{d.url}/healthz", timeout=10).status_code == 200
    assert d.stop() == 0


def test_database_paths_that_are_not_files_are_refused(daemons, tmp_path):
    """"" (a temporary database), ":memory:" and "file:" URIs opened and migrated a
    database the daemon then could not find the WAL of ("cannot open the WAL file"), and
    the URI form left a stray database behind."""
    for bad in ("", ":memory:", f"file:{tmp_path / 'uri.db'}"):
        err = start_fails(daemons, args=["--db", bad])  # the last --db counts
        assert "must name a file" in err, (bad, err)
    assert not (tmp_path / "uri.db").exists()


def test_unwritable_database_is_refused_at_start(daemons):
    """A database file the daemon may not write was opened read-only by SQLite: /healthz
    said ok while every ask answered 503 and every creation 500. Run as another user
    (root may write any file) in a directory it may write, the start-up stops saying why."""
    d = daemons(name="ro")
    d.stop()
    home = Path(tempfile.mkdtemp(prefix="kb-ro-"))  # /tmp/pytest-of-root is 0700
    try:
        home.chmod(0o777)
        db = home / "kbandit.db"
        shutil.copy2(d.db, db)
        db.chmod(0o444)
        out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              str(daemon_binary()), "--listen", "127.0.0.1:0", "--db", str(db)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode != 0, out.stderr
        assert f"cannot open database {db} for writing: Permission denied" in out.stderr, out.stderr
    finally:
        shutil.rmtree(home)


def test_numbers_with_blanks_or_signs_are_refused(daemons):
    """strtoll skips leading blanks and takes a '+': --threads " 4" started with 4."""
    for bad in (" 4", "+4", "4 ", "0x4", ""):
        err = start_fails(daemons, args=["--threads", bad])
        assert "invalid --threads (1..256)" in err, (bad, err)


def test_flags_must_be_spelled_out(daemons):
    """getopt took any unique prefix: --thread 2 was --threads, and a later flag sharing
    the prefix would silently change what an operator's script meant."""
    err = start_fails(daemons, args=["--thread", "2"])
    assert "'--thread' is not spelled out: use --threads" in err, err
    err = start_fails(daemons, args=["--max-body-b=4096"])
    assert "use --max-body-bytes" in err, err
    d = daemons(args=["--threads=2", "--max-body-memory", "0"])
    assert d.client().get("/healthz").status_code == 200


def test_debug_level_logs_each_request(daemons):
    """An operator had no access log at any level: debug writes one line per request."""
    d = daemons(args=["--log-level", "debug"])
    api = d.client()
    sid = create_study(api, "logged")["id"]
    assert api.get(f"/v1/studies/{sid}/trials/99").status_code == 404
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = [json.loads(line) for line in d.stderr().splitlines() if '"msg":"request"' in line]
        if any(m.get("status") == 404 for m in lines):
            break
        time.sleep(0.05)
    assert any(m["method"] == "GET" and m["route"] == "/v1/studies/{study_id}/trials/{trial_id}" and
               m["id"] == sid and m["id2"] == 99 and m["status"] == 404 for m in lines), lines
    assert any(m["route"] == "/v1/studies" and m["status"] == 201 for m in lines), lines
    # ids only where the route has them (they were uninitialized memory elsewhere)
    assert all("id" not in m and "id2" not in m for m in lines if m["route"] == "/v1/studies")
    assert all("id2" not in m for m in lines if m["route"] == "/v1/studies/{study_id}")
    quiet = daemons(name="quiet")
    assert quiet.client().get("/healthz").status_code == 200
    assert '"msg":"request"' not in quiet.stderr()


def test_new_database_is_not_world_readable(daemons):
    """The database, its -wal and -shm were created 0644: anyone on the host could read
    every study. A new one is 0640 (less the umask), and SQLite's files follow it."""
    d = daemons()
    create_study(d.client(), "private")
    for suffix in ("", "-wal", "-shm"):
        mode = os.stat(f"{d.db}{suffix}").st_mode & 0o777
        assert mode & 0o007 == 0, (suffix, oct(mode))
