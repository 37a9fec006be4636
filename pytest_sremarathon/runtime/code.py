"""The handler runtime: loads a service's real code from its built artifact and runs its
handlers with a context object (``ctx``) — the same interface a real HTTP runtime provides.

A handler is ``def endpoint(ctx, req: dict) -> dict``; a module lists them in ``ENDPOINTS`` and
may define ``ready(ctx) -> bool`` (readiness probe) and ``startup(ctx)`` (runs once per
container start; an exception there is a crash on start). Each pod gets its own module
instance, so module-level state (caches, pools) is per pod, as in a real process.
"""

from __future__ import annotations

import builtins
import functools
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol


class ServiceError(Exception):
    """Raised into a caller's handler when a downstream call fails (the caller sees an HTTP
    error, exactly as an HTTP client would)."""

    def __init__(self, service: str, status: int, message: str, origin: str) -> None:
        super().__init__(f"{service}: HTTP {status}: {message}")
        self.service = service
        self.status = status
        self.origin = origin  # the service whose code or absence caused the failure


class UpstreamTimeout(ServiceError):
    def __init__(self, service: str, timeout_ms: float, origin: str) -> None:
        super().__init__(service, 504, f"deadline exceeded after {timeout_ms:.0f}ms", origin)


class StoreError(ServiceError):
    """An error reply from a datastore, raised by the client library in the calling service
    (as redis-py raises ``AuthenticationError`` on ``WRONGPASS``)."""

    def __init__(self, store: str, reply: str, origin: str) -> None:
        super().__init__(store, 500, reply, origin)
        self.args = (f"{store}: {reply}",)


@dataclass(frozen=True)
class Artifact:
    """One built service: its source files, content-addressed by ``digest``."""

    app: str
    service: str
    digest: str  # "sha256:<hex>"
    entry: str  # path of the service module inside the artifact, e.g. "services/cart.py"
    files: dict[str, str]  # path -> source text

    @property
    def image(self) -> str:
        return f"registry.sremarathon.local/{self.app}/{self.service}@{self.digest}"


class ArtifactStore:
    """Artifacts by digest; the twin's image registry."""

    def __init__(self) -> None:
        self._by_digest: dict[str, Artifact] = {}

    def put(self, artifact: Artifact) -> None:
        self._by_digest[artifact.digest] = artifact

    def get(self, digest: str) -> Optional[Artifact]:
        return self._by_digest.get(digest)

    def by_image(self, image: str) -> Optional[Artifact]:
        _, _, digest = image.partition("@")
        return self._by_digest.get(digest)


class ContainerCrash(Exception):
    """The container's process would exit (import error, startup exception)."""


def load_module(artifact: Artifact, pod: str) -> types.ModuleType:
    """Execute the service's code as a fresh module for one pod.

    Shared helper files in the artifact are importable by their module name (``lib`` for
    ``services/lib.py``) the way a real container's PYTHONPATH makes them.
    """
    helpers: dict[str, types.ModuleType] = {}
    for path, source in sorted(artifact.files.items()):
        if path == artifact.entry or not path.endswith(".py"):
            continue
        name = path.rsplit("/", 1)[-1][:-3]
        helpers[name] = _exec_module(f"{artifact.service}.{name}", f"/app/{path}", source, {})
    return _exec_module(artifact.service, f"/app/{artifact.entry}", artifact.files[artifact.entry], helpers)


def _exec_module(name: str, filename: str, source: str, helpers: dict[str, types.ModuleType]) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = filename
    module.__dict__["__builtins__"] = _builtins_with(helpers)
    module.__dict__[_SOURCE] = source  # this version's text, for the lines of its tracebacks
    try:
        exec(compile_source(source, filename), module.__dict__)
    except Exception as exc:  # the container would exit with this traceback
        raise ContainerCrash(format_exception(exc)) from exc
    return module


@functools.lru_cache(maxsize=4096)
def compile_source(source: str, filename: str) -> types.CodeType:
    """Compiled once per distinct source: every pod of an artifact runs the same code object."""
    return compile(source, filename, "exec")


def _builtins_with(helpers: dict[str, types.ModuleType]) -> dict[str, Any]:
    """Builtins whose ``import`` finds the artifact's own helper modules first, as the
    container's PYTHONPATH would."""
    real_import = builtins.__import__

    def _import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name in helpers:
            return helpers[name]
        return real_import(name, globals, locals, fromlist, level)

    table = dict(vars(builtins))
    table["__import__"] = _import
    return table


_SOURCE = "__sremarathon_source__"


def format_exception(exc: BaseException) -> str:
    """A traceback as the container would print it, without the twin's own frames. Source
    lines come from the module's own text: two versions of one file share a file name."""
    lines = ["Traceback (most recent call last):"]
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        if not code.co_filename.startswith("/app/"):
            continue
        lines.append(f'  File "{code.co_filename}", line {lineno}, in {code.co_name}')
        source = frame.f_globals.get(_SOURCE, "")
        text = source.splitlines()[lineno - 1].strip() if source and 0 < lineno <= source.count("\n") + 1 else ""
        if text:
            lines.append(f"    {text}")
    lines.extend(traceback.format_exception_only(type(exc), exc)[-1].rstrip().splitlines())
    return "\n".join(lines)


class Router(Protocol):
    """Executes calls and accounts per-request work; implemented by the traffic engine."""

    def call(self, ctx: Context, service: str, endpoint: str, payload: dict) -> dict: ...

    def work(self, ctx: Context, ms: float) -> None: ...

    def invoke(self, ctx: Context, fn: Callable[[], Any], weight: float) -> Outcome: ...

    def external(self, ctx: Context, name: str, op: str, payload: dict) -> dict: ...


@dataclass
class Outcome:
    value: Any = None
    error: Optional[str] = None
    latency_ms: float = 0.0


@dataclass
class Context:
    """What handler code sees: ``ctx.call``, ``ctx.store``, ``ctx.external``, ``ctx.config``,
    ``ctx.work``, ``ctx.log``, ``ctx.cache``. One context per container; per-request accounting lives in the
    router, so nested and re-entrant calls are safe."""

    app: str
    service: str
    pod: str
    zone: str
    config_data: dict[str, str]
    router: Router
    logger: Callable[[str], None]
    cache_dict: dict[str, Any] = field(default_factory=dict)
    stores: dict[str, StoreClient] = field(default_factory=dict, repr=False)  # clients, made once per name
    volume_full: bool = False  # the container's data volume has no space left (twin/volume_usage.py)

    def call(self, service: str, endpoint: str, payload: Optional[dict] = None) -> dict:
        return self.router.call(self, service, endpoint, payload or {})

    def store(self, name: str) -> StoreClient:
        client = self.stores.get(name)
        if client is None:
            client = self.stores[name] = StoreClient(self, name)
        return client

    def external(self, name: str, op: str, payload: Optional[dict] = None) -> dict:
        """Call a third-party API the app declares under ``externals:`` in its app.yaml."""
        return self.router.external(self, name, op, payload or {})

    def config(self, key: str, default: Optional[str] = None) -> str:
        value = self.config_data.get(key, default)
        if value is None:
            raise KeyError(f"missing configuration key {key!r}")
        return value

    def work(self, ms: float) -> None:
        self.router.work(self, ms)

    def log(self, message: str) -> None:
        self.logger(message)

    def cache(self) -> dict[str, Any]:
        """Per-pod in-memory cache; its size counts toward the pod's memory."""
        return self.cache_dict


class StoreClient:
    """A datastore client: each operation is a call to the datastore's Service. When the
    caller's configuration holds ``<STORE>_PASSWORD`` (``CART_CACHE_PASSWORD`` for
    ``cart-cache``), every command authenticates with it."""

    def __init__(self, ctx: Context, name: str) -> None:
        self._ctx = ctx
        self._name = name
        self._password_key = password_key(name)
        # The pool's connections are pinned to one server address (resolved when the process
        # started): once that server is gone, every command fails with this reply until the
        # process restarts and resolves the name again (faults/datastore.py, failover).
        self.pinned: Optional[str] = None

    def _send(self, op: str, payload: dict) -> dict:
        ctx = self._ctx
        if self.pinned is not None:
            raise StoreError(self._name, self.pinned, origin=f"service:{ctx.app}/{self._name}")
        password = ctx.config_data.get(self._password_key)  # (read at every command: a rotation applies at once)
        if password is not None:
            payload = {**payload, "auth": password}
        reply = ctx.router.call(ctx, self._name, op, payload)  # what ctx.call does (the payload is never empty)
        if isinstance(reply, dict) and reply.get("error"):
            raise StoreError(self._name, str(reply["error"]), origin=f"service:{self._ctx.app}/{self._name}")
        return reply

    def get(self, key: str) -> Any:
        return self._send("get", {"key": key}).get("value")

    def put(self, key: str, value: Any) -> None:
        self._send("put", {"key": key, "value": value})

    def incr(self, key: str, by: int = 1) -> int:
        return int(self._send("incr", {"key": key, "by": by})["value"])


@functools.lru_cache(maxsize=1024)
def password_key(store: str) -> str:
    """The configuration key a client reads a datastore's password from."""
    return store.upper().replace("-", "_").replace(".", "_") + "_PASSWORD"


DATASTORE_SOURCE = '''"""A key-value datastore (the twin's stand-in for redis/mongodb/memcached images)."""

_DATA = {}
_PASSWORD_KEYS = ("REDIS_PASSWORD", "MONGO_INITDB_ROOT_PASSWORD", "MEMCACHED_PASSWORD", "POSTGRES_PASSWORD",
                  "MYSQL_ROOT_PASSWORD")


def _denied(ctx, req):
    """The error reply to a client that does not present the configured password, if any."""
    config = ctx.config_data
    if config.keys().isdisjoint(_PASSWORD_KEYS):  # no password configured (checked on every command)
        return None
    required = next((config[k] for k in _PASSWORD_KEYS if config.get(k)), None)
    if required is None:
        return None
    if req.get("auth") is None:
        return {"error": "NOAUTH Authentication required."}
    if req["auth"] != required:
        return {"error": "WRONGPASS invalid username-password pair or user is disabled."}
    return None


_STATS = {"get_hits": 0.0, "get_misses": 0.0,  # as memcached's ``stats``; in real requests
          "large_write_bytes": 0.0}  # the bytes of values over 1 KiB written (the volume model reads them)


def get(ctx, req):
    ctx.work(0.3)
    denied = _denied(ctx, req)
    if denied:
        return denied
    value = _DATA.get(req["key"])
    _STATS["get_misses" if value is None else "get_hits"] += getattr(ctx.router, "weight", 1.0)
    return {"value": value}


_ENOSPC = {"error": "MISCONF Errors writing to the AOF file: No space left on device"}


def put(ctx, req):
    ctx.work(0.4)
    denied = _denied(ctx, req)
    if denied:
        return denied
    if ctx.volume_full:  # the write cannot be appended to the log
        return _ENOSPC
    value = req["value"]
    if isinstance(value, str) and len(value) > 1024:
        _STATS["large_write_bytes"] += len(value) * getattr(ctx.router, "weight", 1.0)
    _DATA[req["key"]] = value
    return {"ok": True}


def incr(ctx, req):
    ctx.work(0.3)
    denied = _denied(ctx, req)
    if denied:
        return denied
    if ctx.volume_full:
        return _ENOSPC
    _DATA[req["key"]] = int(_DATA.get(req["key"]) or 0) + int(req.get("by", 1))
    return {"value": _DATA[req["key"]]}


def ready(ctx):
    return True


ENDPOINTS = {"get": get, "put": put, "incr": incr}
'''


def datastore_artifact(app: str, service: str, image: str) -> Artifact:
    """Datastores run a stock image, not the app's code; their digest comes from the image name."""
    import hashlib

    digest = "sha256:" + hashlib.sha256(f"{image}\n{DATASTORE_SOURCE}".encode()).hexdigest()
    return Artifact(app, service, digest, "services/datastore.py", {"services/datastore.py": DATASTORE_SOURCE})
