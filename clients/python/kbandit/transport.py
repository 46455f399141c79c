"""This file contains the HTTP transport of the kbandit client: one keep-alive
http.client connection per thread (and per process, so forked workers never share a
socket), bearer authentication, timeouts, and bounded retries with exponential backoff.

What is retried, and why it is safe:
  - a connection that could not be opened: the request never left;
  - 503 (shutting down, database write failed): the daemon applied nothing; its
    Retry-After is honoured;
  - a connection that broke after the request was sent (reset, no answer, read timeout):
    only for requests marked replayable, whose repetition the daemon makes harmless
    (GET, DELETE, tell and batch tell are exactly-once, heartbeat and fail are
    idempotent). Response.replayed tells the caller an earlier attempt may have been
    applied, so a 404 after a DELETE or a 409 after a fail can be read as success.
"""
import http.client
import json
import os
import random
import select
import ssl
import threading
import time
from urllib.parse import urlencode, urlsplit

from ._version import __version__
from .errors import ConnectionFailed

USER_AGENT = f"kbandit-python/{__version__}"
MAX_RETRY_AFTER = 60.0  # seconds: a longer Retry-After is capped, not obeyed blindly


class Response:
    """One HTTP answer: status, reason, headers (a message object), body (bytes), and
    replayed (True when an earlier attempt was sent and its answer lost)."""

    def __init__(self, status, reason, headers, body, replayed):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.replayed = replayed

    def json(self):
        return json.loads(self.body) if self.body else None


class _NotSent(Exception):
    """The connection could not be opened: the request certainly did not arrive."""


class Transport:
    """Sends requests to one daemon; safe to share between threads."""

    def __init__(self, url, token=None, timeout=30.0, retries=9, backoff=0.1, max_backoff=10.0):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"bad daemon URL {url!r}: expected http[s]://host[:port]")
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")  # a daemon behind a reverse proxy's path
        self._token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._local = threading.local()

    def request(self, method, path, body=None, *, params=None, content_type="application/json",
                replayable=False, timeout=None):
        """Sends one request (body: bytes, or an object sent as JSON) and returns its
        Response, error statuses included. Raises ConnectionFailed when the daemon stays
        unreachable, or when the connection broke after a non-replayable request was sent."""
        target = self._prefix + path
        if params:
            target += "?" + urlencode({k: v for k, v in params.items() if v is not None})
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body, allow_nan=False).encode()
        headers = self._headers(body, content_type)
        replayed = False
        failure = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, failure))
            try:
                resp = self._once(method, target, body, headers, timeout or self.timeout)
            except _NotSent as e:
                failure = e.__cause__
                continue
            except (OSError, http.client.HTTPException) as e:
                if not replayable:
                    raise ConnectionFailed(
                        f"{method} {path}: connection lost after the request was sent ({e!r}); "
                        "it may have been applied") from e
                failure, replayed = e, True
                continue
            resp.replayed = replayed
            if resp.status != 503 or attempt == self.retries:
                return resp
            failure = resp
        raise ConnectionFailed(f"{method} {path}: cannot reach {self.url}: {failure!r}")

    def close(self):
        """Closes this thread's connection (others close when their thread ends)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _headers(self, body, content_type):
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if body is not None:
            headers["Content-Type"] = content_type
        return headers

    def _once(self, method, target, body, headers, timeout):
        conn = self._connection(timeout)
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except BaseException:
            conn.close()  # a half-used connection is never reused
            raise
        return Response(resp.status, resp.reason, resp.headers, data, False)

    def _connection(self, timeout):
        """This thread's connection, opened (raises _NotSent when that fails)."""
        loc = self._local
        conn = getattr(loc, "conn", None)
        if conn is not None and getattr(loc, "pid", None) != os.getpid():
            conn = None  # inherited through fork: the socket belongs to the parent
        if conn is not None and conn.sock is not None and _dropped(conn.sock):
            conn.close()  # the daemon closed the idle connection: reconnect first
        if conn is None:
            conn = self._new_connection(timeout)
            loc.conn, loc.pid = conn, os.getpid()
        conn.timeout = timeout
        if conn.sock is None:
            try:
                conn.connect()
            except OSError as e:
                conn.close()
                raise _NotSent() from e
        conn.sock.settimeout(timeout)
        return conn

    def _new_connection(self, timeout):
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _delay(self, attempt, failure):
        """Exponential backoff with jitter; a 503's Retry-After is a lower bound."""
        delay = min(self.max_backoff, self.backoff * 2 ** (attempt - 1))
        delay *= 0.5 + random.random() / 2
        if isinstance(failure, Response):
            delay = max(delay, retry_after(failure.headers))
        return delay


def retry_after(headers):
    """The Retry-After header in seconds (0 when absent or not a number), capped."""
    try:
        return min(MAX_RETRY_AFTER, max(0.0, float(headers.get("Retry-After", "0"))))
    except ValueError:
        return 0.0


def _dropped(sock):
    """True when an idle keep-alive socket is readable: the peer closed it (EOF)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
