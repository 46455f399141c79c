"""This file contains the HTTP status paths (400, 401, 404, 405, 409, 413, 415), bearer
auth on and off, exactly-once tell, HEAD, and the start-up refusal of an unauthenticated
non-loopback listener."""
import http.client
import json
import socket
import threading
import time
from pathlib import Path

import pytest
import requests

from conftest import SANITIZED, ask, create_study, error_of, metrics, tell


def test_exactly_once_tell(api):
    sid = create_study(api, "once")["id"]
    t = ask(api, sid)["trials"][0]
    first = tell(api, sid, t["id"], 0.25)
    again = tell(api, sid, t["id"], 0.25)
    assert again == first, "a repeated tell with the same value must return the same trial"
    r = api.post(f"/v1/studies/{sid}/trials/{t['id']}/tell", json={"value": 0.5})
    assert r.status_code == 409 and error_of(r)["code"] == "conflict"
    assert api.get(f"/v1/studies/{sid}/trials/{t['id']}").json()["value"] == 0.25
    assert api.get(f"/v1/studies/{sid}").json()["progress"]["trials"]["completed"] == 1
    t2 = ask(api, sid)["trials"][0]
    tell(api, sid, t2["id"], 0.93)
    r = api.post(f"/v1/studies/{sid}/trials/{t2['id']}/tell", json={"value": 0.94})
    assert error_of(r)["message"].endswith("already told 0.93"), r.text  # not 0.93000000000000005


def test_status_paths(daemons):
    d = daemons(args=["--max-body-bytes", "4096"])
    api = d.client()
    sid = create_study(api, "paths")["id"]

    r = api.post("/v1/studies", data=b'{"name": ', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and error_of(r)["code"] == "invalid_json"

    for path in ("/v1/studies/999999", "/v1/studies/999999/trials/1", "/v1/nope", "/nope",
                 f"/v1/studies/{sid}/trials/999999", "/v1/candidate-sets/424242"):
        r = api.get(path)
        assert r.status_code == 404 and error_of(r)["code"] == "not_found", path

    r = api.get(f"/v1/studies/{sid}/best")
    assert r.status_code == 404 and error_of(r)["code"] == "not_found"

    for method, path in (("PUT", "/v1/studies"), ("DELETE", "/healthz"), ("PUT", f"/v1/studies/{sid}"),
                         ("GET", f"/v1/studies/{sid}/ask"), ("POST", "/metrics")):
        r = api.request(method, path)
        assert r.status_code == 405, (method, path, r.status_code, r.text)
        assert error_of(r)["code"] == "method_not_allowed"
        assert "Allow" in r.headers and r.headers["Allow"], (method, path)

    r = api.post("/v1/studies", json={"name": "paths", "space": {"type": "candidates",
                                                                   "candidates": [[1.0]]}})
    assert r.status_code == 409 and error_of(r)["code"] == "conflict"

    r = api.post("/v1/studies", data=b'{"name": "' + b"a" * 8192 + b'"}',
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and error_of(r)["code"] == "payload_too_large"

    for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": ctype} if ctype else {}
        r = api.post(f"/v1/studies/{sid}/ask", data=b'{"worker": "w"}', headers=headers)
        assert r.status_code == 415, (ctype, r.text)
        assert error_of(r)["code"] == "unsupported_media_type"
    assert api.get("/healthz").status_code == 200


def test_auth_on(daemons):
    d = daemons(token="s3cret-token-0123456")
    ok = d.client()
    sid = create_study(ok, "auth")["id"]
    anon = d.client(token="")
    anon.headers.pop("Authorization", None)
    wrong = d.client(token="s3cret-token-0123457")
    for c in (anon, wrong):
        for method, path in (("GET", "/v1/studies"), ("GET", f"/v1/studies/{sid}"),
                             ("POST", f"/v1/studies/{sid}/ask"), ("GET", "/v1/nope")):
            r = c.request(method, path, json={"worker": "x"} if method == "POST" else None)
            if path == "/v1/nope" and r.status_code == 404:
                continue  # an unknown route may say so before asking for credentials
            assert r.status_code == 401, (method, path, r.text)
            assert error_of(r)["code"] == "unauthorized"
            assert r.headers.get("WWW-Authenticate", "").startswith("Bearer")
        assert c.get("/healthz").status_code == 200
        assert c.get("/metrics").status_code == 200
    r = ok.get("/v1/studies", headers={"Authorization": "Basic czNjcmV0LXRva2Vu"})
    assert r.status_code == 401
    assert ok.get(f"/v1/studies/{sid}").status_code == 200
    # Nothing was created by the refused requests.
    assert len(ok.get("/v1/studies").json()["studies"]) == 1


def test_auth_off(daemons):
    d = daemons()
    assert "auth disabled" in d.stderr()
    api = d.client()
    assert "Authorization" not in api.headers
    assert api.get("/v1/studies").status_code == 200
    # A token sent to a daemon without auth is ignored.
    assert api.get("/v1/studies", headers={"Authorization": "Bearer whatever"}).status_code == 200


def test_non_loopback_needs_token_or_insecure(daemons):
    d = daemons(listen="0.0.0.0:0", start=False)
    d.start(expect_fail=True)
    assert not d.running and d.exit_codes and d.exit_codes[-1] != 0, d.stderr()
    assert "--insecure" in d.stderr() or "token" in d.stderr().lower()
    d2 = daemons(listen="0.0.0.0:0", args=["--insecure"])
    assert d2.running and "auth disabled" in d2.stderr()
    assert requests.get(f"{d2.url}/healthz", timeout=10).status_code == 200
    d3 = daemons(listen="0.0.0.0:0", token="t0k-0123456789abcdef")
    assert d3.running and d3.client().get("/v1/studies").status_code == 200


def start_with_token_file(daemons, content, mode=0o600):
    d = daemons(start=False)
    tf = d.workdir / "token-file"
    tf.write_bytes(content)
    tf.chmod(mode)
    d.args += ["--token-file", str(tf)]
    d.start(expect_fail=True)
    return d


def test_token_file_rules(daemons):
    """Issue 16 item 7: a token over 4,096 bytes was cut silently (its first 4,095 bytes
    authenticated), a 1-character token was accepted, and so was a token file anyone may
    write. Each now stops the daemon at start-up with a reason; a world-readable file (a
    mounted secret) starts it with a warning."""
    for content, mode, reason in ((b"x" * 5000 + b"\n", 0o600, "longer than 4096"),
                                  (b"x\n", 0o600, "shorter than 16"),
                                  (b"0123456789abcdef-token\n", 0o622, "writable by others")):
        d = start_with_token_file(daemons, content, mode)
        assert not d.running and d.exit_codes[-1] != 0, d.stderr()
        assert reason in d.stderr(), d.stderr()
    d = start_with_token_file(daemons, b"x" * 4096 + b"\n", 0o644)
    assert d.running and "readable by others" in d.stderr()
    r = requests.get(f"{d.url}/v1/studies", headers={"Authorization": "Bearer " + "x" * 4095},
                     timeout=10)
    assert r.status_code == 401
    r = requests.get(f"{d.url}/v1/studies", headers={"Authorization": "Bearer " + "x" * 4096},
                     timeout=10)
    assert r.status_code == 200, r.text


def test_several_authorization_headers_refused(daemons):
    """With two Authorization headers the first one used to win."""
    d = daemons(token="double-header-token")
    with socket.create_connection(("127.0.0.1", d.port), timeout=10) as s:
        s.sendall(b"GET /v1/studies HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  b"Authorization: Bearer double-header-token\r\n"
                  b"Authorization: Bearer something-else-entirely\r\n\r\n")
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 401"), reply[:200]
    assert d.client().get("/v1/studies").status_code == 200


def test_delete_study(api):
    sid = create_study(api, "gone")["id"]
    t = ask(api, sid)["trials"][0]
    r = api.delete(f"/v1/studies/{sid}")
    assert r.status_code == 204 and r.content == b""
    for method, path, body in (("GET", f"/v1/studies/{sid}", None),
                               ("POST", f"/v1/studies/{sid}/ask", {"worker": "w"}),
                               ("POST", f"/v1/studies/{sid}/trials/{t['id']}/tell", {"value": 1}),
                               ("GET", f"/v1/studies/{sid}/trials", None),
                               ("DELETE", f"/v1/studies/{sid}", None)):
        r = api.request(method, path, json=body)
        assert r.status_code == 404, (method, path, r.text)
    # The name is free again.
    create_study(api, "gone")


@pytest.mark.parametrize("wait_ms", [0, 300])
def test_ask_nothing_available_has_retry_after(api, wait_ms):
    sid = create_study(api, "full", space={"type": "candidates", "candidates": [[0.0], [1.0]]},
                       settings={"repeats": "no_pending"})["id"]
    assert len(ask(api, sid, count=2)["trials"]) == 2
    r = api.post(f"/v1/studies/{sid}/ask", json={"worker": "w", "wait_ms": wait_ms})
    assert r.status_code == 200
    body = r.json()
    assert body["trials"] == [] and body["status"] in ("exhausted", "awaiting_feedback")
    # Both candidates come back once told: the client is told when to retry.
    assert int(r.headers["Retry-After"]) >= 1


def raw_exchange(port, request):
    """Sends request bytes on one connection and returns everything read until EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_head_answers_like_get_without_body(daemons):
    """HEAD takes every GET route: same status and headers (Content-Length included),
    never a body, and a kept-alive connection goes on with the next request."""
    d = daemons(token="head-token-0123456")
    api = d.client()
    sid = create_study(api, "head")["id"]
    anon = d.client(token="")
    anon.headers.pop("Authorization")
    for c, path, status in ((anon, "/healthz", 200), (anon, "/metrics", 200),
                            (anon, f"/v1/studies/{sid}", 401), (api, f"/v1/studies/{sid}", 200),
                            (api, f"/v1/studies/{sid}/trials", 200), (api, "/v1/studies/999999", 404),
                            (api, f"/v1/studies/{sid}/export", 200)):
        got = c.get(path)
        r = c.head(path)
        assert r.status_code == got.status_code == status, (path, r.status_code, got.status_code)
        assert r.headers["Content-Type"] == got.headers["Content-Type"], path
        if path != "/metrics":  # the metrics move between the two requests
            assert int(r.headers["Content-Length"]) == len(got.content), path

    r = api.head(f"/v1/studies/{sid}/ask")  # no GET there: no HEAD either
    assert r.status_code == 405 and r.headers["Allow"] == "POST", r.headers
    r = api.post("/healthz")
    assert r.status_code == 405 and r.headers["Allow"] == "GET, HEAD", r.headers

    # On the wire: the HEAD answer ends with its headers; the pipelined GET follows.
    body = api.get("/healthz").content
    out = raw_exchange(d.port, b"HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
                               b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    head, rest = out.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and f"Content-Length: {len(body)}".encode() in head, out
    assert rest.startswith(b"HTTP/1.1 200"), out
    assert rest.split(b"\r\n\r\n", 1)[1] == body, out


def closed_by_peer(s):
    """The daemon closed s: an orderly end, or a reset when our bytes reached it closed."""
    try:
        return s.recv(1024) == b""
    except ConnectionResetError:
        return True


def served_within(url, seconds):
    deadline = time.monotonic() + seconds
    while True:
        try:
            return requests.get(url, timeout=10).status_code == 200
        except requests.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_connection_limits_and_idle_timeout(daemons):
    """Issue 16 item 4: one client holding ~1,100 slow connections starved everyone (no
    per-address cap, 120 s idle timeout). A connection beyond the per-address cap is closed
    at once, a silent one after the idle timeout, and the daemon serves others meanwhile."""
    d = daemons(args=["--max-connections-per-ip", "4", "--idle-timeout-s", "1"])
    held = [socket.create_connection(("127.0.0.1", d.port), timeout=10) for _ in range(4)]
    held[0].sendall(b"GET /healthz HTTP/1.1\r\nHost: x")  # headers never finished
    time.sleep(0.3)
    extra = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert closed_by_peer(extra), "a fifth connection from one address was served"
    extra.close()
    t0 = time.monotonic()
    for s in held:  # all four, the half-sent one included, are closed by the idle timeout
        assert closed_by_peer(s)
        s.close()
    assert time.monotonic() - t0 < 5
    # libmicrohttpd releases a connection's per-address slot when it cleans the connection
    # up, a moment after closing the socket (longer under ASan): wait for the slot.
    assert served_within(f"{d.url}/healthz", 3.0)
    bad = daemons(args=["--max-connections", "0"], start=False)
    bad.start(expect_fail=True)
    assert not bad.running and "invalid --max-connections" in bad.stderr()


def still_open(s):
    """No close from the daemon within 0.2 s (the socket is left as it was)."""
    s.settimeout(0.2)
    try:
        return s.recv(1024) != b""
    except socket.timeout:
        return True
    except ConnectionResetError:
        return False


def test_connection_cap_evicts_stalled_not_newcomers(daemons):
    """Issue 16 item 4, target "with 5,000 hostile connections open, a well-behaved client
    keeps its p99 under 50 ms": stalled connections from enough addresses filled the total
    cap and every new connection was closed at once. At the cap, a new connection evicts
    the one that waited longest on its client, one that never completed a request first:
    a newcomer is served, a kept-alive worker and a suspended long-poll are not cut."""
    d = daemons(args=["--max-connections", "8"])
    api = d.client()
    sid = create_study(api, "cap", space={"type": "candidates", "candidates": [[0.0, 1.0]]},
                       settings={"repeats": "no_pending"})["id"]
    ask(api, sid, worker="holder")  # the only candidate is pending: the next ask waits
    api.close()
    worker = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10)
    worker.request("GET", "/healthz")
    assert worker.getresponse().read()
    poll = {}

    def long_poll():
        c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
        c.request("POST", f"/v1/studies/{sid}/ask", body='{"worker": "w", "wait_ms": 3000}',
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        poll["status"], poll["body"] = r.status, r.read()
        c.close()

    th = threading.Thread(target=long_poll)
    th.start()
    time.sleep(0.3)  # suspended before the flood
    hostile = []
    for i in range(16):  # from 4 addresses, below the per-address cap
        s = socket.socket()
        s.bind((f"127.0.0.{2 + i % 4}", 0))
        s.connect(("127.0.0.1", d.port))
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x")  # headers never finished
        hostile.append(s)
        time.sleep(0.03)  # arrivals in this order
    for _ in range(3):  # newcomers, each on a new connection
        assert requests.get(f"{d.url}/healthz", headers={"Connection": "close"}, timeout=5).status_code == 200
    worker.request("GET", "/healthz")  # the same kept-alive connection
    assert worker.getresponse().status == 200
    worker.close()
    th.join(30)
    assert poll.get("status") == 200 and json.loads(poll["body"])["trials"] == [], poll
    open_now = [still_open(s) for s in hostile]
    # 8 slots: the worker, the long-poll and the 6 newest hostile ones; the first newcomer
    # evicted the oldest of those, the next ones one more each unless the newcomer before
    # them was already cleaned up. Always the oldest first (10-12 may arrive in any order).
    evicted = open_now.count(False)
    assert 11 <= evicted <= 13 and not any(open_now[:10]) and all(open_now[13:]), open_now
    m = metrics(d.client())
    assert m[("kbandit_connections_evicted_total", ())] == evicted
    for s in hostile:
        s.close()


def raw_error_reply(port, request_bytes):
    """Sends request bytes and reads until a JSON error body ended (or EOF, or 5 s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(request_bytes)
        reply = b""
        t0 = time.monotonic()
        while time.monotonic() - t0 < 5:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
            if b"\r\n\r\n" in reply and b"}}" in reply:
                break
    return reply


def test_untrustworthy_framing_refused_in_json(daemons):
    """Issue 16 item 6 (part): two conflicting Content-Length headers were accepted (the
    first won and a tell was applied); Transfer-Encoding: gzip got no answer until the idle
    timeout. Both get a 400 JSON error at once and change nothing."""
    d = daemons()
    api = d.client()
    sid = create_study(api, "framing")["id"]
    tid = ask(api, sid)["trials"][0]["id"]
    body = b'{"value": 1.0}'
    path = f"/v1/studies/{sid}/trials/{tid}/tell".encode()
    for extra in (b"Content-Length: %d\r\nContent-Length: 3\r\n" % len(body),
                  b"Transfer-Encoding: gzip\r\nContent-Length: %d\r\n" % len(body)):
        t0 = time.monotonic()
        reply = raw_error_reply(d.port, b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Type: application/json\r\n" + extra + b"\r\n" + body)
        assert time.monotonic() - t0 < 3, reply
        assert reply.startswith(b"HTTP/1.1 400"), reply[:300]
        assert b'"code":"invalid"' in reply, reply
    assert api.get(f"/v1/studies/{sid}/trials/{tid}").json()["state"] == "pending"


NUL_OR_FOLD = [
    ("Transfer-Encoding chunked, NUL, junk (no body)", b"POST /v1/studies HTTP/1.1\r\nHost: x\r\n"
     b"Authorization: Bearer nul-in-header-token\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: chunked\0gzip\r\n\r\n"),
    ("NUL inside a value", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n"),
    ("NUL ending a value", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\0\r\n\r\n"),
    ("NUL ending the last value", b"GET /healthz HTTP/1.1\r\nX-A: a\0\r\n\r\n"),
    ("two NULs, then a blank", b"GET /healthz HTTP/1.1\r\nX-A: a\0\0 b\r\nHost: x\r\n\r\n"),
    ("a token, NUL, junk", b"GET /v1/studies HTTP/1.1\r\nHost: x\r\n"
     b"Authorization: Bearer nul-in-header-token\0junk\r\n\r\n"),
    ("folded line", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"),
    ("folded last line", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n"),
]


def test_nul_in_header_value_refused(daemons):
    """RFC 9110 5.5: a field value must not contain NUL. libmicrohttpd 0.9.75 hands values
    over as C strings (their sizes from strlen), so the daemon read "chunked\0gzip" as
    chunked and waited for chunks, and "Bearer <token>\0junk" authenticated. Such a
    request, and a folded header line (which looks the same in libmicrohttpd's buffer and
    which RFC 9112 5.2 lets a server refuse), gets a 400 JSON error at once."""
    d = daemons(token="nul-in-header-token")
    for what, request in NUL_OR_FOLD:
        t0 = time.monotonic()
        reply = raw_error_reply(d.port, request)
        assert time.monotonic() - t0 < 3, (what, reply)
        assert_json_error(reply, 400, "invalid", what)
        assert b"NUL" in reply, (what, reply)
    fine = (b"GET /v1/studies HTTP/1.1\r\nHost: x\r\nX-Empty:\r\nX-Blank: \t \r\n"
            b"X-Trailing: a \t\r\nAuthorization: Bearer nul-in-header-token\r\n\r\n")
    for form in (fine, fine.replace(b"\r\n", b"\n")):
        reply = raw_error_reply(d.port, form.replace(b"Host: x", b"Host: x\r\nConnection: close"
                                                     if b"\r\n" in form else b"Host: x\nConnection: close"))
        assert reply.startswith(b"HTTP/1.1 200"), reply[:300]


def first_answer(reply):
    """(status, headers, body) of the first answer in reply (read until EOF)."""
    head, rest = reply.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (h.split(":", 1) for h in lines[1:])}
    return int(lines[0].split()[1]), headers, rest[:int(headers.get("content-length", 0))]


def assert_json_error(reply, status, code, what):
    """reply is one answer: status, and the documented JSON error with the given code
    (code None: an empty body, see PROTOCOL_ERRORS)."""
    got, headers, body = first_answer(reply)
    assert got == status and b"<html" not in reply.lower(), (what, reply[:400])
    if code is None:
        assert body == b"" and "content-type" not in headers, (what, reply[:400])
        return
    assert reply.endswith(body) and len(body) == int(headers["content-length"]), (what, reply)
    assert headers.get("content-type") == "application/json", (what, headers)
    err = json.loads(body)["error"]
    assert set(err) == {"code", "message", "field"} and err["field"] is None, (what, body)
    assert err["code"] == code and err["message"], (what, body)


CHUNKED_POST = (b"POST /v1/studies HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
PROTOCOL_ERRORS = [
    ("HTTP/0.9 request line", b"GET /healthz\r\n\r\n", 400, "invalid"),
    ("header line without a colon", b"GET /healthz HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n",
     400, "invalid"),
    ("chunk size not hexadecimal", CHUNKED_POST + b"zz\r\n{}\r\n0\r\n\r\n", 400, "invalid"),
    ("chunk size over 64 bits", CHUNKED_POST + b"f" * 20 + b"\r\n{}\r\n0\r\n\r\n", 413,
     "payload_too_large"),
    ("HTTP/2.0", b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "invalid"),
    ("HTTP/0.8", b"GET /healthz HTTP/0.8\r\nHost: x\r\n\r\n", 505, "invalid"),
    ("headers over the connection's memory",
     b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-H: v\r\n" * 2000 + b"\r\n", 431, "invalid"),
    ("request line over the connection's memory",
     b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "invalid"),
    # libmicrohttpd 0.9.75 sends its header block twice for these two: only an empty
    # body keeps the first answer well framed (docs/TESTING.md, "Protocol errors").
    ("Content-Length not a number",
     b"POST /v1/studies HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n", 400, None),
    ("Content-Length over 64 bits",
     b"POST /v1/studies HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"9" * 25 + b"\r\n\r\n",
     413, None),
]


def test_protocol_errors_are_json(daemons):
    """Issue 16 item 6: the requests libmicrohttpd refuses before any callback of the
    daemon runs got its HTML bodies. server/mhd_errors.c replaces them by symbol
    interposition, which relies on how libmicrohttpd calls itself: this test is what
    notices a libmicrohttpd where that stopped working."""
    d = daemons()
    for what, request, status, code in PROTOCOL_ERRORS:
        assert_json_error(raw_exchange(d.port, request), status, code, what)
    assert d.client().get("/healthz").status_code == 200


def head_forms(n):
    """Requests whose head grows with n in the ways that fill libmicrohttpd's memory."""
    close = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    query = b"&".join(b"a%d=%s" % (i, b"v" * 120) for i in range(15))  # within the limits
    return {"target": b"GET /" + b"a" * n + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "header": close + b"X-Pad: " + b"a" * n + b"\r\n\r\n",
            "blanks": close + b"X-Pad:" + b" " * n + b"v\r\n\r\n",
            "folded": close + b"X-Pad: v\r\n" + b" " * n + b"w\r\n\r\n",
            "arguments": b"GET /v1/studies?" + query + b" HTTP/1.1\r\nHost: x\r\n"
                         b"Connection: close\r\nX-Pad: " + b"p" * (n - 2600) + b"\r\n\r\n"}


def test_every_request_head_size_is_answered(daemons):
    """A request line and headers of about 7,870 to 8,100 bytes got no answer at all:
    libmicrohttpd had no room left in the connection's memory for the answer's header
    lines (blanks and folded lines, which it trims, counted too). Every size now gets an
    answer: the route's while the head leaves 384 bytes of the 8 KiB, a JSON 431 or 414
    beyond. (A Cookie header that libmicrohttpd cannot copy still gets none: see
    docs/TESTING.md, "Protocol errors".)"""
    d = daemons()
    answered = set()
    for n in range(6800, 8500, 12):
        for form, request in head_forms(n).items():
            reply = raw_exchange(d.port, request)
            status = first_answer(reply)[0] if reply else None
            # a folded line is refused (400, see test_nul_in_header_value_refused); a
            # target over 4096 bytes gets its 414 (test_every_target_and_head_size_gets_json)
            served = {"folded": (400,), "target": ()}.get(form, (200, 404))
            assert status in served + (414, 431), (form, n, reply[:300])
            if status in (400, 414, 431):
                assert_json_error(reply, status, "invalid", (form, n))
            answered.add(status)
    assert answered == {200, 400, 414, 431}, answered


def answer_within(port, request, seconds=3):
    """Everything the daemon sends for request until it closes; fails if that takes more
    than `seconds` (a request left unanswered waits for the 10 s header timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as s:
        t0 = time.monotonic()
        try:
            s.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before taking it all: the answer is still there
        reply = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            except socket.timeout:
                raise AssertionError(f"no end of answer within {seconds} s: {reply[:200]!r}")
            if not chunk:
                break
            reply += chunk
        assert time.monotonic() - t0 < seconds, reply[:200]
    return reply


# docs/TESTING.md finding 14: the fuzz_http input of a ~6.8 KB request line with a NUL
# before its query (tests/fuzz/corpus/fuzz_http/finding14-nul-before-query), as the fuzz
# harness sends it, and a short request of the same kind.
FINDING14 = (Path(__file__).resolve().parents[1] / "fuzz" / "corpus" / "fuzz_http"
             / "finding14-nul-before-query")


def finding14_requests():
    line = FINDING14.read_bytes()
    assert b"\n" not in line and line.index(b"\0") < line.index(b"?")
    tail = b" HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    return {"fuzz input": (line + tail, 414),
            "NUL, then 130 query arguments": (b"GET /v1/studies/b\0?" + b"a&" * 130 + tail, 400),
            "NUL, then a query of 3,000 bytes": (b"GET /v1/studies\0?" + b"a" * 3000 + tail, 400)}


def test_nul_in_target_is_answered(daemons):
    """libmicrohttpd 0.9.75 hands the request target to the URI callback as a C string but
    splits its query with its own length: after a NUL, a query the daemon never saw was
    stored argument by argument in the connection's 8 KiB, the pool ran out, and MHD queued
    its 431 and then went on reading the head, so nothing was sent until the header
    timeout closed the connection (10 s), and on_uri's context leaked when MHD closed it
    on a second error. A NUL in the target is now a 400 and a target over 4096 bytes a 414,
    in JSON, at once."""
    d = daemons()
    for what, (request, status) in finding14_requests().items():
        reply = answer_within(d.port, request)
        assert reply, (what, "no answer")
        assert_json_error(first_answer_only(reply), status, "invalid", what)
    assert d.client().get("/healthz").status_code == 200


def first_answer_only(reply):
    """The first answer of reply (libmicrohttpd may send more before the close)."""
    status, headers, body = first_answer(reply)
    return reply[:reply.index(b"\r\n\r\n") + 4 + len(body)]


def sized_requests(n):
    """Requests of about n bytes of target or head, in the shapes that fill libmicrohttpd's
    memory, each with the statuses it may get (404 or 200 while within the limits)."""
    end = b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    args = b"&".join(b"a%d=v" % i for i in range(16))
    return {
        "path": (b"GET /" + b"a" * (n - 1) + end, {404} if n <= 4096 else {414, 431}),
        "query": (b"GET /v1/studies?" + b"a" * (n - 12) + end,
                  {400} if n <= 4096 else {414, 431}),
        "path, 16 arguments": (b"GET /" + b"p" * (n - len(args) - 2) + b"?" + args + end,
                               {404} if n <= 4096 else {414, 431}),
        "NUL, arguments": (b"GET /v1/studies\0?" + b"a&" * ((n - 16) // 2) + end,
                           {400} if n <= 4096 else {400, 414, 431}),
        "header": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Pad: "
                   + b"h" * n + b"\r\n\r\n", {200, 431}),
    }


def test_every_target_and_head_size_gets_json(daemons):
    """Every target length and header size from 3.5 KB to 16 KB (in steps, and every byte
    around the 4096-byte target cap and libmicrohttpd's own limits near 8 KiB) gets an
    answer at once: the route's within the limits, else a JSON 4xx (414 for a target
    over 4096 bytes, 400 for a NUL in it or an oversized query, 431 for a head beyond
    the connection's memory); and the daemon stays healthy."""
    d = daemons()
    sizes = sorted(set(range(3500, 16385, 64)) | set(range(4090, 4103))
                   | set(range(7700, 8400, 4)))
    seen = set()
    for n in sizes:
        for form, (request, allowed) in sized_requests(n).items():
            reply = answer_within(d.port, request)
            assert reply, (form, n, "no answer")
            status = first_answer(reply)[0]
            assert status in allowed, (form, n, reply[:300])
            if status >= 400:
                assert_json_error(first_answer_only(reply), status,
                                  "not_found" if status == 404 else "invalid", (form, n))
            seen.add((form, status))
    assert {("path", 404), ("path", 414), ("header", 200), ("header", 431)} <= seen, seen
    assert d.client().get("/healthz").status_code == 200
    assert d.proc.poll() is None


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_finding14_loop_keeps_memory(daemons):
    """2,000 of finding 14's requests in a loop: each answered within 3 s, and the
    daemon's resident memory grows by less than 4 MB after the first 200 (under
    sanitizers LSan's check at exit stands in for it). Before: on_uri's 216-byte context
    leaked on some of them, and each went 10 s without an answer."""
    d = daemons()
    requests_ = [r for r, _ in finding14_requests().values()]
    for i in range(200):
        assert answer_within(d.port, requests_[i % 3])
    before = rss_kb(d.proc.pid)
    for i in range(2000):
        assert answer_within(d.port, requests_[i % 3]), i
    grew = rss_kb(d.proc.pid) - before
    # Under ASan freed memory stays resident in its quarantine (256 MB by default: 60 MB
    # seen here), so RSS says nothing there; LSan checks the daemon at its exit instead
    # (conftest fails the test on its report).
    assert SANITIZED or grew < 4096, f"RSS grew by {grew} kB"
    assert d.client().get("/healthz").status_code == 200


def test_error_quoting_bytes_not_utf8_stays_json(daemons):
    """A 404 quotes the request target, and a target that is not UTF-8 made jansson refuse
    the message: the answer was a 500 "out of memory". It is the 404, the bytes shown
    as '?'."""
    d = daemons()
    reply = answer_within(d.port, b"GET /a\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert_json_error(first_answer_only(reply), 404, "not_found", "target not UTF-8")
    assert b"no route /a??" in reply, reply
