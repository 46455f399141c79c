"""This file contains the checks of openapi.yaml itself (the daemon's responses are
checked against it by the response hook in conftest.py).

Pure Python: the document is OpenAPI 3.1, every route of ROUTES (the API of README.md) is present,
every schema is a valid JSON Schema 2020-12 schema, and every local $ref resolves.
The Redocly linter (installed by scripts/install-deps) must accept it.
"""
import shutil
import subprocess

import pytest
from jsonschema import Draft202012Validator

from openapi_check import METHODS, load_spec, spec_path


ROUTES = [
    ("get", "/healthz"), ("get", "/metrics"),
    ("post", "/v1/candidate-sets"), ("get", "/v1/candidate-sets/{}"),
    ("post", "/v1/studies"), ("get", "/v1/studies"),
    ("get", "/v1/studies/{}"), ("patch", "/v1/studies/{}"), ("delete", "/v1/studies/{}"),
    ("post", "/v1/studies/{}/ask"), ("post", "/v1/studies/{}/tell"),
    ("post", "/v1/studies/{}/trials/{}/tell"), ("post", "/v1/studies/{}/trials/{}/fail"),
    ("post", "/v1/studies/{}/trials/{}/heartbeat"),
    ("get", "/v1/studies/{}/trials"), ("get", "/v1/studies/{}/trials/{}"),
    ("get", "/v1/studies/{}/best"), ("post", "/v1/studies/{}/observations"),
    ("get", "/v1/studies/{}/export"),
]


@pytest.fixture(scope="module")
def spec():
    s = load_spec()
    assert s is not None, f"{spec_path()} not found"
    return s


def walk(node, path=()):
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from walk(v, path + (i,))


def test_openapi_version_and_routes(spec):
    doc = spec.doc
    assert str(doc.get("openapi", "")).startswith("3.1"), doc.get("openapi")
    assert doc.get("info", {}).get("title") and doc["info"].get("version")
    normalized = {}
    for template, item in doc["paths"].items():
        key = "/".join("{}" if seg.startswith("{") else seg for seg in template.split("/"))
        normalized[key] = {m for m in item if m in METHODS}
    missing = [(m, p) for m, p in ROUTES if m not in normalized.get(p, set())]
    assert not missing, f"routes missing from openapi.yaml: {missing}"


def test_openapi_refs_resolve(spec):
    bad = []
    for path, node in walk(spec.doc):
        ref = node.get("$ref")
        if isinstance(ref, str):
            try:
                spec.resolve({"$ref": ref})
            except (KeyError, IndexError, TypeError, AssertionError) as e:
                bad.append(f"{'/'.join(map(str, path))}: {ref} ({e!r})")
    assert not bad, bad


def test_openapi_schemas_are_json_schema_2020_12(spec):
    bad = []
    for name, schema in spec.doc.get("components", {}).get("schemas", {}).items():
        try:
            Draft202012Validator.check_schema(schema)
        except Exception as e:  # noqa: BLE001
            bad.append(f"{name}: {e}")
    for template, item in spec.doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            assert op.get("responses"), f"{method} {template}: no responses"
            for status, resp in op["responses"].items():
                for media, m in (spec.resolve(resp).get("content") or {}).items():
                    if "schema" in m:
                        try:
                            Draft202012Validator.check_schema(m["schema"])
                        except Exception as e:  # noqa: BLE001
                            bad.append(f"{method} {template} {status} {media}: {e}")
    assert not bad, bad


def test_openapi_examples_fit_their_schemas(spec):
    """Each example of a component schema and of a response validates against its own
    schema (the Study example lacked progress.hyperparameters, which Progress requires)."""
    bad, checked = [], 0
    for name, schema in spec.doc["components"]["schemas"].items():
        if "example" in schema:
            checked += 1
            v = spec.validator(f"#/components/schemas/{name}")
            bad += [f"{name}: {e.message}" for e in v.iter_errors(schema["example"])]
    for name, resp in spec.doc["components"].get("responses", {}).items():
        for media, m in (resp.get("content") or {}).items():
            if "example" in m and "schema" in m:
                checked += 1
                v = spec.validator(f"#/components/responses/{name}/content/"
                                   f"{media.replace('/', '~1')}/schema")
                bad += [f"{name} {media}: {e.message}" for e in v.iter_errors(m["example"])]
    assert checked >= 5 and not bad, (checked, bad)


def test_openapi_documents_error_statuses(spec):
    """Every body route documents 400 and 415, every /v1 route 401 (the suite exercises
    them all; the hook would fail on an undocumented status anyway, this says it early)."""
    missing = []
    for template, item in spec.doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            codes = set(map(str, op.get("responses", {})))
            need = set()
            if template.startswith("/v1"):
                need.add("401")
            if method == "post":
                need |= {"400", "415"}
            if "{" in template:
                need.add("404")
            if "default" not in codes and "4XX" not in codes:
                missing += [f"{method} {template}: {c}" for c in sorted(need - codes)]
    assert not missing, missing


def test_redocly_lint(spec):
    redocly = shutil.which("redocly")
    assert redocly, "redocly not found: scripts/install-deps installs @redocly/cli"
    r = subprocess.run([redocly, "lint", str(spec_path())], capture_output=True, text=True,
                       timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
