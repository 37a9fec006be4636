"""Test-only HTTP serving of a pure API handler (``handle(method, path, query, body) -> (status,
body)``), on 127.0.0.1 and an ephemeral port, so tests can call the tracing and Alertmanager
handlers over real HTTP the way a client (Grafana, HolmesGPT, curl) does."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

Handle = Callable[[str, str, dict[str, list[str]], bytes], tuple[int, Any]]


class HandlerServer:
    def __init__(self, handle: Handle) -> None:
        outer = self

        class _Request(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload = outer.handle(self.command, url.path, query, body)
                data = b"" if payload is None else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = do_HEAD = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.handle = handle
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Request)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}"

    def __enter__(self) -> HandlerServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def request(url: str, method: str = "GET", params: Optional[list[tuple[str, str]]] = None,
            body: Any = None) -> tuple[int, Any]:
    """One plain-HTTP request (urllib, as a script would write it): (status, decoded JSON or
    None for an empty body). Error statuses are returned, not raised."""
    assert url.startswith("http://127.0.0.1:"), "tests talk to loopback only"
    if params:
        url += "?" + urllib.parse.urlencode(params)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    return status, json.loads(raw) if raw else None
