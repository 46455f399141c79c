"""This file contains a seeded mutation test of the request bodies: valid bodies of every
body route are mutated (keys dropped or added, values replaced by other types, huge or
non-finite numbers, bytes truncated, flipped or inserted) and sent to one daemon.

Every answer must be a documented status (the OpenAPI hook checks the schema), never a
5xx; a rejected request (4xx) must leave the database unchanged; the daemon stays up and
the database passes integrity_check at the end. KB_MUTATIONS sets the count (default 400).
"""
import copy
import json
import os
import random

import pytest

from conftest import ask, create_study, db_dump, db_integrity, grid

N = int(os.environ.get("KB_MUTATIONS", 400))
OK = {200, 201, 204, 400, 404, 409, 413, 415}

ODD_VALUES = [None, True, False, 0, -1, 1.5, 2 ** 63, -2 ** 63 - 1, 10 ** 30, 1e308, -1e-320, "",
              "x" * 300, "ü\u0000\ud7ff", [], [1, 2], [[1]], {}, {"a": 1}, "NaN", 3]
RAW_ODD = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-0", b"1e-400", b"0x10", b"01", b"1.",
           b'"\\ud800"', b'"\\u0000"', b"[" * 50, b"{}" * 3, b"nul", b"tru"]


def odd(rng):
    return copy.deepcopy(rng.choice(ODD_VALUES))  # never share (and then grow) a constant


def templates(ids):
    return [
        ("POST", "/v1/studies", {"name": "m", "direction": "minimize",
                                 "space": {"type": "box", "params": [
                                     {"name": "a", "type": "float", "low": 0.001, "high": 1, "log": True},
                                     {"name": "b", "type": "int", "low": 1, "high": 5},
                                     {"name": "c", "type": "categorical", "choices": ["x", "y"]}]},
                                 "engine": {"name": "random", "settings": {"seed": 1, "pool_size": 32}},
                                 "lease_seconds": 60, "max_trials": 10}),
        ("POST", "/v1/studies", {"name": "n", "space": {"type": "candidates", "candidates": [[1, 2], [3, 4]]},
                                 "engine": {"name": "random", "settings": {"repeats": "no_pending"}}}),
        ("POST", "/v1/candidate-sets", {"rows": [[1, 2], [3, 4]], "names": ["p", "q"]}),
        ("POST", f"/v1/studies/{ids['A']}/ask", {"worker": "w", "count": 2, "wait_ms": 0}),
        ("POST", f"/v1/studies/{ids['A']}/trials/{ids['P']}/tell", {"value": 0.5}),
        ("POST", f"/v1/studies/{ids['A']}/tell", {"results": [{"trial_id": ids["P"], "value": 0.5}]}),
        ("POST", f"/v1/studies/{ids['A']}/trials/{ids['P']}/fail", {"reason": "r"}),
        ("POST", f"/v1/studies/{ids['A']}/trials/{ids['P']}/heartbeat", {}),
        ("POST", f"/v1/studies/{ids['A']}/observations", {"observations": [{"x": [1.0, 2.0], "value": 1.0}]}),
    ]


def paths(node, prefix=()):
    """Every (container, key) location inside a JSON value."""
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            out.append((node, k))
            out += paths(v)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.append((node, i))
            out += paths(v)
    return out


def mutate(rng, body):
    body = copy.deepcopy(body)
    for _ in range(rng.randint(1, 3)):
        locs = paths(body)
        op = rng.randrange(4)
        if not locs or op == 0:
            target = rng.choice([body] + [c for c, _ in locs]) if locs else body
            if isinstance(target, dict):
                target[rng.choice(["zz", "name", "value", "extra", "params", "x"])] = odd(rng)
            elif isinstance(target, list):
                target.append(odd(rng))
        elif op == 1:
            c, k = rng.choice(locs)
            del c[k]
        else:
            c, k = rng.choice(locs)
            c[k] = odd(rng)
    raw = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    r = rng.random()
    if r < 0.15:
        raw = raw[:rng.randrange(len(raw) + 1)]
    elif r < 0.3:
        i = rng.randrange(len(raw))
        raw = raw[:i] + bytes([rng.randrange(256)]) + raw[i + 1:]
    elif r < 0.45:
        # A raw token that JSON encoders never produce, spliced in place of a number.
        text = raw.decode("utf-8", "replace")
        nums = [m for m in range(len(text)) if text[m].isdigit() and text[m - 1] in ":[, "]
        if nums:
            i = rng.choice(nums)
            j = i
            while j < len(text) and (text[j].isdigit() or text[j] in ".e-+"):
                j += 1
            raw = text[:i].encode() + rng.choice(RAW_ODD) + text[j:].encode()
    return raw


@pytest.fixture
def env(daemon):
    api = daemon.client()
    a = create_study(api, "A", space={"type": "candidates", "candidates": grid(12, 2)})["id"]
    p = ask(api, a)["trials"][0]["id"]
    return daemon, api, {"A": a, "P": p}


def test_mutated_bodies(env):
    d, api, ids = env
    rng = random.Random(int(os.environ.get("KB_MUTATION_SEED", 20261121)))
    tpls = templates(ids)
    seen = {}
    for i in range(N):
        method, path, body = rng.choice(tpls)
        raw = mutate(rng, body)
        before = db_dump(d.db)
        r = api.request(method, path, data=raw, headers={"Content-Type": "application/json"})
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        assert r.status_code in OK, f"#{i} {method} {path} {raw[:300]!r} -> {r.status_code} {r.text[:300]}"
        if r.status_code >= 400:
            assert db_dump(d.db) == before, f"#{i} {path} {raw[:300]!r}: rejected but the database changed"
    assert d.running and api.get("/healthz").status_code == 200
    assert db_integrity(d.db) == [("ok",)]
    assert seen.get(400, 0) > N // 4, seen  # the mutations mostly hit validation
