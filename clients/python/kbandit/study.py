"""This file contains Study: one study of the daemon and everything done on it -- asking
(with long-poll waits), telling (single and batch), failing, heartbeats, listings, the
best trial, warm-start observations, exports (JSON, CSV, pandas), its state (pause,
resume, complete) and optimize()."""
import io
import time
import uuid

from . import optimize as _optimize
from .errors import (InvalidRequest, NoTrialAvailable, NotFound, error_from_json,
                     error_from_response)
from .trial import AskResult, TellResult, Trial, TrialScope

MAX_WAIT_MS = 60000  # the daemon's longest long-poll (AskRequest.wait_ms)
WAITABLE = ("awaiting_feedback", "study_paused")  # empty answers feedback or a resume ends
BATCH_TELL_MAX = 10000  # items per batch tell request (TellBatchRequest.results)
PAGE = 1000


class Study:
    """A study. .data is the daemon's JSON for it as last fetched (refresh() updates it);
    the common fields are properties."""

    def __init__(self, client, data):
        self.client = client
        self.data = data
        self._names = None

    id = property(lambda self: self.data["id"])
    name = property(lambda self: self.data["name"])
    direction = property(lambda self: self.data["direction"])
    space = property(lambda self: self.data["space"])
    engine = property(lambda self: self.data["engine"])
    lease_seconds = property(lambda self: self.data["lease_seconds"])
    max_trials = property(lambda self: self.data["max_trials"])
    progress = property(lambda self: self.data["progress"])
    # "active", "paused" or "completed"; a daemon without states shows none: active
    state = property(lambda self: self.data.get("state", "active"))

    def refresh(self):
        """Fetches the study again (progress, best, engine state)."""
        self.data = self._call("GET", "").json()
        return self

    def param_names(self):
        """Names of the point's coordinates: box parameter names, the candidate set's
        column names, or x0, x1, ... for unnamed candidates (as the CSV export)."""
        if self._names is None:
            space = self.space
            if space["type"] == "box":
                self._names = [p["name"] for p in space["params"]]
            else:
                names = None
                if space.get("candidate_set"):
                    names = self.client.candidate_set(space["candidate_set"])["names"]
                self._names = names or [f"x{i}" for i in range(space["dim"])]
        return self._names

    # ------------------------------------------------------------------ asking

    def ask(self, count=1, wait=0.0, worker=None):
        """Asks for up to `count` trials. With wait > 0 (seconds) the daemon holds the
        request until a trial is available or the wait ends (longer waits than its 60 s
        limit are made of several asks). Returns an AskResult: a list of Trials, possibly
        empty, with .status ("ok", "awaiting_feedback", "exhausted",
        "max_trials_reached", "study_paused", "study_completed") and .retry_after. A
        paused study is waited for like a closed batch. An ask whose answer is lost is
        retried with the same request_id, so the daemon answers it with the trials the
        lost answer held (still pending) instead of handing out more."""
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            wait_ms = int(min(MAX_WAIT_MS, max(0.0, deadline - time.monotonic()) * 1000))
            body = {"worker": worker or self.client.worker, "count": count, "wait_ms": wait_ms,
                    "request_id": uuid.uuid4().hex}
            result = AskResult(self, self._ask_call(body, wait_ms))
            if result or result.status not in WAITABLE or time.monotonic() >= deadline:
                return result

    def _ask_call(self, body, wait_ms):
        """POST .../ask; a daemon older than request_id (400 naming it) is asked without
        it from then on."""
        if not self.client.asks_have_request_id:
            body.pop("request_id")
        timeout = self.client.timeout + wait_ms / 1000.0
        try:
            return self._call("POST", "/ask", body, replayable=True, timeout=timeout).json()
        except InvalidRequest as e:
            if "request_id" not in body or e.field != "request_id":
                raise
            self.client.asks_have_request_id = False
            body.pop("request_id")
            return self._call("POST", "/ask", body, replayable=True, timeout=timeout).json()

    def trial(self, wait=None, worker=None):
        """`with study.trial() as t: t.tell(f(t.params))` -- see TrialScope. Waits up to
        `wait` seconds (None: as long as it takes) for a trial, a paused study included;
        raises NoTrialAvailable when the study is exhausted, at max_trials or completed,
        TimeoutError when the wait ends."""
        return TrialScope(self, wait, worker)

    def _next_trial(self, wait, worker, stop=None, poll=5.0):
        """One trial, waiting in long-polls of `poll` seconds. None when `stop` (an
        Event) is set; NoTrialAvailable when no trial will come."""
        deadline = None if wait is None else time.monotonic() + wait
        while stop is None or not stop.is_set():
            left = poll if deadline is None else min(poll, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"study {self.id}: no trial within {wait} s")
            result = self.ask(1, left, worker)
            if result:
                return result[0]
            if self._finished(result.status):
                raise NoTrialAvailable(result.status)
        return None

    def _finished(self, status):
        """Whether an empty ask's status is final: max_trials_reached and study_completed
        always; exhausted when no pending trial may still expire or fail and free a
        candidate."""
        if status == "exhausted":
            return self.refresh().progress["trials"]["pending"] == 0
        return status in ("max_trials_reached", "study_completed")

    # ------------------------------------------------------------------ feedback

    def tell(self, trial, value):
        """Tells a trial's value (a Trial or a trial id); returns the completed Trial."""
        return Trial(self, self._post_trial(_trial_id(trial), "tell", {"value": float(value)}))

    def fail(self, trial, reason=None):
        """Marks a trial (a Trial or an id) failed; returns the failed Trial."""
        return Trial(self, self._fail(_trial_id(trial), reason))

    def tell_many(self, results):
        """Batch tell. `results`: (trial or id, value) pairs, or a dict {id: value}.
        Returns one TellResult per item, in order; an item's failure is its .error
        (a KbanditError), the others are applied all the same."""
        items = list(results.items() if isinstance(results, dict) else results)
        out = []
        for i in range(0, len(items), BATCH_TELL_MAX):
            chunk = [{"trial_id": _trial_id(t), "value": float(v)}
                     for t, v in items[i:i + BATCH_TELL_MAX]]
            body = self._call("POST", "/tell", {"results": chunk}, replayable=True).json()
            out += [self._tell_result(r) for r in body["results"]]
        return out

    def _tell_result(self, r):
        if r["status"] == 200:
            return TellResult(r["trial_id"], 200, Trial(self, r["trial"]), None)
        error = error_from_json(r["status"], r["error"])
        return TellResult(r["trial_id"], r["status"], None, error)

    def add_observations(self, observations):
        """Warm start: (point, value) pairs evaluated outside the study. A point is a dict
        of box parameters, or a sequence (candidates: coordinates; box: unit cube).
        Returns the number added. Not retried after a lost answer (not idempotent)."""
        items = [{"params": p, "value": v} if isinstance(p, dict) else {"x": list(p), "value": v}
                 for p, v in observations]
        return self._call("POST", "/observations", {"observations": items}).json()["added"]

    def _post_trial(self, trial_id, action, body):
        return self._call("POST", f"/trials/{trial_id}/{action}", body, replayable=True).json()

    def _fail(self, trial_id, reason):
        body = {} if reason is None else {"reason": reason}
        resp = self._call("POST", f"/trials/{trial_id}/fail", body, replayable=True, allow=(409,))
        if resp.status == 200:
            return resp.json()
        current = self._get_trial_data(trial_id)
        if current["state"] == "failed":
            return current  # failed before: by this call's lost first attempt, or earlier
        raise error_from_response(resp.status, resp.reason, resp.body)

    # ------------------------------------------------------------------ reading

    def get_trial(self, trial_id):
        return Trial(self, self._get_trial_data(trial_id))

    def _get_trial_data(self, trial_id):
        return self._call("GET", f"/trials/{trial_id}").json()

    def trials(self, state=None):
        """Every trial (of one state: pending, completed, failed, expired), by id."""
        out, cursor = [], None
        while True:
            page = self._call("GET", "/trials", params={"state": state, "limit": PAGE,
                                                       "cursor": cursor}).json()
            out += [Trial(self, t) for t in page["trials"]]
            cursor = page["next_cursor"]
            if cursor is None:
                return out

    def best(self, by="value"):
        """The best completed trial in the study's direction, or None before the first.
        by="model": the trial the engine's model rates best (the best posterior mean), the
        better pick for a noisy objective."""
        try:
            return Trial(self, self._call("GET", "/best", params={"by": by}).json())
        except NotFound:
            self.refresh()  # raises NotFound itself when the study is gone
            return None

    def export(self):
        """The JSON export: {"study": ..., "trials": [...], "observations": [...]} (the
        warm-start observations, in the order taken)."""
        return self._call("GET", "/export", params={"format": "json"}).json()

    def export_csv(self, dest=None):
        """The CSV export of the trials (id,state,worker,value,<param columns>; the
        warm-start observations are in the JSON export only). Written to `dest` (a
        path or a text file object) when given, else returned as a string."""
        text = self._call("GET", "/export", params={"format": "csv"}).body.decode("utf-8")
        if dest is None:
            return text
        if hasattr(dest, "write"):
            dest.write(text)
        else:
            with open(dest, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        return None

    def to_dataframe(self):
        """The trials as a pandas DataFrame (one column per parameter); needs pandas."""
        try:
            import pandas
        except ImportError as e:
            raise ImportError("Study.to_dataframe() needs pandas (pip install pandas, or "
                              "apt install python3-pandas)") from e
        return pandas.read_csv(io.StringIO(self.export_csv()))

    # ------------------------------------------------------------------ lifecycle

    def set_state(self, state):
        """Sets the study's state: "active" (asks hand out trials), "paused" (none until
        resumed) or "completed" (none for good: leaving it raises Conflict). Trials
        already handed out are told as usual in every state. Returns self, refreshed."""
        self.data = self._call("PATCH", "", {"state": state}, replayable=True).json()
        return self

    def pause(self):
        return self.set_state("paused")

    def resume(self):
        return self.set_state("active")

    def complete(self):
        return self.set_state("completed")

    def delete(self):
        """Deletes the study and all its data."""
        resp = self._call("DELETE", "", replayable=True, allow=(404,))
        if resp.status == 404 and not resp.replayed:
            raise error_from_response(resp.status, resp.reason, resp.body)

    def optimize(self, fn, n_trials, n_workers=1, processes=False, worker=None):
        """Runs fn(trial) -> value on trials of this study until exactly n_trials of them
        were told by this call, with n_workers threads (or processes, processes=True: fn
        must then be picklable, e.g. a module-level function). A trial whose lease expired
        before its tell does not count. fn raising fails its trial and stops every worker;
        the exception is re-raised (processes: as RuntimeError with the worker's
        traceback). Stops early when the study is exhausted, reaches max_trials or is
        completed; waits while it is paused.
        Returns the study's best trial (None if there is none)."""
        _optimize.run(self, fn, n_trials, n_workers, processes, worker)
        return self.best()

    def _call(self, method, suffix, body=None, **kw):
        return self.client._call(method, f"/v1/studies/{self.id}{suffix}", body, **kw)

    def __repr__(self):
        return f"Study(id={self.id}, name={self.name!r})"


def _trial_id(trial):
    return trial.id if isinstance(trial, Trial) else int(trial)

