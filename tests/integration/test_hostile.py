"""This file contains the hostile-request table of issue 16: for every route, malformed
JSON, wrong types, out-of-range and huge numbers, bad path ids, bad query strings and
header oddities (content types, bearer tokens, framing). Each case must get its 4xx status
with a JSON error in the documented shape, change nothing (the database dump and the API's
view of both studies are the same before and after) and leave the daemon up; the
sanitizer scan of shutdown_and_check runs at the end.

One daemon with auth on serves the whole table (module scope). Its fixture prepares:
  S  a candidate study (dim 2) with a completed trial C and a pending trial P;
  B  a box study (float, int, categorical) with a pending trial Q;
  K  a candidate set.
"""
import json
import socket

import pytest

from conftest import (Client, Daemon, ask, create_study, db_dump, error_of, fill, grid,
                      shutdown_and_check, tell)

TOKEN = "hostile-token-0123456789"
BOX = {"type": "box", "params": [
    {"name": "a", "type": "float", "low": 0.001, "high": 1, "log": True},
    {"name": "b", "type": "int", "low": 1, "high": 4},
    {"name": "c", "type": "categorical", "choices": ["x", "y"]}]}

# The routes with a JSON body, and a valid body for each ({P} is the pending trial).
JSON_ROUTES = {
    "cset": ("POST", "/v1/candidate-sets", {"rows": [[1.0, 2.0]]}),
    "create": ("POST", "/v1/studies", {"name": "new", "space": {"type": "candidates",
                                                                "candidates": [[1.0]]}}),
    "patch": ("PATCH", "/v1/studies/{S}", {"state": "paused"}),
    "ask": ("POST", "/v1/studies/{S}/ask", {"worker": "w"}),
    "batch": ("POST", "/v1/studies/{S}/tell", {"results": [{"trial_id": "{P}", "value": 1.0}]}),
    "tell": ("POST", "/v1/studies/{S}/trials/{P}/tell", {"value": 1.0}),
    "fail": ("POST", "/v1/studies/{S}/trials/{P}/fail", {"reason": "r"}),
    "heartbeat": ("POST", "/v1/studies/{S}/trials/{P}/heartbeat", {}),
    "observe": ("POST", "/v1/studies/{S}/observations",
                {"observations": [{"x": [1.0, 2.0], "value": 1.0}]}),
}

# Every route with an {id}, the id written as "{}" (the study's, then the trial's), and
# the JSON_ROUTES entry whose valid body it gets (handlers parse the body first).
ID_ROUTES = [
    ("GET", "/v1/candidate-sets/{}", None), ("GET", "/v1/studies/{}", None),
    ("PATCH", "/v1/studies/{}", "patch"), ("DELETE", "/v1/studies/{}", None),
    ("POST", "/v1/studies/{}/ask", "ask"),
    ("POST", "/v1/studies/{}/tell", "batch"), ("GET", "/v1/studies/{}/trials", None),
    ("GET", "/v1/studies/{}/best", None), ("POST", "/v1/studies/{}/observations", "observe"),
    ("GET", "/v1/studies/{}/export", None), ("GET", "/v1/studies/{S}/trials/{}", None),
    ("POST", "/v1/studies/{S}/trials/{}/tell", "tell"),
    ("POST", "/v1/studies/{S}/trials/{}/fail", "fail"),
    ("POST", "/v1/studies/{S}/trials/{}/heartbeat", "heartbeat"),
]
BAD_IDS = ["0", "-1", "abc", "1.5", "1e3", "99999999999999999999", "%00", "0x1", "%201",
           "1%2F", "999999"]

MALFORMED = [
    b"{", b'{"worker": "w",}', b'{"a" 1}', b"{'worker': 'w'}", b"\xff\xfe{}",
    b'{"worker": "w"}{"x": 1}', b"[" * 5000, b'{"worker": "\\ud800"}', b"nul",
    b'"a string"', b"42", b"null", b"[]", b" \t\r\n ", b'{"worker": "w\x00x"}',
    b'{"a": 1e999}', b'{"a": NaN}', b'{"a": Infinity}', b"\x00",
]

# (route, body with the wrong field, field the error must name). A JSON string "{P}" is
# the pending trial's id.
WRONG_FIELDS = [
    ("ask", {"worker": 1}, "worker"), ("ask", {"worker": []}, "worker"),
    ("ask", {"worker": None}, "worker"), ("ask", {"worker": "w" * 100000}, "worker"),
    ("ask", {"worker": "w", "count": "2"}, "count"), ("ask", {"worker": "w", "count": True}, "count"),
    ("ask", {"worker": "w", "count": 0}, "count"), ("ask", {"worker": "w", "count": -1}, "count"),
    ("ask", {"worker": "w", "count": 1001}, "count"), ("ask", {"worker": "w", "count": 2 ** 62}, "count"),
    ("ask", {"worker": "w", "count": 1e300}, "count"), ("ask", {"worker": "w", "wait_ms": "1"}, "wait_ms"),
    ("ask", {"worker": "w", "wait_ms": -1}, "wait_ms"), ("ask", {"worker": "w", "wait_ms": 1.5}, "wait_ms"),
    ("ask", {"worker": "w", "wait_ms": 10 ** 15}, "wait_ms"), ("ask", {"worker": "w", "bogus": 1}, "bogus"),
    ("tell", {"value": "1"}, "value"), ("tell", {"value": []}, "value"), ("tell", {"value": {}}, "value"),
    ("tell", {"value": None}, "value"), ("tell", {"value": True}, "value"), ("tell", {}, "value"),
    ("tell", {"value": 1.0, "extra": 2}, "extra"),
    ("batch", {"results": "x"}, "results"), ("batch", {"results": {}}, "results"),
    ("batch", {"results": None}, "results"), ("batch", {"results": [1]}, "results[0]"),
    ("batch", {"results": [{"trial_id": "1", "value": 1.0}]}, "results[0].trial_id"),
    ("batch", {"results": [{"trial_id": "{P}", "value": "x"}]}, "results[0].value"),
    ("batch", {"results": [{"trial_id": "{P}"}]}, "results[0].value"),
    ("batch", {"results": [{"trial_id": 1.5, "value": 1.0}]}, "results[0].trial_id"),
    ("batch", {"results": [{"trial_id": -1, "value": 1.0}]}, "results[0].trial_id"),
    ("batch", {"results": [{"trial_id": "{P}", "value": 1.0}] * 100001}, "results"),
    ("fail", {"reason": 1}, "reason"), ("fail", {"reason": []}, "reason"),
    ("fail", {"reason": "r" * 100000}, "reason"), ("fail", {"bogus": 1}, "bogus"),
    ("heartbeat", {"bogus": 1}, "bogus"),
    ("patch", {}, "state"), ("patch", {"state": "done"}, "state"), ("patch", {"state": 1}, "state"),
    ("patch", {"state": "PAUSED"}, "state"), ("patch", {"state": None}, "state"),
    ("patch", {"state": "paused", "bogus": 1}, "bogus"),
    ("observe", {"observations": "x"}, "observations"), ("observe", {"observations": {}}, "observations"),
    ("observe", {"observations": []}, "observations"), ("observe", {"observations": [1]}, "observations[0]"),
    ("observe", {"observations": [{"x": "a", "value": 1}]}, "observations[0].x"),
    ("observe", {"observations": [{"x": [1, "2"], "value": 1}]}, "observations[0].x"),
    ("observe", {"observations": [{"x": [1, 2], "value": "v"}]}, "observations[0].value"),
    ("observe", {"observations": [{"x": [1, 2, 3], "value": 1}]}, "observations[0].x"),
    # Taken, and then every ask of a BBKB study failed with 500 (squares overflowed).
    ("observe", {"observations": [{"x": [1e160, 2], "value": 1}]}, "observations[0]"),
    ("cset", {"rows": "x"}, "rows"), ("cset", {"rows": []}, "rows"), ("cset", {"rows": [[]]}, "rows[0]"),
    ("cset", {"rows": [[1, "a"]]}, "rows[0]"), ("cset", {"rows": [["1"]]}, "rows[0]"),
    ("cset", {"rows": [[1, 2]], "names": 1}, "names"), ("cset", {"rows": [[1, 2]], "names": ["a"]}, "names"),
    ("cset", {"rows": [[1, 2]], "names": [1, 2]}, "names"), ("cset", {"rows": [[1, 2]], "bogus": 1}, "bogus"),
    ("create", {"name": 1, "space": {"type": "candidates", "candidates": [[1.0]]}}, "name"),
    ("create", {"name": "", "space": {"type": "candidates", "candidates": [[1.0]]}}, "name"),
    ("create", {"name": "n" * 201, "space": {"type": "candidates", "candidates": [[1.0]]}}, "name"),
    ("create", {"name": "n"}, "space"), ("create", {"name": "n", "space": "box"}, "space"),
    ("create", {"name": "n", "space": {"type": "box", "params": []}}, "space.params"),
    ("create", {"name": "n", "space": {"type": "candidates", "candidate_set": 999999}}, "space"),
    ("create", {"name": "n", "space": {"type": "candidates", "candidates": [[1.0]]},
                "engine": "random"}, "engine"),
    ("create", {"name": "n", "space": {"type": "candidates", "candidates": [[1.0]]},
                "lease_seconds": -1}, "lease_seconds"),
    ("create", {"name": "n", "space": {"type": "candidates", "candidates": [[1.0]]},
                "lease_seconds": "60"}, "lease_seconds"),
    ("create", {"name": "S", "space": {"type": "candidates", "candidates": [[1.0]]}}, None),
]

# (path, query) of the two routes with numeric arguments, and the others' enumerations.
BAD_QUERIES = [(path, q) for path in ("/v1/studies", "/v1/studies/{S}/trials")
               for q in ("limit=", "limit=0", "limit=-1", "limit=abc", "limit=1.5", "limit=1e2",
                         "limit=0x10", "limit=%2B1", "limit=+1", "limit=" + "9" * 30,
                         "limit=100000", "cursor=-1", "cursor=-0", "cursor=-00", "limit=-05", "cursor=x", "cursor=1.0",
                         "cursor=18446744073709551616", "cursor=%00", "&" * 40, "limit",
                         "limit&limit=5", "limit=5&limit=abc", "limit=5&limit=5",
                         "name=" + "n" * 3000)]
BAD_QUERIES += [("/v1/studies/{S}/trials", "state=" + s)
                for s in ("", "PENDING", "pending%20", "done", "pending%00", "pending&state=failed")]
BAD_QUERIES += [("/v1/studies/{S}/export", "format" + f)
                for f in ("=", "=CSV", "=xml", "=json%00", "", "=csv&format=json")]
BAD_QUERIES += [("/v1/studies", "name="), ("/v1/studies", "name=" + "n" * 201),
                ("/v1/studies", "name"), ("/v1/studies", "name=S&name=B")]
BAD_QUERIES += [("/v1/studies", "state" + s)
                for s in ("", "=", "=ACTIVE", "=done", "=active%00", "=active&state=paused",
                          "=active&name=")]

CONTENT_TYPES = ["text/plain", "application/xml", "application/jsonx", "json", "",
                 "multipart/form-data; boundary=x", "application/x-www-form-urlencoded"]
AUTHORIZATIONS = [None, "", "Bearer", "Bearer ", "Bearer " + TOKEN[:-1], "Bearer " + TOKEN + "x",
                  "Bearer " + TOKEN + " ", "Bearer  " + TOKEN, "Basic " + TOKEN, "Token " + TOKEN,
                  TOKEN, "Bearer " + TOKEN.upper(), "Bearer " + TOKEN + "\t"]
# Framing the daemon must refuse in JSON at once (raw requests: clients will not send them).
FRAMINGS = [b"Content-Length: 14\r\nContent-Length: 3\r\n", b"Transfer-Encoding: gzip\r\n",
            b"Transfer-Encoding: chunked, gzip\r\n", b"Transfer-Encoding: identity\r\n",
            b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            b"Transfer-Encoding: chunked\r\nContent-Length: 14\r\n",
            b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"]


def case(name, method, path, body=None, headers=None, status=400, codes=("invalid",), field=None,
         raw=None):
    return pytest.param(dict(method=method, path=path, body=body, headers=headers or {},
                             status=status, codes=set(codes), field=field, raw=raw), id=name)


def build_cases():
    out = []
    for route, (method, path, _) in JSON_ROUTES.items():
        for i, body in enumerate(MALFORMED):
            out.append(case(f"malformed-{route}-{i}", method, path, body,
                            codes=("invalid_json", "invalid")))
        for ctype in CONTENT_TYPES:
            out.append(case(f"ctype-{route}-{ctype or 'empty'}", method, path,
                            json.dumps(JSON_ROUTES[route][2]).encode(), {"Content-Type": ctype},
                            415, ("unsupported_media_type",)))
    for i, (route, body, field) in enumerate(WRONG_FIELDS):
        method, path, _ = JSON_ROUTES[route]
        codes = ("conflict",) if field is None else ("invalid",)
        out.append(case(f"field-{route}-{field}-{i}", method, path, body,
                        status=409 if field is None else 400, codes=codes, field=field))
    for method, path, route in ID_ROUTES:
        for bad in BAD_IDS:
            body = JSON_ROUTES[route][2] if route else None
            out.append(case(f"id-{method}-{path}-{bad}", method, path.replace("{}", bad), body,
                            status=404, codes=("not_found",)))
    for path, query in BAD_QUERIES:
        out.append(case(f"query-{path}-{query[:40]}", "GET", f"{path}?{query}"))
    for path in ("/v1/studies", "/v1/studies/{S}/trials"):  # docs/TESTING.md finding 14
        # sent raw: a refusal at the HTTP layer, documented once in openapi.yaml's info
        out.append(case(f"target-over-4096-{path}", "GET", f"{path}?limit=1&name={'n' * 4100}",
                        b"", status=414, raw=b""))
        out.append(case(f"target-nul-{path}", "GET", f"{path}\0?limit=1" + "&a" * 200, b"",
                        raw=b""))
    for route in ("ask", "tell", "create", "cset"):
        method, path, body = JSON_ROUTES[route]
        for i, auth in enumerate(AUTHORIZATIONS):
            out.append(case(f"auth-{route}-{i}", method, path, body, {"Authorization": auth},
                            401, ("unauthorized",)))
        for i, framing in enumerate(FRAMINGS):
            out.append(case(f"framing-{route}-{i}", method, path, body, raw=framing,
                            status=401 if b"Authorization" in framing else 400,
                            codes=("unauthorized",) if b"Authorization" in framing else ("invalid",)))
    return out


CASES = build_cases()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("hostile"), token=TOKEN)
    d.start()
    api = d.client()
    s = create_study(api, "S", space={"type": "candidates", "candidates": grid(20, 2)})["id"]
    c = ask(api, s)["trials"][0]["id"]
    tell(api, s, c, 1.0)
    p = ask(api, s)["trials"][0]["id"]
    b = create_study(api, "B", space=BOX)["id"]
    q = ask(api, b)["trials"][0]["id"]
    k = api.post("/v1/candidate-sets", json={"rows": [[1.0, 2.0]]}).json()["id"]
    yield d, api, {"S": s, "C": c, "P": p, "B": b, "Q": q, "K": k}
    shutdown_and_check([d])


def api_view(api, ids):
    """What the API shows of both studies and the study list."""
    paths = ["/v1/studies", "/v1/candidate-sets/{K}"] + [
        p for st in ("S", "B") for p in (f"/v1/studies/{{{st}}}", f"/v1/studies/{{{st}}}/trials",
                                         f"/v1/studies/{{{st}}}/best")]
    return {p: api.get(p.format(**ids)).json() for p in paths}


def raw_request(port, head, body):
    """Sends one request as bytes (Connection: close) and returns (status, JSON body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + body)
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    status_line, _, rest = reply.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


def send(d, api, c, ids):
    path = fill(c["path"], ids)
    body = c["body"]
    if body is not None and not isinstance(body, bytes):
        body = json.dumps(fill(body, ids)).encode()
    if c["raw"] is not None:
        head = (f"{c['method']} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n").encode()
        if b"Content-Length" not in c["raw"] and b"Transfer-Encoding" not in c["raw"]:
            head += b"Content-Length: %d\r\n" % len(body)
        return raw_request(d.port, head + c["raw"] + b"\r\n", body)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    headers.update(c["headers"])
    client = api
    if "Authorization" in c["headers"]:  # the case's header, or none at all
        client = Client(d.url)
        if headers["Authorization"] is None:
            del headers["Authorization"]
    r = client.request(c["method"], path, data=body, headers=headers)
    return r.status_code, r


@pytest.mark.parametrize("c", CASES)
def test_hostile(env, c):
    d, api, ids = env
    before, view = db_dump(d.db), api_view(api, ids)
    status, reply = send(d, api, c, ids)
    assert status == c["status"], (status, reply if isinstance(reply, dict) else reply.text[:300])
    err = reply["error"] if isinstance(reply, dict) else error_of(reply)
    assert isinstance(err["code"], str) and isinstance(err["message"], str), err
    assert err["code"] in c["codes"], err
    if c["field"] is not None:
        assert isinstance(err["field"], str) and err["field"].startswith(c["field"]), err
    assert db_dump(d.db) == before, "the database changed"
    assert api_view(api, ids) == view, "the API's view changed"
    assert d.running and api.get("/healthz").status_code == 200


def test_table_size():
    """Issue 16 asks for at least 250 hostile cases in the suite; this table alone has them."""
    assert len(CASES) >= 250, len(CASES)
