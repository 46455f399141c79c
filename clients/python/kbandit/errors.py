"""This file contains the exceptions of the kbandit client.

Every error the daemon answers is JSON {"error": {"code", "message", "field"}}; it becomes
a KbanditError subclass chosen by HTTP status, carrying .status, .code, .message and
.field. A daemon that cannot be reached raises ConnectionFailed (status None).
"""
import json


class KbanditError(Exception):
    """An error answered by the daemon (or, for ConnectionFailed, no answer at all)."""

    def __init__(self, status, code, message, field=None):
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        super().__init__(str(self))

    def __str__(self):
        where = f" (field {self.field})" if self.field else ""
        prefix = f"{self.status} {self.code}" if self.status else self.code
        return f"{prefix}: {self.message}{where}"


class InvalidRequest(KbanditError):
    """400: the request was refused (invalid_json, invalid); .field names the culprit."""


class Unauthorized(KbanditError):
    """401: missing or wrong bearer token."""


class NotFound(KbanditError):
    """404: unknown study, trial or candidate set (or no completed trial yet)."""


class Conflict(KbanditError):
    """409: a study name in use, a trial no longer pending, a different value told."""


class ServerError(KbanditError):
    """500: the daemon failed (e.g. a database error); nothing was applied."""


class Unavailable(KbanditError):
    """503: the daemon is shutting down or its database write failed; retry later."""


class ConnectionFailed(KbanditError):
    """The daemon could not be reached, or the connection broke before an answer."""

    def __init__(self, message):
        super().__init__(None, "connection_failed", message)


class NoTrialAvailable(Exception):
    """No trial will come: the study is exhausted, reached its max_trials or is
    completed. .status is the ask status ("exhausted", "max_trials_reached" or
    "study_completed")."""

    def __init__(self, status):
        self.status = status
        super().__init__(f"no trial available: {status}")


_BY_STATUS = {400: InvalidRequest, 401: Unauthorized, 404: NotFound, 409: Conflict,
              500: ServerError, 503: Unavailable}


def error_from_json(status, err):
    """The exception for status and the daemon's {"code", "message", "field"} object."""
    cls = _BY_STATUS.get(status, KbanditError)
    return cls(status, err["code"], err["message"], err.get("field"))


def error_from_response(status, reason, body):
    """The exception for an HTTP error answer (status >= 400; body in bytes). A body
    that is not the daemon's JSON error (e.g. a proxy's page) keeps the reason phrase."""
    try:
        return error_from_json(status, json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode("utf-8", "replace").strip()
        return _BY_STATUS.get(status, KbanditError)(status, "http_error", text or reason)
