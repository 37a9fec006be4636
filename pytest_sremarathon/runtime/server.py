"""One service as a real HTTP server: the artifact's handler code behind
``http.server.ThreadingHTTPServer``.

=========================  ==================================================================
``POST /<endpoint>``       JSON body → the handler's JSON (``{"value": x}`` for a non-dict)
``GET /healthz``           200 while the process runs (liveness)
``GET /readyz``            the module's ``ready(ctx)``: 200 when true, 503 otherwise
``GET /metrics``           Prometheus text (:mod:`.metrics`)
``GET /``                  the service, its digest and endpoints
=========================  ==================================================================

Requests run ``concurrency`` at a time (default 1, like a synchronous worker, and like a pod of
the twin, which serves one request at a time); the others wait their turn, and the wait counts
in their latency. Module state such as a connection pool therefore sees the same concurrency as
on the twin. Probes and ``/metrics`` never wait.

Errors answer as the twin's pods do: an exception in the handler is a 500 whose traceback goes
to stderr in the twin's format (``ERROR <endpoint> failed`` + :func:`format_exception`); a
failed downstream call is a 500 (``ERROR <endpoint>: upstream call failed: …``) that carries the
component where the failure originated; an unknown endpoint is a 404. Error bodies are
``{"error": message, "origin": component}``.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import types
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Optional, TextIO

from .code import Artifact, ContainerCrash, Context, ServiceError, format_exception, load_module
from .metrics import CONTENT_TYPE, Registry
from .router import HttpRouter

MAX_TRACEBACKS = 3  # per endpoint and exception type, per window (the twin: per tick)
TRACEBACK_WINDOW = 30.0  # seconds
MAX_BODY = 8 * 1024 * 1024


class Crash(Exception):
    """The process must exit: the code does not import or its ``startup`` raised."""


@dataclass
class LogSink:
    """Container output: plain lines to a stream (kubectl logs shows them as the twin's)."""

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, text: str) -> None:
        with self._lock:
            self.stream.write(text.rstrip("\n") + "\n")
            self.stream.flush()


class _Limiter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], deque] = {}

    def allow(self, key: tuple[str, str]) -> bool:
        now = time.monotonic()
        with self._lock:
            q = self._seen.setdefault(key, deque())
            while q and now - q[0] > TRACEBACK_WINDOW:
                q.popleft()
            if len(q) >= MAX_TRACEBACKS:
                return False
            q.append(now)
            return True


class ServiceServer:
    """Serve ``artifact`` on ``bind:port``. ``start()`` loads the code (a :class:`Crash` when it
    cannot run) and starts serving in a background thread; ``serve_forever()`` blocks."""

    def __init__(self, artifact: Artifact, *, namespace: str, config: dict[str, str], router: HttpRouter,
                 registry: Registry, bind: str = "127.0.0.1", port: int = 8080, pod: str = "", node: str = "",
                 zone: str = "", log: Optional[Callable[[str], None]] = None, concurrency: int = 1) -> None:
        self.artifact = artifact
        self.namespace = namespace
        self.registry = registry
        self.router = router
        self.bind, self.port = bind, port
        self.node = node or "localhost"
        self.log = log or LogSink()
        self.ctx = Context(app=namespace, service=artifact.service, pod=pod or f"{artifact.service}-0",
                           zone=zone, config_data=dict(config), router=router, logger=self.log)
        self.module: Optional[types.ModuleType] = None
        self._httpd: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self._limiter = _Limiter()
        self.slots = threading.BoundedSemaphore(max(1, concurrency))

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        a = self.artifact
        self.log(f"INFO starting {a.service} ({a.digest[:19]}) on {self.node}")
        try:
            module = load_module(a, self.ctx.pod)
        except ContainerCrash as crash:
            self.log(str(crash))
            raise Crash(str(crash)) from None
        startup = getattr(module, "startup", None)
        if callable(startup):
            try:
                startup(self.ctx)
            except Exception as exc:  # noqa: BLE001 - the process exits with the traceback
                text = format_exception(exc)
                self.log(text)
                raise Crash(text) from None
        self.module = module

    def start(self) -> "ServiceServer":
        if self.module is None:
            self.load()
        httpd = _Server((self.bind, self.port), _handler_for(self))
        self._httpd = httpd
        self.port = httpd.server_address[1]
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"runtime:{self.artifact.service}", daemon=True)
        self._thread.start()
        self.log(f"INFO {self.artifact.service} listening on :{self.port}")
        return self

    def serve_forever(self) -> None:
        self.start()
        assert self._thread is not None
        while self._thread.is_alive():
            self._thread.join(0.5)

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd.close_connections()
            self._httpd = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.bind in ("0.0.0.0", "") else self.bind
        return f"http://{host}:{self.port}"

    # -- request handling (called from handler threads) -----------------------------------
    @property
    def endpoints(self) -> dict[str, Callable[..., Any]]:
        return dict(getattr(self.module, "ENDPOINTS", {}) or {})

    def handle(self, endpoint: str, payload: Any) -> tuple[int, dict[str, Any]]:
        """Run one request; returns (HTTP status, JSON body)."""
        svc = self.artifact.service
        me = f"service:{self.namespace}/{svc}"
        handler = self.endpoints.get(endpoint)
        if handler is None:
            return 404, {"error": f"no handler for {endpoint!r}", "origin": me}
        if not isinstance(payload, dict):
            return 400, {"error": "the request body must be a JSON object", "origin": me}
        try:
            result = handler(self.ctx, payload)
        except ServiceError as exc:
            status = 404 if exc.status == 404 else 500
            origin = me if exc.status == 404 else exc.origin
            if self._limiter.allow((endpoint, "upstream")):
                self.log(f"ERROR {endpoint}: upstream call failed: {exc}")
            return status, {"error": str(exc), "origin": origin}
        except Exception as exc:  # noqa: BLE001 - the service's own bug: a 500 with a traceback
            if self._limiter.allow((endpoint, type(exc).__name__)):
                self.log(f"ERROR {endpoint} failed\n{format_exception(exc)}")
            return 500, {"error": "Internal Server Error", "origin": me}
        return 200, result if isinstance(result, dict) else {"value": result}

    def ready(self) -> tuple[bool, str]:
        fn = getattr(self.module, "ready", None)
        if not callable(fn):
            self.registry.ready = 1
            return True, ""
        outcome = self.router.invoke(self.ctx, lambda: fn(self.ctx), weight=0.0)
        ok = outcome.error is None and bool(outcome.value)
        self.registry.ready = int(ok)
        return ok, outcome.error or ("" if ok else "not ready")

    def retained_entries(self) -> int:
        """What the kubelet of the twin counts as retained memory: cache entries and the
        module's own containers."""
        n = len(self.ctx.cache_dict)
        for name, value in vars(self.module or types.ModuleType("x")).items():
            if not name.startswith("__") and isinstance(value, (list, dict, set, deque)):
                n += len(value)
        return n

    def describe(self) -> dict[str, Any]:
        a = self.artifact
        return {"app": a.app, "service": a.service, "digest": a.digest, "pod": self.ctx.pod,
                "endpoints": sorted(self.endpoints)}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128
    allow_reuse_address = True

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._open: set[Any] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Drop the keep-alive connections too, as a process that exits does."""
        with self._open_lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _handler_for(service: ServiceServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body leave at once: no 40 ms delayed-ACK stalls
        server_version = "sremarathon-runtime/1"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:  # no access log: the twin has none
            pass

        def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj, separators=(",", ":"), default=str).encode())

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path = self.path.split("?", 1)[0]
            if path in ("/healthz", "/livez"):
                self._send(200, b"ok", "text/plain; charset=utf-8")
            elif path == "/readyz":
                ok, why = service.ready()
                self._send(200 if ok else 503, b"ok" if ok else f"not ready: {why}".encode(),
                           "text/plain; charset=utf-8")
            elif path == "/metrics":
                service.registry.cache_entries = service.retained_entries()
                self._send(200, service.registry.render().encode(), CONTENT_TYPE)
            elif path == "/":
                self._json(200, service.describe())
            else:
                self._json(404, {"error": f"no route GET {path}"})

        do_HEAD = do_GET

        def do_POST(self) -> None:  # noqa: N802
            t0 = time.perf_counter()
            endpoint = self.path.split("?", 1)[0].strip("/")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._json(413, {"error": "request body too large"})
                self.close_connection = True
                return
            raw = self.rfile.read(length) if length else b""
            try:
                payload = json.loads(raw) if raw.strip() else {}
            except ValueError:
                status, body = 400, {"error": "the request body is not valid JSON"}
            else:
                with service.slots:
                    status, body = service.handle(endpoint, payload)
            label = endpoint if endpoint in service.endpoints else "unknown"
            service.registry.observe(label, status, time.perf_counter() - t0)
            self._json(status, body)

    return Handler
