"""This file contains the route x error matrix: every route of the API is asked without a
token (401 on /v1, open on /healthz and /metrics), with a foreign Content-Type (415), with
a body over --max-body-bytes (413), with an unknown study or trial (404), and with a
method it does not have (405 + Allow). One daemon with auth on serves the whole matrix,
and nothing may change in the database."""
import pytest

from conftest import Daemon, ask, create_study, db_dump, error_of, shutdown_and_check

# (method, path, JSON body or None). {S} study, {T} pending trial, {C} candidate set.
ROUTES = [
    ("GET", "/v1/engines", None),
    ("POST", "/v1/candidate-sets", {"rows": [[1.0]]}),
    ("GET", "/v1/candidate-sets/{C}", None),
    ("POST", "/v1/studies", {"name": "x", "space": {"type": "candidates", "candidates": [[1.0]]},
                             "engine": {"name": "random"}}),
    ("GET", "/v1/studies", None),
    ("GET", "/v1/studies/{S}", None),
    ("PATCH", "/v1/studies/{S}", {"state": "paused"}),
    ("DELETE", "/v1/studies/{S}", None),
    ("POST", "/v1/studies/{S}/ask", {"worker": "w"}),
    ("POST", "/v1/studies/{S}/tell", {"results": [{"trial_id": 1, "value": 1.0}]}),
    ("GET", "/v1/studies/{S}/trials", None),
    ("GET", "/v1/studies/{S}/trials/{T}", None),
    ("POST", "/v1/studies/{S}/trials/{T}/tell", {"value": 1.0}),
    ("POST", "/v1/studies/{S}/trials/{T}/fail", {"reason": "r"}),
    ("POST", "/v1/studies/{S}/trials/{T}/heartbeat", {}),
    ("GET", "/v1/studies/{S}/best", None),
    ("POST", "/v1/studies/{S}/observations", {"observations": [{"x": [1.0, 2.0], "value": 1.0}]}),
    ("GET", "/v1/studies/{S}/export", None),
]
BODY_ROUTES = [r for r in ROUTES if r[2] is not None]
ALL_METHODS = ("GET", "POST", "DELETE", "PUT", "PATCH")
TOKEN = "matrix-token-0123456"
LIMIT = 2048


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("matrix"), token=TOKEN, args=["--max-body-bytes", str(LIMIT)])
    d.start()
    api = d.client()
    s = create_study(api, "m", space={"type": "candidates", "candidates": [[1.0, 2.0], [3.0, 4.0]]})["id"]
    t = ask(api, s)["trials"][0]["id"]
    c = api.post("/v1/candidate-sets", json={"rows": [[1.0]]}).json()["id"]
    yield d, api, {"S": s, "T": t, "C": c}
    shutdown_and_check([d])


def ids_of(routes):
    return [f"{m} {p}" for m, p, _ in routes]


@pytest.mark.parametrize("route", ROUTES, ids=ids_of(ROUTES))
def test_401_without_or_with_wrong_token(env, route):
    d, api, ids = env
    method, path, body = route
    before = db_dump(d.db)
    for token in (None, "wrong-" + TOKEN, TOKEN + "x", TOKEN[:-1]):
        c = d.client(token=token or "")
        if token is None:
            c.headers.pop("Authorization")
        r = c.request(method, path.format(**ids), json=body)
        assert r.status_code == 401, (token, r.text)
        assert error_of(r)["code"] == "unauthorized"
        assert r.headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert db_dump(d.db) == before


@pytest.mark.parametrize("route", BODY_ROUTES, ids=ids_of(BODY_ROUTES))
def test_415_foreign_content_type(env, route):
    d, api, ids = env
    method, path, _ = route
    before = db_dump(d.db)
    for ctype in ("text/plain", "application/xml", "multipart/form-data; boundary=x",
                  "application/jsonx", "text/csv" if "candidate-sets" not in path else "image/png"):
        r = api.request(method, path.format(**ids), data=b'{"worker": "w"}',
                        headers={"Content-Type": ctype})
        assert r.status_code == 415, (ctype, r.text)
        assert error_of(r)["code"] == "unsupported_media_type"
    assert db_dump(d.db) == before


@pytest.mark.parametrize("route", BODY_ROUTES, ids=ids_of(BODY_ROUTES))
def test_413_body_over_limit(env, route):
    d, api, ids = env
    method, path, _ = route
    before = db_dump(d.db)
    r = api.request(method, path.format(**ids), data=b'{"pad": "' + b"p" * (2 * LIMIT) + b'"}',
                    headers={"Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert error_of(r)["code"] == "payload_too_large"
    assert db_dump(d.db) == before
    assert api.get("/healthz").status_code == 200


UNKNOWN_IDS = [(r, "study") for r in ROUTES if "{S}" in r[1]] + \
              [(r, "trial") for r in ROUTES if "{T}" in r[1]]


@pytest.mark.parametrize("route,unknown", UNKNOWN_IDS,
                         ids=[f"{i}-{u}" for i, (_, u) in zip(ids_of([r for r, _ in UNKNOWN_IDS]),
                                                              UNKNOWN_IDS)])
def test_404_unknown_study_or_trial(env, route, unknown):
    d, api, ids = env
    method, path, body = route
    fake = dict(ids, **({"S": 987654} if unknown == "study" else {"T": 987654}))
    before = db_dump(d.db)
    r = api.request(method, path.format(**fake), json=body)
    assert r.status_code == 404, r.text
    assert error_of(r)["code"] == "not_found"
    assert db_dump(d.db) == before


def test_405_every_path_and_method(env):
    d, api, ids = env
    allowed = {}
    for method, path, _ in ROUTES:
        allowed.setdefault(path, set()).add(method)
    allowed["/healthz"] = {"GET"}
    allowed["/metrics"] = {"GET"}
    before = db_dump(d.db)
    for path, methods in allowed.items():
        for method in ALL_METHODS:
            if method in methods:
                continue
            r = api.request(method, path.format(**ids))
            assert r.status_code == 405, (method, path, r.text)
            assert error_of(r)["code"] == "method_not_allowed"
            got = {m.strip() for m in r.headers.get("Allow", "").split(",") if m.strip()}
            want = methods | ({"HEAD"} if "GET" in methods else set())
            assert want <= got, (method, path, r.headers.get("Allow"))
    assert db_dump(d.db) == before


def test_open_routes_need_no_token(env):
    d, _, _ = env
    anon = d.client(token="")
    anon.headers.pop("Authorization")
    assert anon.get("/healthz").status_code == 200
    assert anon.get("/metrics").status_code == 200
