"""The real :class:`~pytest_sremarathon.runtime.code.Router`: what ``ctx.call``, ``ctx.work``
and ``ctx.external`` do in a service process.

* ``ctx.call(service, endpoint, payload)`` is ``POST http://<service>.<namespace>.svc.cluster.local:<port>/<endpoint>``
  with a JSON body, under the caller's ``REQUEST_TIMEOUT_MS`` (default 1000). An address map
  (``SREMARATHON_SERVICE_ADDRS='{"cart": "127.0.0.1:41001"}'``) replaces DNS for processes on
  one machine; a name missing from it fails like a name missing from DNS.
* Failures reach the calling handler as the twin's exceptions, with the twin's messages:
  no such host → :class:`ServiceError` 503 (origin: the caller, whose configuration names a
  host that does not exist); connection refused → 503 (origin: the callee); deadline exceeded
  or HTTP 504 → :class:`UpstreamTimeout`; any other non-2xx → :class:`ServiceError` with that
  status and the origin the callee reported.
* ``ctx.work(ms)`` burns ``ms`` of real CPU time on the calling thread.
* ``ctx.external(name, op, payload)`` answers like the twin's third-party stand-in (the app's
  ``externals:`` with their latency): the benchmark never sends traffic to the internet.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import threading
import time
from typing import Any, Callable, Optional

from .code import Context, Outcome, ServiceError, UpstreamTimeout, format_exception
from .metrics import Registry

DEFAULT_TIMEOUT_MS = 1000.0
DEFAULT_PORT = 8080
CLUSTER_DOMAIN = "svc.cluster.local"


def burn_cpu(ms: float) -> None:
    """Spin for ``ms`` milliseconds of this thread's CPU time (wall time when the platform has
    no per-thread clock). Under contention it takes longer, as real work does."""
    if ms <= 0:
        return
    try:
        clock: Callable[[], float] = time.thread_time
        clock()
    except (AttributeError, OSError):  # pragma: no cover - platforms without CLOCK_THREAD_CPUTIME_ID
        clock = time.perf_counter
    end = clock() + ms / 1000.0
    x = 0
    while clock() < end:
        for _ in range(200):
            x += 1


def parse_addr(addr: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep:
        return addr, default_port
    return host, int(port)


class _Connection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class HttpRouter:
    """Routes one service process's outgoing calls over HTTP."""

    def __init__(self, *, namespace: str, registry: Optional[Registry] = None,
                 addrs: Optional[dict[str, str]] = None, ports: Optional[dict[str, int]] = None,
                 externals: Optional[dict[str, dict[str, Any]]] = None, domain: str = CLUSTER_DOMAIN,
                 default_port: int = DEFAULT_PORT) -> None:
        self.namespace = namespace
        self.registry = registry
        self.addrs = addrs
        self.ports = dict(ports or {})
        self.externals = dict(externals or {})
        self.domain = domain
        self.default_port = default_port
        self._local = threading.local()

    # -- addressing ------------------------------------------------------------------------
    def fqdn(self, service: str) -> str:
        return f"{service}.{self.namespace}.{self.domain}"

    def resolve(self, ctx: Context, service: str) -> tuple[str, int]:
        if self.addrs is not None:
            addr = self.addrs.get(service)
            if addr is None:
                raise ServiceError(service, 503, f"dial tcp: lookup {self.fqdn(service)}: no such host",
                                   origin=self._component(ctx.app, ctx.service))
            return parse_addr(addr, self.default_port)
        return self.fqdn(service), self.ports.get(service, self.default_port)

    @staticmethod
    def _component(ns: str, service: str) -> str:
        return f"service:{ns}/{service}"

    # -- the Router protocol ---------------------------------------------------------------
    def call(self, ctx: Context, service: str, endpoint: str, payload: dict) -> dict:
        timeout_ms = float(ctx.config_data.get("REQUEST_TIMEOUT_MS", DEFAULT_TIMEOUT_MS))
        host, port = self.resolve(ctx, service)
        body = json.dumps(payload, separators=(",", ":"), default=str).encode()
        deadline = time.monotonic() + timeout_ms / 1000.0
        code: str = "error"
        try:
            status, data = self._post(ctx, service, host, port, f"/{endpoint}", body, deadline, timeout_ms)
            code = str(status)
        except UpstreamTimeout:
            code = "timeout"
            raise
        finally:
            if self.registry is not None:
                self.registry.upstream(service, code)
        if 200 <= status < 300:
            try:
                result = json.loads(data) if data else {}
            except ValueError:
                raise ServiceError(service, 502, "invalid JSON in response", origin=self._component(ctx.app, service))
            return result if isinstance(result, dict) else {"value": result}
        try:
            err = json.loads(data)
        except ValueError:
            err = {}
        if not isinstance(err, dict):
            err = {}
        origin = str(err.get("origin") or self._component(ctx.app, service))
        if status == 504:
            raise UpstreamTimeout(service, timeout_ms, origin=origin)
        message = str(err.get("error") or data.decode("utf-8", "replace").strip() or http.client.responses.get(status, ""))
        raise ServiceError(service, status, message, origin=origin)

    def work(self, ctx: Context, ms: float) -> None:
        burn_cpu(ms)

    def invoke(self, ctx: Context, fn: Callable[[], Any], weight: float) -> Outcome:
        """Run a readiness check or startup hook; an unexpected exception is logged with its
        traceback (the twin does the same)."""
        t0 = time.perf_counter()
        try:
            value, error = fn(), None
        except ServiceError as exc:
            value, error = None, str(exc)
        except Exception as exc:  # noqa: BLE001 - the probe answers 503
            value, error = None, f"{type(exc).__name__}: {exc}"
            ctx.log("ERROR readiness check failed\n" + format_exception(exc))
        return Outcome(value=value, error=error, latency_ms=(time.perf_counter() - t0) * 1000.0)

    def external(self, ctx: Context, name: str, op: str, payload: dict) -> dict:
        spec = self.externals.get(name)
        if spec is None:
            raise ServiceError(name, 503, f"dial tcp: lookup {name}: no such host",
                               origin=self._component(ctx.app, ctx.service))
        time.sleep(float(spec.get("latency_ms", 10.0)) / 1000.0)
        if spec.get("down"):
            raise ServiceError(name, 503, f"POST https://{spec.get('host', name)}/v1/{op}: 503 Service Unavailable",
                               origin=f"external:{name}")
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
        return {"id": f"{op}_{digest[:16]}", "status": "succeeded"}

    # -- HTTP with per-thread keep-alive ---------------------------------------------------
    def _connection(self, host: str, port: int, timeout: float, fresh: bool) -> http.client.HTTPConnection:
        pool: dict[tuple[str, int], http.client.HTTPConnection] = getattr(self._local, "pool", None) or {}
        self._local.pool = pool
        conn = pool.get((host, port))
        if conn is None or fresh:
            if conn is not None:
                conn.close()
            conn = _Connection(host, port, timeout=timeout)
            pool[(host, port)] = conn
        else:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
        return conn

    def _post(self, ctx: Context, service: str, host: str, port: int, path: str, body: bytes, deadline: float,
              timeout_ms: float) -> tuple[int, bytes]:
        for attempt in range(2):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UpstreamTimeout(service, timeout_ms, origin=self._component(ctx.app, service))
            conn = self._connection(host, port, remaining, fresh=attempt > 0)
            reused = conn.sock is not None
            try:
                conn.request("POST", path, body=body, headers={
                    "Content-Type": "application/json", "Accept": "application/json",
                    "User-Agent": f"sremarathon-runtime/{ctx.service}", "X-Sremarathon-Caller": ctx.service})
                resp = conn.getresponse()
                data = resp.read()
                if resp.will_close:
                    conn.close()
                return resp.status, data
            except socket.gaierror:
                conn.close()
                raise ServiceError(service, 503, f"dial tcp: lookup {host}: no such host",
                                   origin=self._component(ctx.app, ctx.service)) from None
            except ConnectionRefusedError:
                conn.close()
                raise ServiceError(service, 503, f"dial tcp {host}:{port}: connect: connection refused",
                                   origin=self._component(ctx.app, service)) from None
            except (TimeoutError, socket.timeout):
                conn.close()
                raise UpstreamTimeout(service, timeout_ms, origin=self._component(ctx.app, service)) from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
                conn.close()
                if reused and attempt == 0:  # a stale keep-alive connection: dial again once
                    continue
                raise ServiceError(service, 503, "upstream connect error or disconnect/reset before headers. "
                                                 f"reset reason: {type(exc).__name__}",
                                   origin=self._component(ctx.app, service)) from None
            except OSError as exc:
                conn.close()
                raise ServiceError(service, 503, f"dial tcp {host}:{port}: {exc.strerror or exc}",
                                   origin=self._component(ctx.app, service)) from None
        raise AssertionError("unreachable")  # pragma: no cover
