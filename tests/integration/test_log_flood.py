"""Issue 16 follow-up: under attack libmicrohttpd's log callback wrote a line per few
evicted connections (about 17,000 lines in 20 s with 5,000 hostile connections). Its
messages are now limited to one line per kind per second, each carrying the number of
lines of its kind suppressed since the previous one."""
import json
import socket
import time

from conftest import SANITIZED

ROUND = 100 if SANITIZED else 300


def hostile_round(port):
    """Connections that send half a request line, then hang up: evictions and closures
    libmicrohttpd reports."""
    socks = []
    for _ in range(ROUND):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /heal")
        socks.append(s)
    time.sleep(0.3)
    for s in socks:
        s.close()


def mhd_lines(d):
    return [json.loads(line) for line in d.stderr().splitlines()
            if line.startswith("{") and '"msg":"microhttpd"' in line]


def test_mhd_messages_rate_limited_with_counts(daemons):
    d = daemons(args=["--max-connections", "10"])
    t0 = time.monotonic()
    hostile_round(d.port)
    time.sleep(1.2)  # the next round's first line of each kind reports the dropped ones
    hostile_round(d.port)
    time.sleep(0.5)
    seconds = time.monotonic() - t0
    lines = mhd_lines(d)
    kinds = {}
    for m in lines:
        kinds.setdefault(m["detail"].split(":")[0], []).append(m)
    assert kinds, "no libmicrohttpd line logged at all"
    for kind, ms in kinds.items():  # one per kind per second, plus the first
        assert len(ms) <= seconds + 1, (kind, len(ms), seconds)
    assert sum(m["suppressed"] for m in lines) > 0, lines
