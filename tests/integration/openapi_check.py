"""This file contains the OpenAPI response validator used as a requests response hook.

The contract is openapi.yaml at the repository root (or $KB_OPENAPI). OpenAPI 3.1 schemas
are JSON Schema 2020-12, so each response schema is validated with jsonschema's
Draft202012Validator against a root document that carries the spec's components, which
makes the spec's own "#/components/..." references resolve unchanged.

Rules, for every response seen:
  - the request path matches a path template of the spec (else only 404 is allowed);
  - the method is an operation of that path (else only 405 is allowed);
  - the status is documented for the operation (exact, "4XX"-style range, or default);
  - documented response headers, when present (or when marked required), match their schema;
  - the Content-Type is one the response documents, and a JSON body validates against
    its schema; a response documented without content has an empty body;
  - every error (>= 400) JSON body has the {"error": {"code","message","field"}} shape;
  - HEAD has no body: its status and headers are checked against the path's head
    operation or, by the spec's convention that every GET answers HEAD, its get.
Violations raise AssertionError from the hook, which fails the request's caller.
"""
import os
import re
import threading
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from jsonschema import Draft202012Validator

REPO = Path(__file__).resolve().parents[2]
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")

ERROR_SHAPE = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["code", "message", "field"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"},
                       "field": {"type": ["string", "null"]}}}},
}


def spec_path():
    return Path(os.environ.get("KB_OPENAPI", REPO / "openapi.yaml"))


_spec = None
_spec_lock = threading.Lock()


def load_spec():
    """The parsed spec as an OpenAPI object, or None when openapi.yaml does not exist."""
    global _spec
    with _spec_lock:
        if _spec is None:
            p = spec_path()
            _spec = OpenAPI(yaml.safe_load(p.read_text())) if p.is_file() else False
        return _spec or None


def _status_key(responses, status):
    """The key of responses that documents status (exact, "4XX" range, default), or None."""
    return next((k for k in (str(status), f"{status // 100}XX", f"{status // 100}xx", "default")
                 if k in responses), None)


def _pointer(*parts):
    return "#/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


class OpenAPI:
    def __init__(self, doc):
        self.doc = doc
        self.routes = []
        for template, item in (doc.get("paths") or {}).items():
            rx = "^" + re.sub(r"\\\{[^}/]+\\\}", "[^/]+", re.escape(template)) + "$"
            literal = len(re.sub(r"\{[^}]*\}", "", template))
            self.routes.append((literal, template, re.compile(rx)))
        self.routes.sort(key=lambda r: -r[0])  # literal segments win over parameters
        self._validators = {}
        self._lock = threading.Lock()
        self.seen = set()  # (method, template, status) actually exercised

    # --------------------------------------------------------------- resolution
    def resolve(self, obj):
        while isinstance(obj, dict) and "$ref" in obj:
            ref = obj["$ref"]
            assert ref.startswith("#/"), f"external $ref not supported: {ref}"
            node = self.doc
            for part in ref[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
            obj = node
        return obj

    def validator(self, pointer):
        with self._lock:
            v = self._validators.get(pointer)
            if v is None:
                root = {"$schema": "https://json-schema.org/draft/2020-12/schema",
                        "$ref": pointer,
                        "components": self.doc.get("components", {}),
                        "paths": self.doc.get("paths", {})}
                v = self._validators[pointer] = Draft202012Validator(root)
            return v

    def match(self, path):
        for _, template, rx in self.routes:
            if rx.match(path):
                return template
        return None

    def error_schema_pointer(self):
        schemas = self.doc.get("components", {}).get("schemas", {})
        for name in ("Error", "ErrorResponse", "ErrorBody"):
            if name in schemas:
                return _pointer("components", "schemas", name)
        return None

    # ------------------------------------------------------------------- checks
    def check(self, resp):
        """Problems with resp (a list of strings; empty when it conforms)."""
        req = resp.request
        path = urlsplit(req.url).path
        method = req.method.lower()
        status = resp.status_code
        ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        where = f"{req.method} {path} -> {status}"
        if method == "head":
            return self._check_head(where, path, status, resp)
        problems = []
        body = None
        if ctype == "application/json" and resp.content:
            try:
                body = resp.json()
            except ValueError:
                return [f"{where}: Content-Type application/json but body is not JSON: "
                        f"{resp.text[:200]!r}"]
        if status >= 400:
            if body is None:
                problems.append(f"{where}: error response is not JSON ({ctype!r})")
            else:
                errs = list(Draft202012Validator(ERROR_SHAPE).iter_errors(body))
                problems += [f"{where}: error shape: {e.message}" for e in errs[:3]]

        template = self.match(path)
        if template is None:
            if status != 404:
                problems.append(f"{where}: path not in openapi.yaml")
            return problems + self._check_error_schema(where, body)
        item = self.resolve(self.doc["paths"][template])
        op = item.get(method)
        if op is None:
            if status not in (404, 405):
                problems.append(f"{where}: method not in openapi.yaml for {template}")
            with self._lock:  # a 405 exercises the path's documented 405 responses
                self.seen |= {(m, template, str(status)) for m, o in item.items()
                              if isinstance(o, dict) and str(status) in map(str, o.get("responses", {}))}
            return problems + self._check_error_schema(where, body)
        responses = op.get("responses", {})
        key = _status_key(responses, status)
        if key is None:
            problems.append(f"{where}: status {status} not documented for "
                            f"{method.upper()} {template} (documented: {sorted(responses)})")
            return problems
        with self._lock:
            self.seen.add((method, template, key))
        robj = self.resolve(responses[key])
        problems += self._check_headers(where, resp, robj)
        content = robj.get("content")
        if not content:
            if resp.content:
                problems.append(f"{where}: documented without a body, got {resp.text[:100]!r}")
            return problems
        media = next((m for m in content if m.split(";")[0].strip().lower() == ctype), None)
        if media is None:
            problems.append(f"{where}: Content-Type {ctype!r} not documented "
                            f"(documented: {sorted(content)})")
            return problems
        if ctype != "application/json" or "schema" not in content[media]:
            return problems
        pointer = self._schema_pointer(template, method, key, media, responses[key])
        errs = sorted(self.validator(pointer).iter_errors(body), key=lambda e: e.path)
        problems += [f"{where}: schema: {'/'.join(map(str, e.absolute_path))}: {e.message}"
                     for e in errs[:5]]
        return problems

    def _check_head(self, where, path, status, resp):
        problems = [f"{where}: HEAD answered with a body"] if resp.content else []
        template = self.match(path)
        if template is None:
            return problems + ([] if status == 404 else [f"{where}: path not in openapi.yaml"])
        item = self.resolve(self.doc["paths"][template])
        method = "head" if "head" in item else "get"
        op = item.get(method)
        if op is None:
            return problems + ([] if status in (404, 405) else [f"{where}: no GET for {template}"])
        key = _status_key(op.get("responses", {}), status)
        if key is None:
            return problems + [f"{where}: status {status} not documented for "
                               f"{method.upper()} {template}"]
        if method == "head":
            with self._lock:
                self.seen.add((method, template, key))
        return problems + self._check_headers(where, resp, self.resolve(op["responses"][key]))

    def _check_headers(self, where, resp, robj):
        """Documented headers: required ones must be present; present ones must match
        their schema (integers are parsed from the header text)."""
        problems = []
        for name, h in (robj.get("headers") or {}).items():
            h = self.resolve(h)
            value = resp.headers.get(name)
            if value is None:
                if h.get("required"):
                    problems.append(f"{where}: required header {name} missing")
                continue
            schema = self.resolve(h.get("schema", {}))
            if schema.get("type") == "integer":
                try:
                    value = int(value)
                except ValueError:
                    problems.append(f"{where}: header {name}: {value!r} is not an integer")
                    continue
            problems += [f"{where}: header {name}: {e.message}"
                         for e in Draft202012Validator(schema).iter_errors(value)]
        return problems

    def _schema_pointer(self, template, method, key, media, robj):
        if isinstance(robj, dict) and "$ref" in robj:
            # A shared response object: follow the ref (one level, as the spec writes it).
            return robj["$ref"] + "/" + "/".join(
                p.replace("~", "~0").replace("/", "~1") for p in ("content", media, "schema"))
        return _pointer("paths", template, method, "responses", key, "content", media, "schema")

    def _check_error_schema(self, where, body):
        pointer = self.error_schema_pointer()
        if pointer is None or body is None:
            return []
        return [f"{where}: error schema: {e.message}"
                for e in list(self.validator(pointer).iter_errors(body))[:3]]

    def hook(self, resp, *args, **kwargs):
        problems = self.check(resp)
        if problems:
            raise AssertionError("response does not match openapi.yaml:\n  "
                                 + "\n  ".join(problems))
        return resp
