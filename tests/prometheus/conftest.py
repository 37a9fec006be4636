"""A tiny loopback HTTP server around ``PrometheusAPI.handle`` (test-only: the twin mounts the
handler behind its own server)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

from pytest_sremarathon.prometheus import PrometheusAPI


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, api: PrometheusAPI) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api
        self.lock = threading.Lock()  # the store is not thread-safe; the twin has its lock


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query, keep_blank_values=True)
        body = None
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.command == "POST" and self.headers.get("Content-Type", "").startswith(
                "application/x-www-form-urlencoded"):
            body = raw
        with self.server.lock:
            resp = self.server.api.handle(self.command, unquote(url.path), query, body)
        data = resp.encode()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_HEAD = _serve

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass


@pytest.fixture
def serve_prometheus() -> Iterator[Callable[[PrometheusAPI], str]]:
    """Serve an API on 127.0.0.1 (an ephemeral port); gives its base URL."""
    servers: list[_Server] = []

    def start(api: PrometheusAPI) -> str:
        srv = _Server(api)
        threading.Thread(target=srv.serve_forever, name="prometheus-test", daemon=True).start()
        servers.append(srv)
        host, port = srv.server_address[:2]
        return f"http://{host!s}:{port}"

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()
