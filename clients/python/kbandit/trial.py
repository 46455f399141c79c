"""This file contains the trial side of the client: Trial (one handed-out point, told or
failed through its study), AskResult (the trials of one ask with the ask's status),
TellResult (one item of a batch tell), and TrialScope, the `with study.trial() as t:`
context that heartbeats in a background thread and fails the trial on an exception."""
import threading
from collections import namedtuple

from .errors import Conflict, KbanditError


class Trial:
    """A trial of a study. .params maps parameter names to values (box studies: as the
    daemon maps them; candidate studies: the row by column name, x0.. when unnamed);
    .x is the raw point; .data is the daemon's JSON for it."""

    def __init__(self, study, data):
        self.study = study
        self.data = data
        self._lock = threading.Lock()  # tell/fail and the heartbeat thread update data

    id = property(lambda self: self.data["id"])
    state = property(lambda self: self.data["state"])
    value = property(lambda self: self.data["value"])
    x = property(lambda self: self.data["x"])
    worker = property(lambda self: self.data["worker"])
    candidate_index = property(lambda self: self.data["candidate_index"])
    reason = property(lambda self: self.data["reason"])
    lease_expires_at = property(lambda self: self.data["lease_expires_at"])

    @property
    def params(self):
        if self.data.get("params") is not None:
            return dict(self.data["params"])
        return dict(zip(self.study.param_names(), self.data["x"]))

    def tell(self, value):
        """Tells the trial's value (in the study's direction, as measured; any number
        float() accepts, numpy's included). Telling the same value again is harmless
        (exactly-once); a different one raises Conflict."""
        self._update(self.study._post_trial(self.id, "tell", {"value": float(value)}))
        return self

    def fail(self, reason=None):
        """Marks the trial failed: the engine forgets it. A trial already failed (e.g. by
        a retried request whose first answer was lost) is returned as it is."""
        self._update(self.study._fail(self.id, reason))
        return self

    def heartbeat(self):
        """Extends the lease by the study's lease_seconds; Conflict once not pending."""
        data = self.study._post_trial(self.id, "heartbeat", {})
        with self._lock:
            if self.data["state"] == "pending":
                self.data = data
        return self

    def refresh(self):
        self._update(self.study._get_trial_data(self.id))
        return self

    def _update(self, data):
        with self._lock:
            self.data = data

    def __repr__(self):
        return (f"Trial(study={self.study.id}, id={self.id}, state={self.state!r}, "
                f"params={self.params!r})")


class AskResult(list):
    """The trials of one ask (a list, possibly empty) with .status ("ok",
    "awaiting_feedback", "exhausted", "max_trials_reached", "study_paused",
    "study_completed"), .awaiting (pending trials
    whose feedback closes the wait) and .retry_after (seconds, or None)."""

    def __init__(self, study, body):
        super().__init__(Trial(study, t) for t in body["trials"])
        self.status = body["status"]
        self.awaiting = body["awaiting"]
        ms = body["retry_after_ms"]
        self.retry_after = None if ms is None else ms / 1000.0
        self.data = body


TellResult = namedtuple("TellResult", "trial_id status trial error")
TellResult.__doc__ = """One item of a batch tell: status 200 with the Trial, or an error
status with the KbanditError it stands for (trial is then None)."""


class TrialScope:
    """Context manager of study.trial(): asks one trial on entry, heartbeats it while the
    block runs (every third of the study's lease), and on exit fails it when the block
    raised (the exception propagates). A block that ends without telling or failing
    its trial is a bug: the trial is failed and RuntimeError raised."""

    def __init__(self, study, wait=None, worker=None, stop=None):
        self._study = study
        self._ask = (wait, worker, stop)
        self._beat = None
        self.trial = None

    def __enter__(self):
        self.trial = self._study._next_trial(*self._ask)
        if self.trial is None:  # the stop event was set while waiting
            raise _Stopped()
        self._beat = _Heartbeat(self.trial, max(0.05, self._study.lease_seconds / 3.0))
        self._beat.start()
        return self.trial

    def __exit__(self, exc_type, exc, tb):
        self._beat.stop()
        if self.trial.state != "pending":
            return False
        reason = "the with block ended without a tell" if exc_type is None else \
            f"{exc_type.__name__}: {exc}"
        try:
            self.trial.fail(reason[:2000])
        except KbanditError:
            if exc_type is None:
                raise
            # The block's own exception matters more; the lease frees the trial anyway.
        if exc_type is None:
            raise RuntimeError(f"trial {self.trial.id} was neither told nor failed in its "
                               "with block (it has been failed)")
        return False


class _Stopped(Exception):
    """Raised by TrialScope when its stop event ends the wait for a trial (optimize)."""


class _Heartbeat(threading.Thread):
    """Heartbeats one trial until stopped or the trial is no longer pending. Transient
    errors are retried by the transport; what remains is kept in .error and the beat
    goes on (the next one may succeed before the lease ends)."""

    def __init__(self, trial, interval):
        super().__init__(name=f"kbandit-heartbeat-{trial.id}", daemon=True)
        self.trial = trial
        self.interval = interval
        self.error = None
        self._stopped = threading.Event()

    def run(self):
        while not self._stopped.wait(self.interval):
            try:
                self.trial.heartbeat()
            except Conflict:
                return  # told, failed or expired: nothing left to keep alive
            except KbanditError as e:
                self.error = e

    def stop(self):
        self._stopped.set()
        self.join()
