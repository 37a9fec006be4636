"""The twin's Kubernetes API server: a faithful REST subset over the :class:`Store`, on loopback.

``ApiServer(store, tokens=..., admission=..., telemetry=...)`` serves, on ``127.0.0.1:<port>``:

* discovery (``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/{g}/{v}``), OpenAPI v3
  (``/openapi/v3`` …), a minimal protobuf OpenAPI v2 (for kubectl ≤ 1.28's validation check)
  and ``metrics.k8s.io/v1beta1`` for ``kubectl top``;
* CRUD for every type in :data:`RESOURCE_TYPES`: list (label/field selectors, ``limit`` and
  ``continue``, cluster-wide), get, create, update (``resourceVersion`` conflicts), delete
  (with ``ownerReferences`` cascade and DeleteOptions preconditions), deletecollection, and
  PATCH in all four flavours (see :mod:`.patch`); request bodies in JSON, YAML or Kubernetes
  protobuf (see :mod:`.protobuf`), responses always JSON;
* ``meta.k8s.io/v1`` Table and PartialObjectMetadata responses when ``Accept`` asks for them
  (see :mod:`.tables`; ages against the virtual clock);
* watch (chunked NDJSON, resumption from a resourceVersion, 410 ``Expired``, BOOKMARKs,
  ``sendInitialEvents=true`` refused with 422 so clients fall back to list+watch);
* subresources ``status``, ``scale`` (``autoscaling/v1 Scale``), ``pods/log`` and
  ``pods/eviction`` (``exec``/``attach``/``portforward`` answer 400 with an explanation);
* extension handlers under path prefixes (``/sremarathon/v1/`` …), behind the same tokens.

One port speaks both plain HTTP (:attr:`ApiServer.url`) and TLS (:attr:`ApiServer.https_url`,
sniffed from the first byte): kubectl only sends bearer tokens over TLS, so
:meth:`ApiServer.write_kubeconfig` points at the TLS side with the twin's CA (see :mod:`.tls`).

Every request needs ``Authorization: Bearer <token>`` (401 otherwise; ``/healthz``, ``/livez``,
``/readyz`` and ``/version`` are public, as on a real cluster). Every mutating request is put
to ``admission.decide`` with the object as it would be after the change (for deletes and
evictions: the object being removed) — 403 ``Forbidden`` with the decision's message when
denied — and reported to ``admission.record`` with the final HTTP status. A request that fails
before the change can be computed (404, 422 …) is decided on its raw body and recorded with
that status. A dry run (``dryRun=All``) is decided but only recorded when denied. Reads that
would return Secret data (get, list or watch of ``secrets`` as objects, not as a table or
metadata) go to ``admission.decide`` too, with a read verb; only their denials are recorded.

Deletion is immediate (no graceful termination, no finalizers): deleting an object deletes its
dependents (objects whose ``ownerReferences`` name its uid, recursively) unless
``propagationPolicy=Orphan``, and deleting a Namespace deletes everything in it. Objects
written through the API get the real server's defaults (:mod:`.defaults`) and validation;
``status`` of Pods, Deployments, ReplicaSets, Nodes, Namespaces and Services is only writable
through ``/status``. Server-side apply merges but does not track field ownership.

The server is a small threaded HTTP/1.1 server of its own (one thread per connection,
keep-alive, ``TCP_NODELAY``); object JSON is serialised once per resourceVersion and reused.
Writes compute their result under ``store.lock``, ask admission outside it, then commit under
the lock if the object has not moved meanwhile (otherwise they recompute).
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import math
import select
import socket
import ssl
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from typing import Any, Callable, Optional, Protocol
from urllib.parse import parse_qsl, unquote

import yaml

from ..policy import Decision, MutationRequest
from ..serving.http import Admission, ExtensionHandler, Request, Response
from . import defaults, openapi, patch as patching, protobuf, tables
from ..serving.loopback import LoopbackServer
from ..k8s.selectors import field_predicate, label_predicate, selector_string
from ..k8s.store import BY_KIND, RESOURCE_TYPES, ApiError, ResourceType, Store, iso

log = logging.getLogger(__name__)

__all__ = ["Admission", "ApiServer", "ClusterTelemetry", "ExtensionHandler", "Request", "Response"]


# -- public contract ----------------------------------------------------------------------------

class ClusterTelemetry(Protocol):
    def pod_log(self, namespace: str, pod: str, container: str | None,
                previous: bool) -> list[tuple[datetime, str]]: ...

    def pod_usage(self, namespace: str, pod: str) -> dict[str, tuple[int, int]]: ...  # container -> (mCPU, bytes)

    def node_usage(self, node: str) -> tuple[int, int]: ...


# -- helpers ------------------------------------------------------------------------------------

_JSON = "application/json"
_SEP = (",", ":")


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=_SEP, ensure_ascii=False).encode()


def _status_success(code: int = 200, details: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        body["details"] = details
    if code != 200:
        body["code"] = code
    return body


def _not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def _method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def _bad_request(msg: str) -> ApiError:
    return ApiError(400, "BadRequest", msg)


def _qualified(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def _not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{_qualified(rt)} "{name}" not found', kind=rt.plural, name=name)


def _conflict(rt: ResourceType, name: str, detail: str = "the object has been modified; please apply your changes "
                                                           "to the latest version and try again") -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {_qualified(rt)} "{name}": {detail}',
                    kind=rt.plural, name=name)


def _truthy(value: Optional[str]) -> bool:
    return (value or "").lower() in ("1", "true", "yes", "t")


def _rfc3339nano(t: datetime) -> str:
    t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond * 1000:09d}Z"


class _Plan:
    """A write computed under the store lock, to be admitted and then committed."""

    __slots__ = ("after", "valid", "commit", "render")

    def __init__(self, after: Any, valid: Callable[[], bool], commit: Callable[[], tuple[int, bytes]],
                 render: Optional[Callable[[Any], bytes]] = None) -> None:
        self.after = after  # the object as it would be after the change (what admission inspects)
        self.valid = valid  # still applicable? (checked under the lock just before committing)
        self.commit = commit  # do it; returns (HTTP status, response body)
        self.render = render or _dumps  # the response body of a dry run


@dataclass
class _Ctx:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw_body: bytes
    actor: str
    conn: socket.socket
    release: Callable[[], None] = lambda: None  # let the think-time gate go (a stream, after its start)

    @property
    def accept(self) -> str:
        return self.headers.get("accept", "")

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def body(self) -> Any:
        if not self.raw_body:
            return None
        if self.content_type == "application/vnd.kubernetes.protobuf":
            return protobuf.decode(self.raw_body)
        text = self.raw_body.decode("utf-8", "replace")
        try:
            return json.loads(text)
        except ValueError:
            if "yaml" in self.content_type:
                try:
                    return yaml.safe_load(text)
                except yaml.YAMLError as e:
                    raise _bad_request(f"error decoding YAML: {e}") from None
            raise _bad_request("the body of the request was in an unknown format - accepted media types include: "
                               "application/json, application/yaml") from None


class _Stream(Exception):
    """Raised by a handler that has written its own (streamed) response; the connection closes."""


# -- the server ---------------------------------------------------------------------------------

class ApiServer(LoopbackServer):
    def __init__(self, store: Store, *, tokens: dict[str, str], admission: Admission,
                 telemetry: ClusterTelemetry, extensions: dict[str, ExtensionHandler] | None = None,
                 host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__("apiserver", host, port)
        self.store = store
        self.tokens = dict(tokens)
        self.admission = admission
        self.telemetry = telemetry
        self.extensions = dict(sorted((extensions or {}).items(), key=lambda kv: -len(kv[0])))
        self._json_cache: dict[tuple[str, str, str], tuple[str, bytes]] = {}
        self._types: dict[tuple[str, str, str], ResourceType] = {
            (rt.group, rt.version, rt.plural): rt for rt in RESOURCE_TYPES}
        self._namespaced_plurals: dict[tuple[str, str], set[str]] = {}
        for rt in RESOURCE_TYPES:
            if rt.namespaced:
                self._namespaced_plurals.setdefault((rt.group, rt.version), set()).add(rt.plural)
        self._namespaced_plurals.setdefault((openapi.METRICS_GROUP, openapi.METRICS_VERSION), set()).add("pods")
        self._static: dict[str, bytes] = {
            "/version": _dumps(openapi.SERVER_VERSION),
            "/api": _dumps(openapi.api_versions()),
            "/apis": _dumps(openapi.api_group_list()),
            "/": _dumps(openapi.root_paths()),
            "/openapi/v3": _dumps(openapi.openapi_index()),
        }
        for (g, v) in list(openapi.group_versions()) + [(openapi.METRICS_GROUP, openapi.METRICS_VERSION)]:
            prefix = f"/apis/{g}/{v}" if g else f"/api/{v}"
            self._static[prefix] = _dumps(openapi.resource_list(g, v))
            if g:
                self._static[f"/apis/{g}"] = _dumps(openapi.api_group(g))
                key = f"apis/{g}/{v}"
            else:
                key = f"api/{v}"
            doc = openapi.openapi_document(key)
            if doc is not None:
                self._static[f"/openapi/v3/{key}"] = _dumps(doc)
        for key in ("api", "apis", "version"):
            self._static[f"/openapi/v3/{key}"] = _dumps(openapi.openapi_document(key))
        self.watch_bookmark_interval = 60.0  # wall seconds between BOOKMARKs on an idle watch
        self.aged_actor = "agent"  # whose Event timestamps are served for client-side ages (_event_json)
        self._openapi_v2 = openapi.openapi_v2_protobuf()

    def _wake_streams(self) -> None:
        self.store.wake_watchers()

    def _respond(self, conn: Any, method: str, target: str, headers: dict[str, str], body: bytes,
                 keep_alive: bool) -> bool:
        try:
            status, ctype, payload = self._dispatch(method, target, headers, body, conn)
        except _Stream:
            return False
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n"
                f"Content-Type: {ctype}\r\nContent-Length: {len(payload)}\r\n"
                f"Cache-Control: no-cache, private\r\n")
        if not keep_alive:
            head += "Connection: close\r\n"
        conn.sendall(head.encode("latin-1") + b"\r\n" + (payload if method != "HEAD" else b""))
        return keep_alive

    def _dispatch(self, method: str, target: str, headers: dict[str, str], body: bytes,
                  conn: socket.socket) -> tuple[int, str, bytes]:
        path, _, qs = target.partition("?")
        path = unquote(path)
        query = dict(parse_qsl(qs, keep_blank_values=True)) if qs else {}
        try:
            if path in ("/healthz", "/livez", "/readyz"):
                return 200, "text/plain; charset=utf-8", b"ok"
            actor = None
            auth = headers.get("authorization", "")
            if auth[:7].lower() == "bearer ":
                actor = self.tokens.get(auth[7:].strip())
            if actor is None:
                if path == "/version" and method == "GET":
                    return 200, _JSON, self._static["/version"]
                raise ApiError(401, "Unauthorized", "Unauthorized")
            with self.gate(actor, method, path) as held:
                ctx = _Ctx(method, path, query, headers, body, actor, conn, held.release)
                return self._route(ctx)
        except _Stream:
            raise
        except ApiError as e:
            return e.code, _JSON, _dumps(e.status())
        except (BrokenPipeError, ConnectionResetError):
            raise
        except Exception as e:  # pragma: no cover - defensive: never kill the connection thread silently
            log.error("apiserver: %s %s failed:\n%s", method, target, traceback.format_exc())
            return 500, _JSON, _dumps(ApiError(500, "InternalError", f"Internal error occurred: {e}").status())

    # -- routing -------------------------------------------------------------------------------
    def _route(self, ctx: _Ctx) -> tuple[int, str, bytes]:
        path = ctx.path.rstrip("/") or "/"
        for prefix, handler in self.extensions.items():
            if ctx.path.startswith(prefix) or path == prefix.rstrip("/"):
                return self._extension(handler, ctx)
        if path == "/openapi/v2" and ctx.method == "GET":
            return 200, openapi.OPENAPI_V2_PROTOBUF, self._openapi_v2
        static = self._static.get(path)
        if static is not None:
            if ctx.method != "GET":
                raise _method_not_allowed()
            return 200, _JSON, static
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found_path()
        if not rest:
            raise _not_found_path()
        watch = False
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        if (group, version) == (openapi.METRICS_GROUP, openapi.METRICS_VERSION):
            return self._metrics(ctx, rest)
        ns: Optional[str] = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in self._namespaced_plurals.get((group, version), ()):
            ns, rest = rest[1], rest[2:]
        plural, name, sub = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)
        if len(rest) > 3:
            raise _not_found_path()
        rt = self._types.get((group, version, plural))
        if rt is None or (ns is not None and not rt.namespaced) or (name is not None and rt.namespaced and ns is None):
            raise _not_found_path()
        if rt.plural == "secrets" and ctx.method == "GET" and sub is None:
            self._authorize_secret_read(ctx, rt, ns, name, watch)
        if watch or (sub is None and ctx.method == "GET" and _truthy(ctx.query.get("watch"))):
            if ctx.method != "GET":
                raise _method_not_allowed()
            if name is not None:
                ctx.query["fieldSelector"] = ",".join(
                    s for s in (ctx.query.get("fieldSelector"), f"metadata.name={name}") if s)
            self._watch(ctx, rt, ns)
        m = ctx.method
        if name is None:
            if m == "GET":
                return self._list(ctx, rt, ns)
            if m == "POST" and (ns is not None or not rt.namespaced):
                return self._create(ctx, rt, ns)
            if m == "DELETE" and (ns is not None or not rt.namespaced):
                return self._delete_collection(ctx, rt, ns)
            raise _method_not_allowed()
        if sub is None:
            if m == "GET":
                return self._get(ctx, rt, ns, name)
            if m == "PUT":
                return self._update(ctx, rt, ns, name)
            if m == "PATCH":
                return self._patch(ctx, rt, ns, name)
            if m == "DELETE":
                return self._delete(ctx, rt, ns, name)
            raise _method_not_allowed()
        if sub == "status" and rt.kind in defaults.STATUS_SUBRESOURCE:
            if m == "GET":
                return self._get(ctx, rt, ns, name)
            if m == "PUT":
                return self._update(ctx, rt, ns, name, subresource="status")
            if m == "PATCH":
                return self._patch(ctx, rt, ns, name, subresource="status")
            raise _method_not_allowed()
        if sub == "scale" and rt.kind in ("Deployment", "ReplicaSet"):
            if m == "GET":
                return self._get_scale(ctx, rt, ns, name)
            if m in ("PUT", "PATCH"):
                return self._write_scale(ctx, rt, ns, name)
            raise _method_not_allowed()
        if sub == "log" and rt.kind == "Pod":
            if m == "GET":
                return self._pod_log(ctx, ns or "", name)
            raise _method_not_allowed()
        if sub in ("exec", "attach", "portforward", "proxy") and rt.kind == "Pod":
            raise _bad_request(f"pods/{sub} is not supported by the sremarathon twin: its containers are "
                               f"simulated; use pod logs, events and metrics instead")
        if sub == "eviction" and rt.kind == "Pod":
            if m == "POST":
                return self._evict(ctx, rt, ns or "", name)
            raise _method_not_allowed()
        raise _not_found_path()

    # -- serialisation ---------------------------------------------------------------------------
    def _obj_json(self, obj: dict[str, Any]) -> bytes:
        """The object's JSON, cached per resourceVersion. Call with the store lock held."""
        md = obj["metadata"]
        key = (obj["kind"], md.get("namespace", ""), md["name"])
        rv = md.get("resourceVersion", "")
        hit = self._json_cache.get(key)
        if hit is not None and hit[0] == rv:
            return hit[1]
        data = _dumps(obj)
        cache = self._json_cache
        if len(cache) > 2 * len(self.store) + 2048:
            for k in [k for k in cache if k not in self.store]:
                del cache[k]
        cache[key] = (rv, data)
        return data

    # -- ages that clients compute -------------------------------------------------------------
    #: The timestamps of an Event that clients age against their own clock (kubectl describe's
    #: "Age" column, kubectl events): everything else in the twin is served in virtual time.
    EVENT_AGED = ("firstTimestamp", "lastTimestamp", "eventTime")

    def _presents_ages(self, ctx: _Ctx, kind: str) -> bool:
        return kind == "Event" and ctx.actor == self.aged_actor and not self._want_table(ctx)

    def _event_json(self, obj: dict[str, Any]) -> bytes:
        """An Event as served to the agent: the times clients age are moved by (wall now − virtual
        now), so that ``kubectl describe`` (which ages them against the wall clock) shows how long
        ago, in virtual time, they happened. ``metadata.creationTimestamp`` stays virtual."""
        shift = timedelta(seconds=math.floor(time.time() - self.store.clock().timestamp()))
        out = dict(obj)
        for key in self.EVENT_AGED:
            when = tables.parse_time(out.get(key) or "")
            if when is not None:
                out[key] = _rfc3339nano(when + shift) if key == "eventTime" else iso(when + shift)
        series = out.get("series")
        if isinstance(series, dict) and series.get("lastObservedTime"):
            when = tables.parse_time(series["lastObservedTime"])
            if when is not None:
                out["series"] = {**series, "lastObservedTime": _rfc3339nano(when + shift)}
        return _dumps(out)

    def _want_table(self, ctx: _Ctx) -> bool:
        return "as=Table" in ctx.accept

    def _want_metadata(self, ctx: _Ctx) -> bool:
        return "as=PartialObjectMetadata" in ctx.accept

    # -- reads -----------------------------------------------------------------------------------
    def _get(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str], name: str) -> tuple[int, str, bytes]:
        with self.store.lock:
            obj = self.store.get(rt.kind, ns, name)
            if obj is None:
                raise _not_found(rt, name)
            if self._want_table(ctx):
                t = tables.table(rt.kind, [obj], self.store.clock(),
                                 resource_version=obj["metadata"]["resourceVersion"],
                                 include_object=ctx.query.get("includeObject", "Metadata"))
                return 200, _JSON, _dumps(t)
            if self._want_metadata(ctx):
                return 200, _JSON, _dumps({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                           "metadata": obj["metadata"]})
            if self._presents_ages(ctx, rt.kind):
                return 200, _JSON, self._event_json(obj)
            return 200, _JSON, self._obj_json(obj)

    def _select(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str]) -> list[dict[str, Any]]:
        """Objects matching the request's selectors. Call with the store lock held."""
        lp = label_predicate(ctx.query.get("labelSelector"))
        fp = field_predicate(ctx.query.get("fieldSelector"), rt.kind)
        objs = self.store.list(rt.kind, ns)
        if lp is not None:
            objs = [o for o in objs if lp(o)]
        if fp is not None:
            objs = [o for o in objs if fp(o)]
        return objs

    def _list(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str]) -> tuple[int, str, bytes]:
        lp = label_predicate(ctx.query.get("labelSelector"))  # validate before taking the lock
        field_predicate(ctx.query.get("fieldSelector"), rt.kind)
        del lp
        limit = int(ctx.query.get("limit") or 0)
        token = ctx.query.get("continue") or ""
        with self.store.lock:
            objs = self._select(ctx, rt, ns)
            rv = str(self.store.resource_version)
            if token:
                try:
                    start = json.loads(base64.urlsafe_b64decode(token.encode()))["start"]
                except Exception:
                    raise _bad_request(f"continue key is not valid: {token}") from None
                objs = [o for o in objs if [o["metadata"].get("namespace", ""), o["metadata"]["name"]] > start]
            next_token = ""
            remaining = 0
            if limit and len(objs) > limit:
                remaining = len(objs) - limit
                objs = objs[:limit]
                last = objs[-1]["metadata"]
                next_token = base64.urlsafe_b64encode(json.dumps(
                    {"rv": rv, "start": [last.get("namespace", ""), last["name"]]}).encode()).decode()
            if self._want_table(ctx):
                t = tables.table(rt.kind, objs, self.store.clock(), resource_version=rv, continue_token=next_token,
                                 include_object=ctx.query.get("includeObject", "Metadata"))
                return 200, _JSON, _dumps(t)
            meta: dict[str, Any] = {"resourceVersion": rv}
            if next_token:
                meta["continue"] = next_token
                meta["remainingItemCount"] = remaining
            if self._want_metadata(ctx):
                return 200, _JSON, _dumps({
                    "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                    "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                               "metadata": o["metadata"]} for o in objs]})
            head = _dumps({"kind": rt.kind + "List", "apiVersion": rt.group_version, "metadata": meta})
            serialise = self._event_json if self._presents_ages(ctx, rt.kind) else self._obj_json
            items = b",".join(serialise(o) for o in objs)
        return 200, _JSON, head[:-1] + b',"items":[' + items + b"]}"

    # -- watch -----------------------------------------------------------------------------------
    def _watch(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str]) -> None:
        q = ctx.query
        if _truthy(q.get("sendInitialEvents")):
            raise ApiError(422, "Invalid", "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: "
                                           "sendInitialEvents is forbidden for watch unless the WatchList feature "
                                           "gate is enabled", kind="ListOptions",
                           causes=[{"reason": "FieldValueForbidden", "field": "sendInitialEvents",
                                    "message": "Forbidden: sendInitialEvents is forbidden for watch unless the "
                                               "WatchList feature gate is enabled"}])
        lp = label_predicate(q.get("labelSelector"))
        fp = field_predicate(q.get("fieldSelector"), rt.kind)
        as_table = self._want_table(ctx)
        aged = self._presents_ages(ctx, rt.kind)
        include_object = q.get("includeObject", "Metadata")
        bookmarks = _truthy(q.get("allowWatchBookmarks"))
        timeout = float(q.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        rv_param = q.get("resourceVersion") or ""
        conn = ctx.conn
        state = {"headers": True}

        def matches(obj: dict[str, Any]) -> bool:
            return (lp is None or lp(obj)) and (fp is None or fp(obj))

        def frame(type_: str, obj_json: bytes, obj: Optional[dict[str, Any]] = None) -> bytes:
            if as_table and type_ in ("ADDED", "MODIFIED", "DELETED"):
                if obj is None:
                    obj = json.loads(obj_json)
                t = tables.table(rt.kind, [obj], self.store.clock(), resource_version=obj["metadata"].get(
                    "resourceVersion", ""), include_object=include_object, headers=state["headers"])
                state["headers"] = False
                obj_json = _dumps(t)
            elif aged and type_ in ("ADDED", "MODIFIED", "DELETED"):
                obj_json = self._event_json(obj if obj is not None else json.loads(obj_json))
            line = b'{"type":"' + type_.encode() + b'","object":' + obj_json + b"}\n"
            return b"%x\r\n%s\r\n" % (len(line), line)

        def expired(rv: int) -> bytes:
            status = ApiError(410, "Expired", f"too old resource version: {rv} ({self.store.oldest_watchable + 1})")
            return frame("ERROR", _dumps(status.status()))

        out: list[bytes] = []
        matched: set[tuple[str, str]] = set()
        with self.store.lock:
            current = self.store.resource_version
            initial = [o for o in self.store.list(rt.kind, ns) if matches(o)]
            matched = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in initial}
            if rv_param in ("", "0"):
                out.extend(frame("ADDED", self._obj_json(o), o) for o in initial)
                seen = current
                too_old = False
            else:
                try:
                    seen = int(rv_param)
                except ValueError:
                    raise _bad_request(f"invalid resource version: {rv_param}") from None
                too_old = seen < self.store.oldest_watchable
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                     b"Cache-Control: no-cache, private\r\n\r\n")
        try:
            if too_old:
                conn.sendall(expired(seen) + b"0\r\n\r\n")
                raise _Stream()
            if out:
                conn.sendall(b"".join(out))
            ctx.release()  # the watch streams on while the cluster runs
            last_bookmark = time.monotonic()
            while not self._stopping.is_set():
                out = []
                with self.store.lock:
                    if seen < self.store.oldest_watchable:
                        out.append(expired(seen))
                        conn.sendall(b"".join(out) + b"0\r\n\r\n")
                        raise _Stream()
                    events = self.store.events_after(seen, rt.kind)
                    top = self.store.resource_version
                for ev in events:
                    if ns and ev.namespace != ns:
                        continue
                    key = (ev.namespace, ev.name)
                    obj: Optional[dict[str, Any]] = None
                    if lp is not None or fp is not None:
                        obj = json.loads(ev.body)
                        now_matches = matches(obj)
                        was = key in matched
                        if ev.type == "DELETED":
                            matched.discard(key)
                            if not was and not now_matches:
                                continue
                            out.append(frame("DELETED", ev.body.encode(), obj))
                            continue
                        if now_matches:
                            matched.add(key)
                            out.append(frame("MODIFIED" if was and ev.type != "ADDED" else "ADDED",
                                             ev.body.encode(), obj))
                        elif was:
                            matched.discard(key)
                            out.append(frame("DELETED", ev.body.encode(), obj))
                        continue
                    out.append(frame(ev.type, ev.body.encode(), obj))
                seen = max(seen, top)
                now = time.monotonic()
                if bookmarks and (out or now - last_bookmark >= self.watch_bookmark_interval):
                    if now - last_bookmark >= self.watch_bookmark_interval:
                        bm = {"kind": rt.kind, "apiVersion": rt.group_version,
                              "metadata": {"resourceVersion": str(seen), "creationTimestamp": None}}
                        out.append(frame("BOOKMARK", _dumps(bm)))
                        last_bookmark = now
                if out:
                    conn.sendall(b"".join(out))
                if now >= deadline:
                    break
                if _peer_closed(conn):
                    break
                self.store.wait_for_change(seen, min(1.0, max(0.05, deadline - now)))
            conn.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        raise _Stream()

    # -- admission-wrapped writes ----------------------------------------------------------------
    def _mutate(self, ctx: _Ctx, verb: str, rt: ResourceType, ns: Optional[str], name: Optional[str],
                sub: Optional[str], plan: Callable[[], _Plan]) -> tuple[int, str, bytes]:
        dry_run = bool(ctx.query.get("dryRun"))

        def request(body: Any) -> MutationRequest:
            return MutationRequest(actor=ctx.actor, channel="kube", verb=verb, resource=rt.plural, namespace=ns,
                                   name=name, subresource=sub, app=ns, body=body)

        for _attempt in range(25):
            try:
                with self.store.lock:
                    p = plan()
                    after = copy.deepcopy(p.after)
            except ApiError as e:
                try:
                    raw = ctx.body()
                except ApiError:
                    raw = None
                req = request(raw)
                decision = self.admission.decide(req)
                if not decision.allowed:
                    self._record(req, decision, 403)
                    raise self._forbidden(rt, name, decision) from None
                if not dry_run:
                    self._record(req, decision, e.code)
                raise
            req = request(after)
            decision = self.admission.decide(req)
            if not decision.allowed:
                self._record(req, decision, 403)
                raise self._forbidden(rt, name, decision)
            if dry_run:
                return 200 if verb != "create" else 201, _JSON, p.render(after)
            try:
                with self.store.lock:
                    if not p.valid():
                        continue
                    status, payload = p.commit()
            except ApiError as e:
                self._record(req, decision, e.code)
                raise
            self._record(req, decision, status)
            return status, _JSON, payload
        raise _conflict(rt, name or "", "the object is being modified too often; please try again")

    def _authorize_secret_read(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str], name: Optional[str],
                               watch: bool) -> None:
        """Reads that would return Secret data go to the policy point too (``policy.READ_VERBS``);
        a table or metadata-only answer carries no data and needs no decision. Only denials are
        recorded."""
        if self._want_metadata(ctx) or (self._want_table(ctx) and ctx.query.get("includeObject") != "Object"):
            return
        verb = "watch" if watch or _truthy(ctx.query.get("watch")) else ("get" if name else "list")
        req = MutationRequest(actor=ctx.actor, channel="kube", verb=verb, resource=rt.plural, namespace=ns,
                              name=name, app=ns)
        decision = self.admission.decide(req)
        if not decision.allowed:
            self._record(req, decision, 403)
            raise self._forbidden(rt, name, decision)

    def _record(self, req: MutationRequest, decision: Decision, status: int) -> None:
        try:
            self.admission.record(req, decision, status)
        except Exception:  # pragma: no cover - recording must never break the API
            log.exception("admission.record failed")

    @staticmethod
    def _forbidden(rt: ResourceType, name: Optional[str], decision: Decision) -> ApiError:
        return ApiError(403, "Forbidden", decision.message or "forbidden", kind=rt.plural, name=name or "")

    def _rv_unchanged(self, rt: ResourceType, ns: Optional[str], name: str, rv: Optional[str]) -> Callable[[], bool]:
        def check() -> bool:
            cur = self.store.get(rt.kind, ns, name)
            return (cur is None and rv is None) or (cur is not None and cur["metadata"].get("resourceVersion") == rv)
        return check

    # -- create ----------------------------------------------------------------------------------
    def _prepare_new(self, rt: ResourceType, ns: Optional[str], body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise _bad_request("the body of the request was in an unknown format - accepted media types include: "
                               "application/json, application/yaml")
        if body.get("kind") and body["kind"] != rt.kind:
            raise _bad_request(f"the API version in the data ({body.get('apiVersion', '')}) does not match the "
                               f"expected API version ({rt.group_version})" if body.get("apiVersion") not in
                               (None, rt.group_version) else f"expected kind {rt.kind}, got {body['kind']}")
        obj = patching.drop_nulls(body)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.group_version
        md = obj.get("metadata")
        if not isinstance(md, dict):
            md = obj["metadata"] = {}
        if rt.namespaced:
            if md.get("namespace") and ns and md["namespace"] != ns:
                raise _bad_request("the namespace of the provided object does not match the namespace sent on the "
                                   "request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        for f in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "selfLink"):
            md.pop(f, None)
        if md.get("labels") is None:
            md.pop("labels", None)
        return obj

    def _create(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str]) -> tuple[int, str, bytes]:
        body = ctx.body()
        name = (body or {}).get("metadata", {}).get("name") if isinstance(body, dict) else None

        def plan() -> _Plan:
            obj = self._prepare_new(rt, ns, body)
            defaults.apply_defaults(obj)
            defaults.initial_status(obj)
            defaults.validate(obj)
            if rt.kind == "Service":
                self._allocate_service(obj)
            oname = obj["metadata"].get("name")
            if oname and self.store.get(rt.kind, ns, oname) is not None:
                raise ApiError(409, "AlreadyExists", f'{_qualified(rt)} "{oname}" already exists',
                               kind=rt.plural, name=oname)

            def commit() -> tuple[int, bytes]:
                created = self.store.create(obj)
                return 201, self._obj_json(created)

            return _Plan(obj, lambda: not oname or self.store.get(rt.kind, ns, oname) is None, commit)

        return self._mutate(ctx, "create", rt, ns, name, None, plan)

    def _allocate_service(self, obj: dict[str, Any]) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("type") == "ExternalName":
            return
        if spec.get("clusterIP") == "None":
            spec["clusterIPs"] = ["None"]
            return
        used = {(s.get("spec") or {}).get("clusterIP") for s in self.store.list("Service")}
        if not spec.get("clusterIP"):
            i = 10
            while f"10.96.{i // 256}.{i % 256}" in used:
                i += 1
            spec["clusterIP"] = f"10.96.{i // 256}.{i % 256}"
        spec["clusterIPs"] = [spec["clusterIP"]]
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            used_ports = {p.get("nodePort") for s in self.store.list("Service")
                          for p in (s.get("spec") or {}).get("ports") or []}
            nxt = 30000
            for p in spec.get("ports") or []:
                if not p.get("nodePort"):
                    while nxt in used_ports:
                        nxt += 1
                    p["nodePort"] = nxt
                    used_ports.add(nxt)

    # -- update / patch --------------------------------------------------------------------------
    def _finish_update(self, rt: ResourceType, current: dict[str, Any], new: dict[str, Any],
                       subresource: Optional[str]) -> dict[str, Any]:
        md = new.get("metadata")
        if not isinstance(md, dict):
            md = new["metadata"] = {}
        cur_md = current["metadata"]
        new["kind"], new["apiVersion"] = rt.kind, rt.group_version
        md["name"] = cur_md["name"]
        if rt.namespaced:
            md["namespace"] = cur_md["namespace"]
        if not md.get("resourceVersion"):
            md["resourceVersion"] = cur_md["resourceVersion"]
        if subresource == "status":
            result = copy.deepcopy(current)
            result["status"] = new.get("status")
            if result["status"] is None:
                result.pop("status")
            result["metadata"]["resourceVersion"] = md["resourceVersion"]
            return result
        if rt.kind in defaults.STATUS_SUBRESOURCE:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        for f in ("deletionTimestamp", "generation", "uid", "creationTimestamp"):
            if f in cur_md:
                md[f] = cur_md[f]
        if md.get("labels") is None:
            md.pop("labels", None)
        untouched_spec = "spec" in current and _canonical(new.get("spec")) == _canonical(current["spec"])
        untouched_template = rt.kind in ("Deployment", "ReplicaSet") and \
            _canonical((new.get("spec") or {}).get("template")) == \
            _canonical((current.get("spec") or {}).get("template"))
        pre_default_template = copy.deepcopy((new.get("spec") or {}).get("template"))
        # Objects made by the simulation need not carry the API's defaults. Default an update only
        # if the stored object is itself defaulted, and never introduce defaults into what the
        # client left alone: a changed pod template starts a rollout, and ``rollout undo`` must
        # restore a template byte for byte to reuse the old ReplicaSet.
        if defaults.apply_defaults(copy.deepcopy(current)) == current:
            defaults.apply_defaults(new)
        if untouched_spec:
            new["spec"] = copy.deepcopy(current["spec"])
        elif untouched_template and isinstance(new.get("spec"), dict) and "template" in current.get("spec", {}):
            new["spec"]["template"] = copy.deepcopy(current["spec"]["template"])
        elif rt.kind == "Deployment" and isinstance(new.get("spec"), dict):
            self._restore_revision_template(current, new, pre_default_template)
        defaults.validate(new, current)
        if rt.kind == "Service":
            spec = new.setdefault("spec", {})
            cur_spec = current.get("spec") or {}
            if not spec.get("clusterIP") and cur_spec.get("clusterIP"):
                spec["clusterIP"] = cur_spec["clusterIP"]
            self._allocate_service(new)
        return new

    def _restore_revision_template(self, current: dict[str, Any], new: dict[str, Any],
                                   sent: Optional[dict[str, Any]]) -> None:
        """If the new pod template is one of the deployment's ReplicaSet templates (``rollout undo``,
        or setting the old image back), use that ReplicaSet's template verbatim, minus
        ``pod-template-hash``: kubectl sends Go's empty values (``resources: {}``,
        ``creationTimestamp: null``) that a JSON-hashing controller would take for a new template."""
        candidates = [_canonical(sent), _canonical(new["spec"].get("template"))]
        uid = current["metadata"].get("uid")
        for rs in self.store.list("ReplicaSet", current["metadata"].get("namespace")):
            if not any(r.get("uid") == uid for r in rs["metadata"].get("ownerReferences") or []):
                continue
            template = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
            labels = (template.get("metadata") or {}).get("labels") or {}
            labels.pop("pod-template-hash", None)
            if _canonical(template) in candidates:
                new["spec"]["template"] = template
                return

    def _update(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str], name: str,
                subresource: Optional[str] = None) -> tuple[int, str, bytes]:
        body = ctx.body()
        if not isinstance(body, dict):
            raise _bad_request("the body of the request was in an unknown format")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise _bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        if body.get("kind") and body["kind"] != rt.kind:
            raise _bad_request(f"expected kind {rt.kind}, got {body['kind']}")

        def plan() -> _Plan:
            current = self.store.get(rt.kind, ns, name)
            if current is None:
                raise _not_found(rt, name)
            new = self._finish_update(rt, current, patching.drop_nulls(body), subresource)
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                return 200, self._obj_json(self._replace(rt, new))

            return _Plan(new, self._rv_unchanged(rt, ns, name, base_rv), commit)

        return self._mutate(ctx, "update", rt, ns, name, subresource, plan)

    def _replace(self, rt: ResourceType, new: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.store.replace(new)
        except ApiError as e:
            if e.reason == "Conflict":
                raise _conflict(rt, new["metadata"]["name"]) from None
            raise

    def _apply_patch_body(self, ctx: _Ctx, kind: str, current: Optional[dict[str, Any]], body: Any) -> dict[str, Any]:
        ctype = ctx.content_type
        base = current if current is not None else {}
        if ctype == "application/merge-patch+json":
            if not isinstance(body, dict):
                raise _bad_request("merge patch must be a JSON object")
            return patching.merge_patch(base, body)
        if ctype == "application/json-patch+json":
            return patching.json_patch(base, body)
        if ctype == "application/strategic-merge-patch+json":
            return patching.strategic_merge_patch(base, body, kind)
        if ctype == "application/apply-patch+yaml":
            return patching.apply_patch(current, body, kind)
        raise ApiError(415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types include: "
                       "application/json-patch+json, application/merge-patch+json, "
                       "application/apply-patch+yaml, application/strategic-merge-patch+json")

    def _patch(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str], name: str,
               subresource: Optional[str] = None) -> tuple[int, str, bytes]:
        body = ctx.body()
        if body is None:
            raise _bad_request("empty patch")
        is_apply = ctx.content_type == "application/apply-patch+yaml"
        if is_apply and subresource is None and not ctx.query.get("fieldManager"):
            raise _bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")

        def plan() -> _Plan:
            current = self.store.get(rt.kind, ns, name)
            if current is None:
                if is_apply and subresource is None:
                    obj = self._prepare_new(rt, ns, body)
                    obj["metadata"]["name"] = name
                    obj = patching.apply_patch(None, obj, rt.kind)
                    obj["kind"], obj["apiVersion"] = rt.kind, rt.group_version
                    self._set_managed(obj, ctx)
                    defaults.apply_defaults(obj)
                    defaults.initial_status(obj)
                    defaults.validate(obj)
                    if rt.kind == "Service":
                        self._allocate_service(obj)

                    def create() -> tuple[int, bytes]:
                        return 201, self._obj_json(self.store.create(obj))

                    return _Plan(obj, lambda: self.store.get(rt.kind, ns, name) is None, create)
                raise _not_found(rt, name)
            patched = self._apply_patch_body(ctx, rt.kind, current, body)
            if not isinstance(patched, dict):
                raise _bad_request("the patch did not produce an object")
            if is_apply:
                self._set_managed(patched, ctx)
            sent_rv = (patched.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise _conflict(rt, name)
            new = self._finish_update(rt, current, patched, subresource)
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                return 200, self._obj_json(self._replace(rt, new))

            return _Plan(new, self._rv_unchanged(rt, ns, name, base_rv), commit)

        return self._mutate(ctx, "patch", rt, ns, name, subresource, plan)

    def _set_managed(self, obj: dict[str, Any], ctx: _Ctx) -> None:
        manager = ctx.query.get("fieldManager") or "unknown"
        md = obj.setdefault("metadata", {})
        entries = [m for m in md.get("managedFields") or [] if m.get("manager") != manager
                   or m.get("operation") != "Apply"]
        entries.append({"manager": manager, "operation": "Apply", "apiVersion": obj.get("apiVersion", ""),
                        "time": iso(self.store.clock()), "fieldsType": "FieldsV1", "fieldsV1": {}})
        md["managedFields"] = entries

    # -- scale -----------------------------------------------------------------------------------
    @staticmethod
    def _scale_of(obj: dict[str, Any]) -> dict[str, Any]:
        md = obj["metadata"]
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in md},
                "spec": {"replicas": int(spec.get("replicas") or 0)},
                "status": {"replicas": int(status.get("replicas") or 0),
                           "selector": selector_string(spec.get("selector")).replace("<none>", "")}}

    def _get_scale(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str], name: str) -> tuple[int, str, bytes]:
        with self.store.lock:
            obj = self.store.get(rt.kind, ns, name)
            if obj is None:
                raise _not_found(rt, name)
            return 200, _JSON, _dumps(self._scale_of(obj))

    def _write_scale(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str], name: str) -> tuple[int, str, bytes]:
        body = ctx.body()
        verb = "update" if ctx.method == "PUT" else "patch"

        def plan() -> _Plan:
            current = self.store.get(rt.kind, ns, name)
            if current is None:
                raise _not_found(rt, name)
            scale = self._scale_of(current)
            if verb == "update":
                if not isinstance(body, dict):
                    raise _bad_request("the body of the request was in an unknown format")
                new_scale = body
            else:
                new_scale = self._apply_patch_body(ctx, "Scale", scale, body)
            replicas = (new_scale.get("spec") or {}).get("replicas")
            if replicas is None:
                replicas = 0
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise ApiError(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
                                               f'{replicas}: must be greater than or equal to 0', kind="Scale",
                               name=name, causes=[{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                                   "message": f"Invalid value: {replicas}: must be greater than or "
                                                              f"equal to 0"}])
            sent_rv = (new_scale.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise _conflict(rt, name)
            new = copy.deepcopy(current)
            new.setdefault("spec", {})["replicas"] = replicas
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                return 200, _dumps(self._scale_of(self._replace(rt, new)))

            return _Plan(new, self._rv_unchanged(rt, ns, name, base_rv), commit,
                         lambda obj: _dumps(self._scale_of(obj)))

        return self._mutate(ctx, verb, rt, ns, name, "scale", plan)

    # -- delete ----------------------------------------------------------------------------------
    def _delete_options(self, ctx: _Ctx) -> dict[str, Any]:
        body = ctx.body() if ctx.raw_body else None
        opts = dict(body) if isinstance(body, dict) else {}
        for k in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents"):
            if k in ctx.query:
                opts[k] = ctx.query[k]
        return opts

    @staticmethod
    def _check_preconditions(rt: ResourceType, obj: dict[str, Any], opts: dict[str, Any]) -> None:
        pre = opts.get("preconditions") or {}
        md = obj["metadata"]
        if pre.get("uid") and pre["uid"] != md.get("uid"):
            raise _conflict(rt, md["name"], f"Precondition failed: UID in precondition: {pre['uid']}, "
                                            f"UID in object meta: {md.get('uid')}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
            raise _conflict(rt, md["name"], f"Precondition failed: ResourceVersion in precondition: "
                                            f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                            f"{md.get('resourceVersion')}")

    def _delete_now(self, rt: ResourceType, obj: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
        """Delete ``obj`` and (unless orphaning) its dependents. Store lock held."""
        md = obj["metadata"]
        orphan = opts.get("propagationPolicy") == "Orphan" or _truthy(str(opts.get("orphanDependents", "")))
        deleted = self.store.delete(rt.kind, md.get("namespace"), md["name"])
        uid = md.get("uid")
        if rt.kind == "Namespace":
            for other in RESOURCE_TYPES:
                if other.namespaced:
                    for o in list(self.store.list(other.kind, md["name"])):
                        self.store.delete(other.kind, md["name"], o["metadata"]["name"])
            return deleted
        if uid:
            self._cascade(uid, md.get("namespace"), orphan)
        return deleted

    def _cascade(self, uid: str, ns: Optional[str], orphan: bool) -> None:
        for other in RESOURCE_TYPES:
            for o in list(self.store.list(other.kind, ns if other.namespaced else None)):
                refs = o["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                if orphan:
                    new = copy.deepcopy(o)
                    new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    if not new["metadata"]["ownerReferences"]:
                        del new["metadata"]["ownerReferences"]
                    self.store.replace(new, check_rv=False)
                else:
                    md = o["metadata"]
                    if self.store.get(other.kind, md.get("namespace"), md["name"]) is not None:
                        self.store.delete(other.kind, md.get("namespace"), md["name"])
                        if md.get("uid"):
                            self._cascade(md["uid"], md.get("namespace"), False)

    def _delete_response(self, rt: ResourceType, deleted: dict[str, Any]) -> bytes:
        if rt.kind == "Pod":
            return _dumps(deleted)
        md = deleted["metadata"]
        details = {"name": md["name"], "group": rt.group, "kind": rt.plural, "uid": md.get("uid", "")}
        return _dumps(_status_success(200, details))

    def _delete(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str], name: str) -> tuple[int, str, bytes]:
        opts = self._delete_options(ctx)

        def plan() -> _Plan:
            current = self.store.get(rt.kind, ns, name)
            if current is None:
                raise _not_found(rt, name)
            self._check_preconditions(rt, current, opts)
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                deleted = self._delete_now(rt, current, opts)
                return 200, self._delete_response(rt, deleted)

            return _Plan(current, self._rv_unchanged(rt, ns, name, base_rv), commit,
                         lambda obj: self._delete_response(rt, obj))

        return self._mutate(ctx, "delete", rt, ns, name, None, plan)

    def _delete_collection(self, ctx: _Ctx, rt: ResourceType, ns: Optional[str]) -> tuple[int, str, bytes]:
        opts = self._delete_options(ctx)

        def plan() -> _Plan:
            victims = self._select(ctx, rt, ns)
            snapshot = {"kind": rt.kind + "List", "apiVersion": rt.group_version, "metadata": {},
                        "items": victims}

            def commit() -> tuple[int, bytes]:
                gone = []
                for v in victims:
                    md = v["metadata"]
                    if self.store.get(rt.kind, md.get("namespace"), md["name"]) is v:
                        gone.append(self._delete_now(rt, v, opts))
                return 200, _dumps({"kind": rt.kind + "List", "apiVersion": rt.group_version,
                                    "metadata": {"resourceVersion": str(self.store.resource_version)},
                                    "items": gone})

            return _Plan(snapshot, lambda: True, commit)

        return self._mutate(ctx, "delete", rt, ns, None, None, plan)

    # -- pods/eviction and pods/log --------------------------------------------------------------
    def _evict(self, ctx: _Ctx, rt: ResourceType, ns: str, name: str) -> tuple[int, str, bytes]:
        body = ctx.body() or {}
        if not isinstance(body, dict):
            raise _bad_request("the body of the request was in an unknown format")
        ev_name = (body.get("metadata") or {}).get("name")
        if ev_name and ev_name != name:
            raise _bad_request("name in URL does not match name in Eviction object")
        opts = dict(body.get("deleteOptions") or {})

        def plan() -> _Plan:
            current = self.store.get("Pod", ns, name)
            if current is None:
                raise _not_found(rt, name)
            self._check_preconditions(rt, current, opts)
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                self._delete_now(rt, current, opts)
                return 201, _dumps(_status_success(201))

            return _Plan(current, self._rv_unchanged(rt, ns, name, base_rv), commit,
                         lambda obj: _dumps(_status_success(201)))

        return self._mutate(ctx, "evict", rt, ns, name, "eviction", plan)

    def _pod_log(self, ctx: _Ctx, ns: str, name: str) -> tuple[int, str, bytes]:
        q = ctx.query
        rt = BY_KIND["Pod"]
        previous = _truthy(q.get("previous"))
        with self.store.lock:
            pod = self.store.get("Pod", ns, name)
            if pod is None:
                raise _not_found(rt, name)
            spec, status = pod.get("spec") or {}, pod.get("status") or {}
            names = [c.get("name") for c in spec.get("containers") or []]
            init_names = [c.get("name") for c in spec.get("initContainers") or []]
            container = q.get("container") or (pod["metadata"].get("annotations") or {}).get(
                "kubectl.kubernetes.io/default-container")
            if not container:
                if len(names) == 1:
                    container = names[0]
                else:
                    msg = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
                    if init_names:
                        msg += f" or one of the init containers: [{' '.join(init_names)}]"
                    raise _bad_request(msg)
            if container not in names and container not in init_names:
                raise _bad_request(f"container {container} is not valid for pod {name}")
            statuses = {s.get("name"): s for s in (status.get("containerStatuses") or []) +
                        (status.get("initContainerStatuses") or [])}
            cs = statuses.get(container)
            no_previous = previous and not ((cs or {}).get("lastState") or {}).get("terminated")
            waiting = (((cs or {}).get("state") or {}).get("waiting") or {}).get("reason")
            if not previous and ((cs is None and status.get("phase") == "Pending")
                                 or waiting in ("ContainerCreating", "PodInitializing")):
                raise _bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                                   f'{waiting or "ContainerCreating"}')
            now = self.store.clock()
        entries = list(self.telemetry.pod_log(ns, name, container, previous) or [])
        if no_previous and not entries:
            raise _bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        if q.get("sinceSeconds"):
            try:
                cutoff = now - timedelta(seconds=int(q["sinceSeconds"]))
            except ValueError:
                raise _bad_request(f"invalid sinceSeconds: {q['sinceSeconds']}") from None
            entries = [e for e in entries if _aware(e[0]) >= cutoff]
        elif q.get("sinceTime"):
            cutoff = tables.parse_time(q["sinceTime"])
            if cutoff is None:
                raise _bad_request(f"invalid sinceTime: {q['sinceTime']}")
            entries = [e for e in entries if _aware(e[0]) >= cutoff]
        if q.get("tailLines"):
            try:
                n = int(q["tailLines"])
            except ValueError:
                raise _bad_request(f"invalid tailLines: {q['tailLines']}") from None
            entries = entries[-n:] if n > 0 else []
        stamp = _truthy(q.get("timestamps"))
        text = "".join((f"{_rfc3339nano(_aware(t))} " if stamp else "") + line.rstrip("\n") + "\n"
                       for t, line in entries)
        data = text.encode()
        if q.get("limitBytes"):
            try:
                data = data[:max(0, int(q["limitBytes"]))]
            except ValueError:
                raise _bad_request(f"invalid limitBytes: {q['limitBytes']}") from None
        return 200, "text/plain", data

    # -- metrics.k8s.io --------------------------------------------------------------------------
    def _metrics(self, ctx: _Ctx, rest: list[str]) -> tuple[int, str, bytes]:
        if ctx.method != "GET":
            raise _method_not_allowed()
        ns: Optional[str] = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] == "pods":
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in ("nodes", "pods") or len(rest) > 2:
            raise _not_found_path()
        resource, name = rest[0], (rest[1] if len(rest) > 1 else None)
        if resource == "pods" and name is not None and ns is None:
            raise _not_found_path()
        lp = label_predicate(ctx.query.get("labelSelector"))
        with self.store.lock:
            now = self.store.clock()
            kind = "Node" if resource == "nodes" else "Pod"
            objs = self.store.list(kind, ns)
            if name is not None:
                objs = [o for o in objs if o["metadata"]["name"] == name]
            if lp is not None:
                objs = [o for o in objs if lp(o)]
            if kind == "Pod":
                objs = [o for o in objs if (o.get("status") or {}).get("phase") == "Running"]
            metas = [copy.deepcopy(o["metadata"]) for o in objs]
        stamp = iso(now)
        items = []
        for md in metas:
            meta = {"name": md["name"], "creationTimestamp": stamp, "labels": md.get("labels") or {}}
            if kind == "Node":
                cpu, mem = self.telemetry.node_usage(md["name"])
                items.append({"metadata": meta, "timestamp": stamp, "window": "30s", "usage": _usage(cpu, mem)})
            else:
                meta["namespace"] = md["namespace"]
                usage = self.telemetry.pod_usage(md["namespace"], md["name"]) or {}
                if not usage:
                    continue
                items.append({"metadata": meta, "timestamp": stamp, "window": "30s",
                              "containers": [{"name": c, "usage": _usage(*u)} for c, u in usage.items()]})
        item_kind = "NodeMetrics" if kind == "Node" else "PodMetrics"
        gv = f"{openapi.METRICS_GROUP}/{openapi.METRICS_VERSION}"
        for it in items:
            it["kind"], it["apiVersion"] = item_kind, gv
        if name is not None:
            if not items:
                raise ApiError(404, "NotFound", f'{resource.rstrip("s")}metrics.metrics.k8s.io "{name}" not found',
                               kind=resource, name=name)
            return 200, _JSON, _dumps(items[0])
        return 200, _JSON, _dumps({"kind": item_kind + "List", "apiVersion": gv, "metadata": {}, "items": items})

    # -- extensions ------------------------------------------------------------------------------
    def _extension(self, handler: ExtensionHandler, ctx: _Ctx) -> tuple[int, str, bytes]:
        body = ctx.body() if ctx.raw_body else None
        resp = handler(Request(ctx.method, ctx.path, dict(ctx.query), body, ctx.actor, dict(ctx.headers)))
        if isinstance(resp.body, (bytes, bytearray)):
            return resp.status, resp.content_type, bytes(resp.body)
        if isinstance(resp.body, str) and not resp.content_type.startswith("application/json"):
            return resp.status, resp.content_type, resp.body.encode()
        return resp.status, resp.content_type, _dumps(resp.body)


def _canonical(v: Any) -> Any:
    """``v`` without nulls and empty maps/lists: equal for Go's typed decoding, so equal here."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            c = _canonical(x)
            if c is not None and c != {} and c != []:
                out[k] = c
        return out
    if isinstance(v, list):
        return [_canonical(x) for x in v]
    return v


def _usage(cpu_millicores: int, memory_bytes: int) -> dict[str, str]:
    return {"cpu": f"{int(cpu_millicores)}m", "memory": f"{int(memory_bytes) // 1024}Ki"}


def _aware(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _peer_closed(conn: socket.socket) -> bool:
    """True once a (watching, hence silent) client has gone away."""
    try:
        r, _, _ = select.select([conn], [], [], 0)
        if not r:
            return False
        if isinstance(conn, ssl.SSLSocket):
            conn.setblocking(False)
            try:
                return conn.recv(1) == b""
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return False
            finally:
                conn.setblocking(True)
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


_REASONS = {s.value: s.phrase for s in HTTPStatus}
