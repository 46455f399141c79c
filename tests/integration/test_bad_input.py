"""This file contains the bad-input table: each malformed, out-of-range or wrong-state
request must get the right status and a JSON error naming the field, leave every table of
the database unchanged (dump before == dump after), and leave the daemon up.

One daemon serves the whole table (module scope). Its fixture prepares:
  A  a candidate study (dim 2) with a pending trial P and a completed trial C (value 1.0);
  B  a box study;  E  a study with lease_seconds=1 whose trial X has expired;
  D  a deleted study (with a trial T handed out before deletion).
"""
import json
import os
import time

import pytest

from conftest import (Daemon, ask, create_study, db_dump, error_of, fill, grid,
                      shutdown_and_check, tell)

ANY = object()      # the error must name some field (a non-empty string)
NOCHECK = None      # parse-level errors: field may be null

CAND = {"type": "candidates", "candidates": [[1.0, 2.0], [3.0, 4.0]]}


def study(**kw):
    body = {"name": "bad", "space": CAND}
    body.update(kw)
    return body


def box(*params):
    return study(space={"type": "box", "params": list(params)})


# (id, method, path, body, content-type, status, accepted codes, field)
CASES = [
    ("malformed-json", "POST", "/v1/studies", b'{"name": "x",', None, 400, {"invalid_json"}, NOCHECK),
    ("trailing-garbage", "POST", "/v1/studies/{A}/ask", b'{"worker": "w"} xx', None, 400,
     {"invalid_json"}, NOCHECK),
    ("body-not-object", "POST", "/v1/studies/{A}/ask", b'[1, 2]', None, 400,
     {"invalid_json", "invalid"}, NOCHECK),
    ("deep-nesting", "POST", "/v1/studies", b'[' * 100000, None, 400, {"invalid_json"}, NOCHECK),
    ("empty-body-tell", "POST", "/v1/studies/{A}/trials/{P}/tell", b'', None, 400,
     {"invalid_json", "invalid"}, NOCHECK),
    ("empty-body-create", "POST", "/v1/studies", b'', None, 400, {"invalid_json", "invalid"}, NOCHECK),
    ("garbage-10MB", "POST", "/v1/studies", "GARBAGE", None, (400, 413),
     {"invalid_json", "payload_too_large"}, NOCHECK),
    ("invalid-utf8", "POST", "/v1/studies",
     b'{"name": "\xff\xfe\xc3", "space": {"type": "candidates", "candidates": [[1]]}}', None, 400,
     {"invalid_json"}, NOCHECK),
    ("nan-literal", "POST", "/v1/studies/{A}/trials/{P}/tell", b'{"value": NaN}', None, 400,
     {"invalid_json", "invalid"}, "value"),
    ("infinity-literal", "POST", "/v1/studies/{A}/trials/{P}/tell", b'{"value": Infinity}', None, 400,
     {"invalid_json", "invalid"}, "value"),
    ("minus-infinity", "POST", "/v1/studies/{A}/trials/{P}/tell", b'{"value": -Infinity}', None, 400,
     {"invalid_json", "invalid"}, "value"),
    ("overflow-1e400", "POST", "/v1/studies/{A}/trials/{P}/tell", b'{"value": 1e400}', None, 400,
     {"invalid_json", "invalid"}, "value"),
    ("value-string", "POST", "/v1/studies/{A}/trials/{P}/tell", {"value": "1"}, None, 400, {"invalid"}, "value"),
    ("value-null", "POST", "/v1/studies/{A}/trials/{P}/tell", {"value": None}, None, 400, {"invalid"}, "value"),
    ("value-missing", "POST", "/v1/studies/{A}/trials/{P}/tell", {}, None, 400, {"invalid"}, "value"),
    ("unknown-field-tell", "POST", "/v1/studies/{A}/trials/{P}/tell", {"value": 1, "extra": 2}, None, 400,
     {"invalid"}, "extra"),
    ("unknown-field-study", "POST", "/v1/studies", study(colour="red"), None, 400, {"invalid"}, "colour"),
    ("unknown-field-param", "POST", "/v1/studies",
     box({"name": "a", "type": "float", "low": 0, "high": 1, "bogus": 1}), None, 400, {"invalid"},
     "space.params[0].bogus"),
    ("name-wrong-type", "POST", "/v1/studies", study(name=5), None, 400, {"invalid"}, "name"),
    ("name-empty", "POST", "/v1/studies", study(name=""), None, 400, {"invalid"}, "name"),
    ("name-too-long", "POST", "/v1/studies", study(name="n" * 201), None, 400, {"invalid"}, "name"),
    ("direction-bad", "POST", "/v1/studies", study(direction="up"), None, 400, {"invalid"}, "direction"),
    ("lease-zero", "POST", "/v1/studies", study(lease_seconds=0), None, 400, {"invalid"}, "lease_seconds"),
    ("lease-too-long", "POST", "/v1/studies", study(lease_seconds=604801), None, 400, {"invalid"},
     "lease_seconds"),
    ("max-trials-zero", "POST", "/v1/studies", study(max_trials=0), None, 400, {"invalid"}, "max_trials"),
    ("space-missing", "POST", "/v1/studies", {"name": "bad"}, None, 400, {"invalid"}, "space"),
    ("space-type-bad", "POST", "/v1/studies", study(space={"type": "sphere"}), None, 400, {"invalid"},
     "space.type"),
    ("candidates-empty", "POST", "/v1/studies", study(space={"type": "candidates", "candidates": []}),
     None, 400, {"invalid"}, "space.candidates"),
    ("candidates-dim-mismatch", "POST", "/v1/studies",
     study(space={"type": "candidates", "candidates": [[1, 2], [3]]}), None, 400, {"invalid"},
     "space.candidates[1]"),
    ("candidates-non-number", "POST", "/v1/studies",
     study(space={"type": "candidates", "candidates": [[1, 2], [3, "4"]]}), None, 400, {"invalid"},
     "space.candidates[1][1]"),
    ("candidates-1e400", "POST", "/v1/studies",
     b'{"name": "bad", "space": {"type": "candidates", "candidates": [[1, 1e400]]}}', None, 400,
     {"invalid_json", "invalid"}, "space.candidates[0][1]"),
    ("candidate-set-unknown", "POST", "/v1/studies",
     study(space={"type": "candidates", "candidate_set": 987654}), None, (400, 404),
     {"invalid", "not_found"}, "space.candidate_set"),
    ("box-low-above-high", "POST", "/v1/studies", box({"name": "a", "type": "float", "low": 2, "high": 1}),
     None, 400, {"invalid"}, "space.params[0]"),
    ("box-int-low-above-high", "POST", "/v1/studies", box({"name": "a", "type": "int", "low": 2, "high": 1}),
     None, 400, {"invalid"}, "space.params[0].high"),
    ("box-int-high-int64-max", "POST", "/v1/studies",
     box({"name": "a", "type": "int", "low": 0, "high": 9223372036854775807}),
     None, 400, {"invalid"}, "space.params[0].high"),
    ("box-int-low-int64-min", "POST", "/v1/studies",
     box({"name": "a", "type": "int", "low": -9223372036854775808, "high": 0}),
     None, 400, {"invalid"}, "space.params[0].low"),
    ("box-int-high-past-2^53", "POST", "/v1/studies",
     box({"name": "a", "type": "int", "low": 0, "high": 9007199254740992}),
     None, 400, {"invalid"}, "space.params[0].high"),
    ("box-categorical-repeat", "POST", "/v1/studies",
     box({"name": "u", "type": "float", "low": 0, "high": 1},
         {"name": "c", "type": "categorical", "choices": ["a", "b", "a"]}),
     None, 400, {"invalid"}, "space.params[1].choices[2]"),
    ("box-categorical-repeat-number", "POST", "/v1/studies",
     box({"name": "c", "type": "categorical", "choices": [1, True, "1", 1.0]}),
     None, 400, {"invalid"}, "space.params[0].choices[3]"),
    ("box-log-nonpositive", "POST", "/v1/studies",
     box({"name": "a", "type": "float", "low": 0, "high": 1, "log": True}), None, 400, {"invalid"},
     "space.params[0]"),
    ("box-categorical-empty", "POST", "/v1/studies", box({"name": "c", "type": "categorical", "choices": []}),
     None, 400, {"invalid"}, "space.params[0].choices"),
    ("box-duplicate-names", "POST", "/v1/studies",
     box({"name": "a", "type": "int", "low": 0, "high": 3}, {"name": "a", "type": "int", "low": 0, "high": 3}),
     None, 400, {"invalid"}, "space.params[1]"),
    ("box-param-type-bad", "POST", "/v1/studies", box({"name": "a", "type": "complex", "low": 0, "high": 1}),
     None, 400, {"invalid"}, "space.params[0].type"),
    ("engine-unknown", "POST", "/v1/studies", study(engine={"name": "no-such-engine"}), None, 400,
     {"invalid"}, "engine.name"),
    ("engine-option-unknown", "POST", "/v1/studies", study(engine={"name": "random", "settings": {"bogus": 1}}),
     None, 400, {"invalid"}, "engine.settings.bogus"),
    ("engine-option-range", "POST", "/v1/studies",
     study(engine={"name": "random", "settings": {"lengthscale": -1}}), None, 400, {"invalid"},
     "engine.settings.lengthscale"),
    ("engine-seed-past-2^53", "POST", "/v1/studies",
     study(engine={"name": "random", "settings": {"seed": 9007199254740993}}), None, 400, {"invalid"},
     "engine.settings.seed"),
    ("engine-seed-int64-max", "POST", "/v1/studies",
     study(engine={"name": "random", "settings": {"seed": 9223372036854775807}}), None, 400,
     {"invalid"}, "engine.settings.seed"),
    ("engine-lambda-subnormal", "POST", "/v1/studies",
     study(engine={"name": "sgp-ts", "settings": {"lambda": 5e-324}}), None, 400, {"invalid"},
     "engine.settings.lambda"),
    ("engine-lengthscale-tiny", "POST", "/v1/studies",
     study(engine={"name": "gp-ucb", "settings": {"lengthscale": 1e-160}}), None, 400, {"invalid"},
     "engine.settings.lengthscale"),
    ("engine-lengthscales-tiny", "POST", "/v1/studies",
     study(engine={"name": "bbkb", "settings": {"lengthscales": [1, 1e-300]}}), None, 400,
     {"invalid"}, "engine.settings.lengthscales"),
    ("engine-option-type", "POST", "/v1/studies",
     study(engine={"name": "random", "settings": {"repeats": 3}}), None, 400, {"invalid"},
     "engine.settings.repeats"),
    ("engine-choice-floor-negative", "POST", "/v1/studies",
     study(engine={"name": "gp-ucb", "settings": {"choice_floor": -1}}), None, 400, {"invalid"},
     "engine.settings.choice_floor"),
    ("engine-choice-floor-other-engine", "POST", "/v1/studies",
     study(engine={"name": "pi-gp-ucb", "settings": {"choice_floor": 2}}), None, 400, {"invalid"},
     "engine.settings.choice_floor"),
    ("engine-climb-after-negative", "POST", "/v1/studies",
     study(engine={"name": "bbkb", "settings": {"climb_after": -1}}), None, 400, {"invalid"},
     "engine.settings.climb_after"),
    ("engine-climb-after-fraction", "POST", "/v1/studies",
     study(engine={"name": "bkb", "settings": {"climb_after": 2.5}}), None, 400, {"invalid"},
     "engine.settings.climb_after"),
    ("engine-climb-after-other-engine", "POST", "/v1/studies",
     study(engine={"name": "gp-ucb", "settings": {"climb_after": 100}}), None, 400, {"invalid"},
     "engine.settings.climb_after"),
    ("engine-option-choice", "POST", "/v1/studies",
     study(engine={"name": "bbkb", "settings": {"categorical_kernel": "sum"}}), None, 400,
     {"invalid"}, "engine.settings.categorical_kernel"),
    ("engine-prior-mean-choice", "POST", "/v1/studies",
     study(engine={"name": "gp-ucb", "settings": {"prior_mean": "bowl"}}), None, 400,
     {"invalid"}, "engine.settings.prior_mean"),
    ("ask-worker-missing", "POST", "/v1/studies/{A}/ask", {}, None, 400, {"invalid"}, "worker"),
    ("ask-worker-empty", "POST", "/v1/studies/{A}/ask", {"worker": ""}, None, 400, {"invalid"}, "worker"),
    ("ask-count-string", "POST", "/v1/studies/{A}/ask", {"worker": "w", "count": "2"}, None, 400,
     {"invalid"}, "count"),
    ("ask-count-zero", "POST", "/v1/studies/{A}/ask", {"worker": "w", "count": 0}, None, 400, {"invalid"}, "count"),
    ("ask-count-big", "POST", "/v1/studies/{A}/ask", {"worker": "w", "count": 1001}, None, 400, {"invalid"},
     "count"),
    ("ask-count-fraction", "POST", "/v1/studies/{A}/ask", {"worker": "w", "count": 1.5}, None, 400,
     {"invalid"}, "count"),
    ("ask-count-1e20", "POST", "/v1/studies/{A}/ask", b'{"worker": "w", "count": 100000000000000000000}',
     None, 400, {"invalid", "invalid_json"}, "count"),
    ("ask-wait-negative", "POST", "/v1/studies/{A}/ask", {"worker": "w", "wait_ms": -1}, None, 400,
     {"invalid"}, "wait_ms"),
    ("observation-dim-mismatch", "POST", "/v1/studies/{A}/observations",
     {"observations": [{"x": [1.0], "value": 1.0}]}, None, 400, {"invalid"}, "observations[0].x"),
    ("observation-value-missing", "POST", "/v1/studies/{A}/observations",
     {"observations": [{"x": [1.0, 2.0]}]}, None, 400, {"invalid"}, "observations[0].value"),
    ("batch-tell-bad-item", "POST", "/v1/studies/{A}/tell",
     {"results": [{"trial_id": "{P}", "value": 1.0}, {"trial_id": "{P}", "value": "x"}]}, None, 400,
     {"invalid"}, "results[1].value"),
    ("batch-tell-empty", "POST", "/v1/studies/{A}/tell", {"results": []}, None, 400, {"invalid"}, "results"),
    ("csv-text-cell", "POST", "/v1/candidate-sets", b"a,b\n1,2\n3,x\n", "text/csv", 400, {"invalid"}, ANY),
    ("csv-ragged", "POST", "/v1/candidate-sets", b"1,2\n3\n", "text/csv", 400, {"invalid"}, ANY),
    ("csv-header-repeated-name", "POST", "/v1/candidate-sets", b"a,b,a\n1,2,3\n", "text/csv", 400,
     {"invalid"}, "names[2]"),
    ("json-set-repeated-name", "POST", "/v1/candidate-sets", {"rows": [[1, 2]], "names": ["a", "a"]},
     None, 400, {"invalid"}, "names[1]"),
    ("json-set-ragged", "POST", "/v1/candidate-sets", {"rows": [[1, 2], [3]]}, None, 400, {"invalid"}, "rows[1]"),
    ("list-limit-negative", "GET", "/v1/studies?limit=-1", None, None, 400, {"invalid"}, "limit"),
    ("list-limit-text", "GET", "/v1/studies?limit=abc", None, None, 400, {"invalid"}, "limit"),
    ("list-cursor-bad", "GET", "/v1/studies?cursor=%ff%00zz", None, None, 400, {"invalid"}, "cursor"),
    # Issue 16 item 8: the whole field or 400 (these were accepted).
    ("csv-nul-in-number", "POST", "/v1/candidate-sets", b"1,2\n3\x00junk,4\n", "text/csv", 400,
     {"invalid"}, ANY),
    ("list-cursor-overflow", "GET", "/v1/studies?cursor=99999999999999999999", None, None, 400,
     {"invalid"}, "cursor"),
    ("trials-cursor-overflow", "GET", "/v1/studies/{A}/trials?cursor=99999999999999999999", None,
     None, 400, {"invalid"}, "cursor"),
    ("list-limit-nul", "GET", "/v1/studies?limit=5%00junk", None, None, 400, {"invalid"}, "limit"),
    # A sign or blanks before the digits were taken by strtoll (fuzz_url found limit=%2B5;
    # '+' in a query is a space, so limit=+5 reads " 5").
    ("list-limit-plus", "GET", "/v1/studies?limit=%2B5", None, None, 400, {"invalid"}, "limit"),
    ("list-limit-space", "GET", "/v1/studies?limit=+5", None, None, 400, {"invalid"}, "limit"),
    # Hundreds of query arguments filled MHD's connection pool: no answer until the idle
    # timeout (fuzz_url). More than 16 are refused.
    ("query-many-empty-args", "GET", "/v1/studies?" + "&" * 300, None, None, 400, {"invalid"},
     NOCHECK),
    ("query-many-args", "GET", "/v1/studies/{A}/trials?" + "limit=1&" * 40, None, None, 400,
     {"invalid"}, NOCHECK),
    ("trials-cursor-blank", "GET", "/v1/studies/{A}/trials?cursor=%201", None, None, 400,
     {"invalid"}, "cursor"),
    ("path-id-nul", "GET", "/v1/studies/{A}%00/best", None, None, 404, {"not_found"}, ANY),
    ("trials-state-bad", "GET", "/v1/studies/{A}/trials?state=bogus", None, None, 400, {"invalid"}, "state"),
    ("export-format-bad", "GET", "/v1/studies/{A}/export?format=xml", None, None, 400, {"invalid"}, "format"),
    ("best-by-bad", "GET", "/v1/studies/{A}/best?by=mean", None, None, 400, {"invalid"}, "by"),
    ("best-by-twice", "GET", "/v1/studies/{A}/best?by=model&by=value", None, None, 400, {"invalid"},
     "by"),
    ("study-id-text", "GET", "/v1/studies/abc", None, None, (400, 404), {"invalid", "not_found"}, NOCHECK),
    ("trial-id-overflow", "POST", "/v1/studies/{A}/trials/99999999999999999999999/tell", {"value": 1}, None,
     (400, 404), {"invalid", "not_found"}, NOCHECK),
    ("tell-unknown-trial", "POST", "/v1/studies/{A}/trials/999999/tell", {"value": 1}, None, 404,
     {"not_found"}, NOCHECK),
    ("tell-trial-of-other-study", "POST", "/v1/studies/{B}/trials/{P}/tell", {"value": 1}, None, 404,
     {"not_found"}, NOCHECK),
    ("tell-expired-trial", "POST", "/v1/studies/{E}/trials/{X}/tell", {"value": 1}, None, 409,
     {"conflict"}, NOCHECK),
    ("heartbeat-expired-trial", "POST", "/v1/studies/{E}/trials/{X}/heartbeat", {}, None, 409,
     {"conflict"}, NOCHECK),
    ("fail-completed-trial", "POST", "/v1/studies/{A}/trials/{C}/fail", {}, None, 409, {"conflict"}, NOCHECK),
    ("tell-completed-other-value", "POST", "/v1/studies/{A}/trials/{C}/tell", {"value": 2.0}, None, 409,
     {"conflict"}, NOCHECK),
    ("ask-deleted-study", "POST", "/v1/studies/{D}/ask", {"worker": "w"}, None, 404, {"not_found"}, NOCHECK),
    ("tell-deleted-study", "POST", "/v1/studies/{D}/trials/{T}/tell", {"value": 1}, None, 404,
     {"not_found"}, NOCHECK),
    ("get-deleted-study", "GET", "/v1/studies/{D}", None, None, 404, {"not_found"}, NOCHECK),
]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = Daemon(tmp_path_factory.mktemp("bad-input"), args=["--sweep-ms", "100"])
    d.start()
    api = d.client()
    a = create_study(api, "A", space={"type": "candidates", "candidates": grid(20, 2)})["id"]
    c = ask(api, a)["trials"][0]["id"]
    tell(api, a, c, 1.0)
    p = ask(api, a)["trials"][0]["id"]
    b = create_study(api, "B", space={"type": "box", "params": [
        {"name": "u", "type": "float", "low": 0, "high": 1}]})["id"]
    e = create_study(api, "E", lease_seconds=1)["id"]
    x = ask(api, e)["trials"][0]["id"]
    dd = create_study(api, "D")["id"]
    t = ask(api, dd)["trials"][0]["id"]
    assert api.delete(f"/v1/studies/{dd}").status_code == 204
    deadline = time.monotonic() + 15
    while api.get(f"/v1/studies/{e}/trials/{x}").json()["state"] != "expired":
        assert time.monotonic() < deadline, "trial with a 1 s lease never expired"
        time.sleep(0.1)
    ids = {"A": a, "B": b, "C": c, "P": p, "E": e, "X": x, "D": dd, "T": t}
    yield d, api, ids
    shutdown_and_check([d])


def field_ok(actual, expected):
    if expected is NOCHECK:
        return True
    if expected is ANY:
        return isinstance(actual, str) and actual != ""
    return isinstance(actual, str) and (actual == expected or actual.startswith(expected + ".")
                                        or actual.startswith(expected + "["))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(env, case):
    d, api, ids = env
    name, method, path, body, ctype, status, codes, field = case
    path = path.format(**ids)
    if body == "GARBAGE":
        data = os.urandom(10 * 1024 * 1024)
    elif isinstance(body, bytes):
        data = body
    elif body is None:
        data = None
    else:
        data = json.dumps(fill(body, ids)).encode()
    headers = {"Content-Type": ctype or "application/json"} if data is not None else {}
    before = db_dump(d.db)
    r = api.request(method, path, data=data, headers=headers)
    statuses = status if isinstance(status, tuple) else (status,)
    assert r.status_code in statuses, f"{name}: {r.status_code} {r.text[:300]}"
    err = error_of(r)
    assert err["code"] in codes, f"{name}: code {err['code']!r}, expected one of {codes}"
    if err["code"] not in ("invalid_json", "not_found", "conflict", "payload_too_large"):
        assert field_ok(err["field"], field), f"{name}: field {err['field']!r}, expected {field!r}"
    assert db_dump(d.db) == before, f"{name}: the database changed"
    assert d.running and api.get("/healthz").status_code == 200, f"{name}: daemon down"
