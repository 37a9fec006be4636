"""The twin's Kubernetes API server: a faithful REST subset over the :class:`Store`, on loopback.

``ApiServer(store, tokens=..., admission=..., telemetry=...)`` serves, on ``127.0.0.1:<port>``:

* discovery (``/version``, ``/api``, ``/apis``, ``/api/v1``, ``/apis/{g}/{v}``), OpenAPI v3
  (``/openapi/v3`` …), a minimal protobuf OpenAPI v2 (for kubectl ≤ 1.28's validation check)
  and ``metrics.k8s.io/v1beta1`` for ``kubectl top``;
* access reviews (``SelfSubjectAccessReview``, ``SelfSubjectRulesReview``) answered by the policy
  point (see :mod:`.api_access`);
* CRUD for every type in :data:`RESOURCE_TYPES`: list (label/field selectors, ``limit`` and
  ``continue``, cluster-wide), get, create, update (``resourceVersion`` conflicts), delete
  (with ``ownerReferences`` cascade and DeleteOptions preconditions), deletecollection, and
  PATCH in all four flavours (see :mod:`.patch`); request bodies in JSON, YAML or Kubernetes
  protobuf (see :mod:`.protobuf`), responses always JSON;
* ``meta.k8s.io/v1`` Table and PartialObjectMetadata responses when ``Accept`` asks for them
  (see :mod:`.tables`; ages against the virtual clock);
* watch (chunked NDJSON, resumption from a resourceVersion, 410 ``Expired``, BOOKMARKs,
  ``sendInitialEvents=true`` refused with 422 so clients fall back to list+watch);
* subresources ``status``, ``scale`` (``autoscaling/v1 Scale``), ``pods/log``, ``pods/eviction``,
  ``serviceaccounts/token`` (``authentication.k8s.io/v1 TokenRequest``, :mod:`.serviceaccounts`),
  and ``pods/exec``/``pods/attach`` over WebSocket into the simulated containers (see
  :mod:`.api_exec`; ``portforward`` answers 400 with an explanation);
* extension handlers under path prefixes (``/sremarathon/v1/`` …), behind the same tokens;
* the service proxy (``/api/v1/namespaces/{ns}/services/[scheme:]{name}[:port]/proxy/…``, any
  method) for the Services a ``service_proxy`` callable answers for (the ``monitoring``
  namespace's: Prometheus …); other Services answer 503, an unknown one 404.

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

Deletion is immediate (no graceful termination) unless the object has ``metadata.finalizers``:
then it gets a ``deletionTimestamp`` and goes once updates have removed them all (claims and
volumes carry their in-use protection, :mod:`.volumes`). Deleting an object deletes its
dependents (objects whose ``ownerReferences`` name its uid, recursively) unless
``propagationPolicy=Orphan``, and deleting a Namespace deletes everything in it. Objects
written through the API get the real server's defaults (:mod:`.defaults`) and validation;
``status`` of Pods, Deployments, ReplicaSets, Nodes, Namespaces and Services is only writable
through ``/status``. Server-side apply merges but does not track field ownership.

The server is a small threaded HTTP/1.1 server of its own (one thread per connection,
keep-alive, ``TCP_NODELAY``); object JSON is serialised once per resourceVersion and reused.
Writes compute their result under ``store.lock``, ask admission outside it, then commit under
the lock if the object has not moved meanwhile (otherwise they recompute).
The writes are :mod:`.api_writes`; what the server's parts share (request context, write plans,
``Status`` errors, JSON) is :mod:`.api_common`.
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
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from http import HTTPStatus
from typing import Any, Optional, Protocol
from urllib.parse import parse_qsl, unquote

from ..k8s.selectors import field_predicate, label_predicate
from ..k8s.store import BY_KIND, RESOURCE_TYPES, REVIEW_KINDS, ApiError, ResourceType, Store, iso
from ..serving.http import Admission, ExtensionHandler, Request, Response, ServiceProxy
from ..serving.loopback import LoopbackServer
from . import defaults, openapi, tables
from .api_access import AccessReviews
from .api_common import (
    JSON,
    Ctx,
    Stream,
    bad_request,
    dumps,
    method_not_allowed,
    no_such_path,
    object_not_found,
    rfc3339nano,
    truthy,
)
from .api_exec import PodExec, PodRuntime
from .api_hpa_v1 import HPA_V1, HpaV1
from .api_writes import ObjectWrites

log = logging.getLogger(__name__)

__all__ = ["Admission", "ApiServer", "ClusterTelemetry", "ExtensionHandler", "Request", "Response"]


# -- public contract ----------------------------------------------------------------------------

class ClusterTelemetry(Protocol):
    def pod_log(self, namespace: str, pod: str, container: str | None,
                previous: bool) -> list[tuple[datetime, str]]: ...

    def pod_usage(self, namespace: str, pod: str) -> dict[str, tuple[int, int]]: ...  # container -> (mCPU, bytes)

    def node_usage(self, node: str) -> tuple[int, int]: ...


class ApiServer(AccessReviews, PodExec, HpaV1, ObjectWrites, LoopbackServer):
    def __init__(self, store: Store, *, tokens: dict[str, str], admission: Admission,
                 telemetry: ClusterTelemetry, extensions: dict[str, ExtensionHandler] | None = None,
                 service_proxy: ServiceProxy | None = None, host: str = "127.0.0.1", port: int = 0,
                 runtime: Optional[PodRuntime] = None,
                 on_write: Optional[Callable[[dict[str, Any]], None]] = None) -> None:
        super().__init__("apiserver", host, port)
        self.store = store
        self.on_write = on_write  # the controllers' reaction to a committed write (ObjectWrites)
        self.runtime = runtime  # the containers exec and attach run in (None: they answer 400)
        self.tokens = dict(tokens)
        self.admission = admission
        self.telemetry = telemetry
        self.extensions = dict(sorted((extensions or {}).items(), key=lambda kv: -len(kv[0])))
        self.service_proxy = service_proxy
        self._json_cache: dict[tuple[str, str, str], tuple[str, bytes]] = {}
        self._types: dict[tuple[str, str, str], ResourceType] = {
            (rt.group, rt.version, rt.plural): rt for rt in (*RESOURCE_TYPES, HPA_V1)}
        self._namespaced_plurals: dict[tuple[str, str], set[str]] = {}
        for rt in (*RESOURCE_TYPES, HPA_V1):
            if rt.namespaced:
                self._namespaced_plurals.setdefault((rt.group, rt.version), set()).add(rt.plural)
        self._namespaced_plurals.setdefault((openapi.METRICS_GROUP, openapi.METRICS_VERSION), set()).add("pods")
        self._static: dict[str, bytes] = {
            "/version": dumps(openapi.SERVER_VERSION),
            "/api": dumps(openapi.api_versions()),
            "/apis": dumps(openapi.api_group_list()),
            "/": dumps(openapi.root_paths()),
        }
        for (g, v) in list(openapi.group_versions()) + [(openapi.METRICS_GROUP, openapi.METRICS_VERSION)]:
            prefix = f"/apis/{g}/{v}" if g else f"/api/{v}"
            self._static[prefix] = dumps(openapi.resource_list(g, v))
            if g:
                self._static[f"/apis/{g}"] = dumps(openapi.api_group(g))
        self.watch_bookmark_interval = 60.0  # wall seconds between BOOKMARKs on an idle watch
        self.aged_actor = "agent"  # whose Event timestamps are served for client-side ages (_event_json)
        self._openapi_v2 = openapi.openapi_v2_protobuf()

    def _wake_streams(self) -> None:
        self.store.wake_watchers()

    def _respond(self, conn: Any, method: str, target: str, headers: dict[str, str], body: bytes,
                 keep_alive: bool) -> bool:
        try:
            status, ctype, payload = self._dispatch(method, target, headers, body, conn)
        except Stream:
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
                    return 200, JSON, self._static["/version"]
                raise ApiError(401, "Unauthorized", "Unauthorized")
            with self.gate(actor, method, path) as held:
                ctx = Ctx(method, path, query, headers, body, actor, conn, held.release, raw_query=qs)
                return self._route(ctx)
        except Stream:
            raise
        except ApiError as e:
            return e.code, JSON, dumps(e.status()) + b"\n"  # Go's json.Encoder ends the body so
        except (BrokenPipeError, ConnectionResetError):
            raise
        except Exception as e:  # pragma: no cover - defensive: never kill the connection thread silently
            log.error("apiserver: %s %s failed:\n%s", method, target, traceback.format_exc())
            return 500, JSON, dumps(ApiError(500, "InternalError", f"Internal error occurred: {e}").status())

    # -- routing -------------------------------------------------------------------------------
    def _route(self, ctx: Ctx) -> tuple[int, str, bytes]:
        path = ctx.path.rstrip("/") or "/"
        for prefix, handler in self.extensions.items():
            if ctx.path.startswith(prefix) or path == prefix.rstrip("/"):
                return self._extension(handler, ctx)
        if path == "/openapi/v2" and ctx.method == "GET":
            return 200, openapi.OPENAPI_V2_PROTOBUF, self._openapi_v2
        static = self._static.get(path) or (_openapi_v3(path) if path.startswith("/openapi/v3") else None)
        if static is not None:
            if ctx.method != "GET":
                raise method_not_allowed()
            return 200, JSON, static
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise no_such_path()
        if not rest:
            raise no_such_path()
        watch = False
        if rest[0] == "watch":
            watch, rest = True, rest[1:]
        if (group, version) == (openapi.METRICS_GROUP, openapi.METRICS_VERSION):
            return self._metrics(ctx, rest)
        ns: Optional[str] = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in self._namespaced_plurals.get((group, version), ()):
            ns, rest = rest[1], rest[2:]
        if ns is not None and group == "" and len(rest) >= 3 and rest[0] == "services" and rest[2] == "proxy":
            return self._service_proxy(ctx, ns, rest[1])
        plural, name, sub = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)
        if len(rest) > 3:
            raise no_such_path()
        rt = self._types.get((group, version, plural))
        if rt is None or (ns is not None and not rt.namespaced) or (name is not None and rt.namespaced and ns is None):
            raise no_such_path()
        self.store.keep_history(rt.kind)  # what a client asks about it may watch from what it got
        if rt is HPA_V1:  # served by conversion from the stored autoscaling/v2 objects
            return self._hpa_v1(ctx, ns, name, sub, watch)
        if rt.kind in REVIEW_KINDS:
            if ctx.method == "POST" and name is None and not watch:
                return self._review(ctx, rt)
            raise method_not_allowed()
        if rt.plural == "secrets" and ctx.method == "GET" and sub is None:
            self._authorize_secret_read(ctx, rt, ns, name, watch)
        if watch or (sub is None and ctx.method == "GET" and truthy(ctx.query.get("watch"))):
            if ctx.method != "GET":
                raise method_not_allowed()
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
            raise method_not_allowed()
        if sub is None:
            if m == "GET":
                return self._get(ctx, rt, ns, name)
            if m == "PUT":
                return self._update(ctx, rt, ns, name)
            if m == "PATCH":
                return self._patch(ctx, rt, ns, name)
            if m == "DELETE":
                return self._delete(ctx, rt, ns, name)
            raise method_not_allowed()
        if sub == "status" and rt.kind in defaults.STATUS_SUBRESOURCE:
            if m == "GET":
                return self._get(ctx, rt, ns, name)
            if m == "PUT":
                return self._update(ctx, rt, ns, name, subresource="status")
            if m == "PATCH":
                return self._patch(ctx, rt, ns, name, subresource="status")
            raise method_not_allowed()
        if sub == "scale" and rt.kind in openapi.SCALE_KINDS:
            if m == "GET":
                return self._get_scale(ctx, rt, ns, name)
            if m in ("PUT", "PATCH"):
                return self._write_scale(ctx, rt, ns, name)
            raise method_not_allowed()
        if sub == "log" and rt.kind == "Pod":
            if m == "GET":
                return self._pod_log(ctx, ns or "", name)
            raise method_not_allowed()
        if sub in ("exec", "attach", "portforward") and rt.kind == "Pod":
            self._pod_stream(ctx, ns or "", name, sub)
        if sub == "proxy" and rt.kind == "Pod":
            raise bad_request(f"pods/{sub} is not supported by the sremarathon twin: its containers are "
                               f"simulated; use pod logs, events and metrics instead")
        if sub == "eviction" and rt.kind == "Pod":
            if m == "POST":
                return self._evict(ctx, rt, ns or "", name)
            raise method_not_allowed()
        if sub == "token" and rt.kind == "ServiceAccount":
            if m == "POST":
                return self._create_token(ctx, rt, ns or "", name)
            raise method_not_allowed()
        raise no_such_path()

    # -- serialisation ---------------------------------------------------------------------------
    def _obj_json(self, obj: dict[str, Any]) -> bytes:
        """The object's JSON, cached per resourceVersion. Call with the store lock held."""
        md = obj["metadata"]
        key = (obj["kind"], md.get("namespace", ""), md["name"])
        rv = md.get("resourceVersion", "")
        hit = self._json_cache.get(key)
        if hit is not None and hit[0] == rv:
            return hit[1]
        data = dumps(obj)
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

    def _presents_ages(self, ctx: Ctx, kind: str) -> bool:
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
                out[key] = rfc3339nano(when + shift) if key == "eventTime" else iso(when + shift)
        series = out.get("series")
        if isinstance(series, dict) and series.get("lastObservedTime"):
            when = tables.parse_time(series["lastObservedTime"])
            if when is not None:
                out["series"] = {**series, "lastObservedTime": rfc3339nano(when + shift)}
        return dumps(out)

    def _want_table(self, ctx: Ctx) -> bool:
        return "as=Table" in ctx.accept

    def _want_metadata(self, ctx: Ctx) -> bool:
        return "as=PartialObjectMetadata" in ctx.accept

    # -- reads -----------------------------------------------------------------------------------
    def _get(self, ctx: Ctx, rt: ResourceType, ns: Optional[str], name: str) -> tuple[int, str, bytes]:
        with self.store.lock:
            obj = self.store.get(rt.kind, ns, name)
            if obj is None:
                raise object_not_found(rt, name)
            if self._want_table(ctx):
                t = tables.table(rt.kind, [obj], self.store.clock(),
                                 resource_version=obj["metadata"]["resourceVersion"],
                                 include_object=ctx.query.get("includeObject", "Metadata"))
                return 200, JSON, dumps(t)
            if self._want_metadata(ctx):
                return 200, JSON, dumps({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                                           "metadata": obj["metadata"]})
            if self._presents_ages(ctx, rt.kind):
                return 200, JSON, self._event_json(obj)
            return 200, JSON, self._obj_json(obj)

    def _select(self, ctx: Ctx, rt: ResourceType, ns: Optional[str]) -> list[dict[str, Any]]:
        """Objects matching the request's selectors. Call with the store lock held."""
        lp = label_predicate(ctx.query.get("labelSelector"))
        fp = field_predicate(ctx.query.get("fieldSelector"), rt.kind)
        objs = self.store.list(rt.kind, ns)
        if lp is not None:
            objs = [o for o in objs if lp(o)]
        if fp is not None:
            objs = [o for o in objs if fp(o)]
        return objs

    def _list(self, ctx: Ctx, rt: ResourceType, ns: Optional[str]) -> tuple[int, str, bytes]:
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
                    raise bad_request(f"continue key is not valid: {token}") from None
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
                return 200, JSON, dumps(t)
            meta: dict[str, Any] = {"resourceVersion": rv}
            if next_token:
                meta["continue"] = next_token
                meta["remainingItemCount"] = remaining
            if self._want_metadata(ctx):
                return 200, JSON, dumps({
                    "kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
                    "items": [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                               "metadata": o["metadata"]} for o in objs]})
            head = dumps({"kind": rt.kind + "List", "apiVersion": rt.group_version, "metadata": meta})
            serialise = self._event_json if self._presents_ages(ctx, rt.kind) else self._obj_json
            items = b",".join(serialise(o) for o in objs)
        return 200, JSON, head[:-1] + b',"items":[' + items + b"]}"

    # -- watch -----------------------------------------------------------------------------------
    def _watch(self, ctx: Ctx, rt: ResourceType, ns: Optional[str]) -> None:
        q = ctx.query
        if truthy(q.get("sendInitialEvents")):
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
        bookmarks = truthy(q.get("allowWatchBookmarks"))
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
                obj_json = dumps(t)
            elif aged and type_ in ("ADDED", "MODIFIED", "DELETED"):
                obj_json = self._event_json(obj if obj is not None else json.loads(obj_json))
            line = b'{"type":"' + type_.encode() + b'","object":' + obj_json + b"}\n"
            return b"%x\r\n%s\r\n" % (len(line), line)

        def expired(rv: int) -> bytes:
            status = ApiError(410, "Expired", f"too old resource version: {rv} "
                                              f"({self.store.oldest_watchable_of(rt.kind) + 1})")
            return frame("ERROR", dumps(status.status()))

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
                    raise bad_request(f"invalid resource version: {rv_param}") from None
                too_old = seen < self.store.oldest_watchable_of(rt.kind)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                     b"Cache-Control: no-cache, private\r\n\r\n")
        try:
            if too_old:
                conn.sendall(expired(seen) + b"0\r\n\r\n")
                raise Stream()
            if out:
                conn.sendall(b"".join(out))
            ctx.release()  # the watch streams on while the cluster runs
            last_bookmark = time.monotonic()
            while not self._stopping.is_set():
                out = []
                with self.store.lock:
                    if seen < self.store.oldest_watchable_of(rt.kind):
                        out.append(expired(seen))
                        conn.sendall(b"".join(out) + b"0\r\n\r\n")
                        raise Stream()
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
                        out.append(frame("BOOKMARK", dumps(bm)))
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
        raise Stream()

    def _pod_log(self, ctx: Ctx, ns: str, name: str) -> tuple[int, str, bytes]:
        q = ctx.query
        rt = BY_KIND["Pod"]
        previous = truthy(q.get("previous"))
        with self.store.lock:
            pod = self.store.get("Pod", ns, name)
            if pod is None:
                raise object_not_found(rt, name)
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
                    raise bad_request(msg)
            if container not in names and container not in init_names:
                raise bad_request(f"container {container} is not valid for pod {name}")
            statuses = {s.get("name"): s for s in (status.get("containerStatuses") or []) +
                        (status.get("initContainerStatuses") or [])}
            cs = statuses.get(container)
            no_previous = previous and not ((cs or {}).get("lastState") or {}).get("terminated")
            waiting = (((cs or {}).get("state") or {}).get("waiting") or {}).get("reason")
            if not previous and ((cs is None and status.get("phase") == "Pending")
                                 or waiting in ("ContainerCreating", "PodInitializing")):
                raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: '
                                   f'{waiting or "ContainerCreating"}')
            now = self.store.clock()
        entries = list(self.telemetry.pod_log(ns, name, container, previous) or [])
        if no_previous and not entries:
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        if q.get("sinceSeconds"):
            try:
                cutoff = now - timedelta(seconds=int(q["sinceSeconds"]))
            except ValueError:
                raise bad_request(f"invalid sinceSeconds: {q['sinceSeconds']}") from None
            entries = [e for e in entries if _aware(e[0]) >= cutoff]
        elif q.get("sinceTime"):
            since = tables.parse_time(q["sinceTime"])
            if since is None:
                raise bad_request(f"invalid sinceTime: {q['sinceTime']}")
            entries = [e for e in entries if _aware(e[0]) >= since]
        if q.get("tailLines"):
            try:
                n = int(q["tailLines"])
            except ValueError:
                raise bad_request(f"invalid tailLines: {q['tailLines']}") from None
            entries = entries[-n:] if n > 0 else []
        stamp = truthy(q.get("timestamps"))
        text = "".join((f"{rfc3339nano(_aware(t))} " if stamp else "") + line.rstrip("\n") + "\n"
                       for t, line in entries)
        data = text.encode()
        if q.get("limitBytes"):
            try:
                data = data[:max(0, int(q["limitBytes"]))]
            except ValueError:
                raise bad_request(f"invalid limitBytes: {q['limitBytes']}") from None
        return 200, "text/plain", data

    # -- metrics.k8s.io --------------------------------------------------------------------------
    def _metrics(self, ctx: Ctx, rest: list[str]) -> tuple[int, str, bytes]:
        if ctx.method != "GET":
            raise method_not_allowed()
        ns: Optional[str] = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] == "pods":
            ns, rest = rest[1], rest[2:]
        if not rest or rest[0] not in ("nodes", "pods") or len(rest) > 2:
            raise no_such_path()
        resource, name = rest[0], (rest[1] if len(rest) > 1 else None)
        if resource == "pods" and name is not None and ns is None:
            raise no_such_path()
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
        items: list[dict[str, Any]] = []
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
            return 200, JSON, dumps(items[0])
        return 200, JSON, dumps({"kind": item_kind + "List", "apiVersion": gv, "metadata": {}, "items": items})

    # -- extensions ------------------------------------------------------------------------------
    def _request(self, ctx: Ctx, path: str) -> Request:
        """The request an extension or proxied service sees: the body parsed when it is JSON or
        YAML, and as sent either way."""
        body = None
        if ctx.raw_body and ctx.content_type != "application/x-www-form-urlencoded":
            body = ctx.body()
        return Request(ctx.method, path, dict(ctx.query), body, ctx.actor, dict(ctx.headers),
                       raw_query=ctx.raw_query, raw_body=ctx.raw_body)

    def _extension(self, handler: ExtensionHandler, ctx: Ctx) -> tuple[int, str, bytes]:
        return self._encode(handler(self._request(ctx, ctx.path)))

    def _service_proxy(self, ctx: Ctx, ns: str, target: str) -> tuple[int, str, bytes]:
        """``…/services/[scheme:]name[:port]/proxy/<path>``: the Service's answer to ``<path>``."""
        parts = target.split(":")
        name, port = (parts[0], parts[1] if len(parts) > 1 else "") if len(parts) < 3 else (parts[1], parts[2])
        with self.store.lock:
            known = self.store.get("Service", ns, name) is not None
        if not known:
            raise object_not_found(BY_KIND["Service"], name)
        inner = ctx.path[len(f"/api/v1/namespaces/{ns}/services/{target}/proxy"):] or "/"
        resp = self.service_proxy(ns, name, port, self._request(ctx, inner)) if self.service_proxy else None
        if resp is None:
            raise ApiError(503, "ServiceUnavailable",
                           f'error trying to reach service: the sremarathon twin proxies only the monitoring '
                           f'namespace\'s services; {ns}/{name} is reached from inside the cluster '
                           f'(its pods\' logs, events and metrics tell what it serves)')
        return self._encode(resp)

    @staticmethod
    def _encode(resp: Response) -> tuple[int, str, bytes]:
        if isinstance(resp.body, (bytes, bytearray)):
            return resp.status, resp.content_type, bytes(resp.body)
        if isinstance(resp.body, str) and not resp.content_type.startswith("application/json"):
            return resp.status, resp.content_type, resp.body.encode()
        return resp.status, resp.content_type, dumps(resp.body)


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


_OPENAPI_V3: dict[str, bytes] = {}  # path -> its served bytes (only paths that exist)


def _openapi_v3(path: str) -> Optional[bytes]:
    """``/openapi/v3`` and its documents, made on their first request (the documents hold every
    field of every kind; making them costs a marathon whose agent never asks a fifth of a second)."""
    if path not in _OPENAPI_V3:
        doc = openapi.openapi_index() if path == "/openapi/v3" else openapi.openapi_document(path[len("/openapi/v3/"):])
        if doc is None:
            return None
        _OPENAPI_V3[path] = dumps(doc)
    return _OPENAPI_V3[path]
