"""Issue 16 follow-up (item 4's header timeout): below the connection cap a slowloris
client kept its slot for as long as it trickled bytes, since it was never idle. Now a
connection whose request headers are not complete --header-timeout-s after its request
began is closed, on a new connection (the request began when it was accepted) as on a
kept-alive one (it began when bytes came after the last answer), while a kept-alive
client idle between requests stays governed by --idle-timeout-s."""
import select
import socket
import time

from conftest import SANITIZED, metrics

TIMEOUT = 2
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def read_response(s):
    """One whole response (headers and Content-Length body) from s."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        assert chunk, "closed before the answer"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head
    return body


def closed(s):
    """The daemon closed s (checked without waiting)."""
    if not select.select([s], [], [], 0)[0]:
        return False
    try:
        return s.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_trickled_headers_closed_after_header_timeout(daemons):
    d = daemons(args=["--header-timeout-s", str(TIMEOUT), "--idle-timeout-s", "60"])
    connect = lambda: socket.create_connection(("127.0.0.1", d.port), timeout=10)  # noqa: E731
    fresh, kept, worker = connect(), connect(), connect()
    kept.sendall(REQUEST)
    read_response(kept)  # kept-alive now: its next request is trickled below
    worker.sendall(REQUEST)
    read_response(worker)
    t0 = time.monotonic()
    fresh.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
    kept.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
    closed_at = {}
    limit = TIMEOUT + (6 if SANITIZED else 3)
    while len(closed_at) < 2 and time.monotonic() - t0 < limit:
        for name, s in (("fresh", fresh), ("kept", kept)):
            if name not in closed_at:
                if closed(s):
                    closed_at[name] = time.monotonic() - t0
                else:
                    try:
                        s.sendall(b"a")  # one header byte per second: never idle
                    except (BrokenPipeError, ConnectionResetError):
                        closed_at[name] = time.monotonic() - t0
        time.sleep(1.0)
    assert set(closed_at) == {"fresh", "kept"}, closed_at
    for name, t in closed_at.items():
        assert t >= TIMEOUT - 0.1, (name, t)
    # The worker sat idle longer than the header timeout: its connection still serves.
    assert not closed(worker)
    worker.sendall(REQUEST)
    assert read_response(worker)
    for s in (fresh, kept, worker):
        s.close()
    assert metrics(d.client())[("kbandit_connections_header_timeouts_total", ())] == 2


def test_header_timeout_flag_checked(daemons):
    bad = daemons(args=["--header-timeout-s", "0"], start=False)
    bad.start(expect_fail=True)
    assert not bad.running and "invalid --header-timeout-s" in bad.stderr()
    env = daemons(env={"KB_HEADER_TIMEOUT_S": "x"}, start=False)
    env.start(expect_fail=True)
    assert "invalid --header-timeout-s" in env.stderr()
