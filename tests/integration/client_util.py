"""This file contains what the client and command-line tests share: the kbandit package
of clients/python on sys.path, schema checks of JSON objects against openapi.yaml, a TCP
proxy that drops chosen responses, and a scripted HTTP server for statuses the real
daemon gives only in trouble (503 with Retry-After, a proxy's HTML error page)."""
import http.server
import socket
import sys
import threading
import time

from conftest import REPO
from openapi_check import _pointer, load_spec

CLIENT_SRC = REPO / "clients" / "python"
sys.path.insert(0, str(CLIENT_SRC))


def assert_schema(obj, *pointer):
    """obj validates against the openapi.yaml schema at pointer, e.g. ("components",
    "schemas", "Study")."""
    spec = load_spec()
    assert spec is not None, "openapi.yaml is missing"
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in spec.validator(_pointer(*pointer)).iter_errors(obj)]
    assert not errors, errors[:5]


def assert_component(obj, name):
    assert_schema(obj, "components", "schemas", name)


def assert_response(obj, template, method="get", status="200"):
    """obj validates as the JSON answer of method template with status."""
    assert_schema(obj, "paths", template, method, "responses", status, "content",
                  "application/json", "schema")


class DroppingProxy:
    """Forwards TCP connections to a daemon. After drop(n), the next n responses are read
    from the daemon (so their requests were applied) but not delivered: the client's
    connection is closed instead, as when a network path fails mid-answer."""

    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.dropped = 0
        self._drops = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def drop(self, n=1):
        with self._lock:
            self._drops = n

    def close(self):
        self.server.close()

    def _take_drop(self):
        with self._lock:
            if self._drops <= 0:
                return False
            self._drops -= 1
            self.dropped += 1
            return True

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        up = socket.create_connection(("127.0.0.1", self.upstream_port))
        threading.Thread(target=_pump, args=(client, up), daemon=True).start()
        try:
            while True:
                data = up.recv(65536)
                if not data or self._take_drop():
                    return
                client.sendall(data)
        except OSError:
            return
        finally:
            _close(up)
            _close(client)


def _close(sock):
    """shutdown() first: close() alone would not wake the pump blocked in recv() on the
    same socket, and the peer would see no FIN."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                dst.shutdown(socket.SHUT_WR)
                return
            dst.sendall(data)
    except OSError:
        return


class ScriptedServer:
    """An HTTP server answering each request with the next (status, headers, body) of its
    script (the last one repeats); .times holds when each request arrived, .bodies their
    bodies."""

    def __init__(self, script):
        self.script = list(script)
        self.times = []
        self.bodies = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                outer.bodies.append(self.rfile.read(length))
                outer.times.append(time.monotonic())
                status, headers, body = outer.script[min(len(outer.times), len(outer.script)) - 1]
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = do_any

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
