"""This file contains Client, the entry point of the kbandit Python client: the daemon's
address and token, studies (create, get by id or name, get-or-create, list by name or
state, delete), candidate sets, and the error mapping of every call."""
import os
import socket
import threading

from . import space as _space
from .errors import Conflict, NotFound, error_from_response
from .study import Study
from .transport import Transport

DEFAULT_URL = "http://127.0.0.1:8080"
PAGE = 1000  # studies per list request (the API's maximum)


class Client:
    """A connection to one kbanditd. url and token default to $KB_URL and $KB_TOKEN
    (then http://127.0.0.1:8080, no token). Each thread (and each process) uses its own
    keep-alive connection, so one Client can be shared by worker threads.

    timeout: seconds for connecting and for each answer (a long-poll ask adds its wait);
    retries: further attempts after a connection failure or a 503 (see transport.py; the
    default 9 waits about 16-33 s in all, longer than a daemon's restart);
    worker: the name trials are handed out to (default host-pid[-thread])."""

    def __init__(self, url=None, token=None, *, timeout=30.0, retries=9, worker=None):
        self.url = (url or os.environ.get("KB_URL") or DEFAULT_URL).rstrip("/")
        token = token if token is not None else os.environ.get("KB_TOKEN")
        # a token read from a file or a secret often ends in a newline, which no header
        # may hold (the daemon strips its own token file the same way)
        self.token = token.strip() or None if token else None
        self.timeout = timeout
        self.retries = retries
        self._worker = worker
        self._http = Transport(self.url, self.token, timeout, retries)
        self.asks_have_request_id = True  # False once a daemon refused the field (older)

    def config(self):
        """The constructor arguments, to build an equal Client in another process."""
        return {"url": self.url, "token": self.token, "timeout": self.timeout,
                "retries": self.retries, "worker": self._worker}

    @property
    def worker(self):
        if self._worker:
            return self._worker
        name = f"{socket.gethostname()}-{os.getpid()}"
        thread = threading.current_thread()
        return name if thread is threading.main_thread() else f"{name}-{thread.name}"

    def close(self):
        """Closes the calling thread's connection (a later call reopens one)."""
        self._http.close()

    def health(self):
        """GET /healthz: {"status": "ok", "version": ...}."""
        return self._call("GET", "/healthz").json()

    # ------------------------------------------------------------------ studies

    def create_study(self, name=None, params=None, candidates=None, *, candidate_set=None,
                     direction="maximize", engine=None, settings=None, lease_seconds=None,
                     max_trials=None, spec=None):
        """Creates a study and returns it (Conflict when the name is taken).

        The space is one of: params (box: see space.box_space, e.g. {"lr": (1e-5, 1.0,
        "log"), "layers": (1, 8), "opt": ["adam", "sgd"]}), candidates (rows, a numpy
        array, or a CSV file path, uploaded as a candidate set keeping its column names)
        or candidate_set (an uploaded set's id). engine is an engine name (server
        default bbkb) with its settings dict. spec is a complete API body instead
        (StudyCreate of openapi.yaml); name, when given, overrides its name."""
        body = dict(spec) if spec is not None else self._study_body(
            params, candidates, candidate_set, direction, engine, settings, lease_seconds,
            max_trials)
        if name is not None:
            body["name"] = name
        return Study(self, self._call("POST", "/v1/studies", body).json())

    def _study_body(self, params, candidates, candidate_set, direction, engine, settings,
                    lease_seconds, max_trials):
        body = {"direction": direction, "space": self._space(params, candidates, candidate_set)}
        if engine is not None or settings:
            body["engine"] = {"name": engine or "bbkb", "settings": dict(settings or {})}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        if max_trials is not None:
            body["max_trials"] = max_trials
        return body

    def _space(self, params, candidates, candidate_set):
        given = [x is not None for x in (params, candidates, candidate_set)]
        if sum(given) != 1:
            raise ValueError("give exactly one of params, candidates, candidate_set")
        if params is not None:
            return _space.box_space(params)
        if candidates is not None and _space.is_path(candidates):
            candidate_set = self.upload_candidates(candidates)["id"]
        if candidate_set is not None:
            return {"type": "candidates", "candidate_set": int(candidate_set)}
        return {"type": "candidates", "candidates": _space.candidate_rows(candidates)}

    def get_study(self, study_id):
        """The study with this id (NotFound otherwise)."""
        return Study(self, self._call("GET", f"/v1/studies/{int(study_id)}").json())

    def find_study(self, name):
        """The live study with this name, or None. A listing shows a study not restored
        yet after a start without its progress: such a study is fetched by id, which
        restores it."""
        found = next((s for s in self.studies(name=name) if s.name == name), None)
        return self.get_study(found.id) if found is not None and found.progress is None else found

    def study(self, ref):
        """A study by id (an int) or by name (a str); NotFound when there is none."""
        if isinstance(ref, int):
            return self.get_study(ref)
        found = self.find_study(ref)
        if found is None:
            raise NotFound(404, "not_found", f"no study named {ref!r}")
        return found

    def get_or_create_study(self, name, **kw):
        """The live study named `name` as it is, or else a new one created with
        create_study(name, **kw); safe when several workers race to create it."""
        found = self.find_study(name)
        if found is not None:
            return found
        try:
            return self.create_study(name, **kw)
        except Conflict:
            found = self.find_study(name)  # another worker created it first
            if found is None:
                raise
            return found

    def studies(self, name=None, state=None):
        """Every live study, by id (paging through the API's cursor), only the one named
        `name` and only those in `state` ("active", "paused", "completed") when given.
        The filters are applied here too, for daemons that cannot filter themselves (one
        without states has only active studies)."""
        out, cursor = [], None
        while True:
            page = self._call("GET", "/v1/studies", params={
                "limit": PAGE, "cursor": cursor, "name": name, "state": state}).json()
            out += [Study(self, s) for s in page["studies"]
                    if name in (None, s["name"]) and state in (None, s.get("state", "active"))]
            cursor = page["next_cursor"]
            if cursor is None:
                return out

    def delete_study(self, ref):
        """Deletes a study (an id, a name or a Study)."""
        (ref if isinstance(ref, Study) else self.study(ref)).delete()

    # ------------------------------------------------------------------ candidate sets

    def upload_candidates(self, candidates, names=None):
        """Uploads a candidate set (rows, a numpy array, or a CSV file path whose header
        gives the names); returns {"id", "rows", "dim", "names"}."""
        if _space.is_path(candidates):
            rows, file_names = _space.read_csv(candidates)
            names = names or file_names
        else:
            rows = _space.candidate_rows(candidates)
        body = {"rows": rows} if names is None else {"rows": rows, "names": list(names)}
        return self._call("POST", "/v1/candidate-sets", body).json()

    def candidate_set(self, set_id):
        """An uploaded candidate set's shape and names."""
        return self._call("GET", f"/v1/candidate-sets/{int(set_id)}").json()

    def engines(self):
        """The daemon's engine catalogue: {"default", "common_options", "engines": [{"name",
        "summary", "max_dim", "options"}]}, each option with its type, default, range,
        choices and description (what create_study's settings are checked against)."""
        return self._call("GET", "/v1/engines").json()

    # ------------------------------------------------------------------ plumbing

    def _call(self, method, path, body=None, *, allow=(), **kw):
        """One request; an error status not in `allow` raises its KbanditError."""
        resp = self._http.request(method, path, body, **kw)
        if resp.status >= 400 and resp.status not in allow:
            raise error_from_response(resp.status, resp.reason, resp.body)
        return resp

    def __repr__(self):
        return f"Client({self.url!r})"

