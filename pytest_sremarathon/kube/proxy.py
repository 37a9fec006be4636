"""The policy layer in front of a real API server: a recording, enforcing reverse proxy on
loopback.

The agent's kubeconfig points here, never at the cluster. :class:`PolicyProxy` offers what
:class:`~pytest_sremarathon.twin.apiserver.ApiServer` offers the marathon (``start``/``stop``,
``url``/``https_url``, ``write_kubeconfig``, the ``/sremarathon/v1/`` extensions) and enforces
the same contract:

* every request needs ``Authorization: Bearer <token>`` of a known actor (401 ``Status``
  otherwise; ``/healthz``, ``/livez``, ``/readyz`` and ``/version`` are public);
* every mutating request (POST, PUT, PATCH, DELETE on a resource) becomes a
  :class:`~pytest_sremarathon.policy.MutationRequest` put to ``admission.decide`` with the
  object as it would be after the change — computed by the real server with the same request
  as a dry run (``dryRun=All``); for deletes and evictions, the object being removed; for
  ``scale``, the workload with its new replica count. Denied: 403 ``Forbidden`` ``Status``
  naming the rule, and the request never reaches the cluster. Allowed: forwarded, then
  ``admission.record`` gets the final status. A request whose result cannot be computed (the
  dry run fails) is decided on its raw body, as the twin does; a dry run of the agent's own is
  recorded only when denied;
* reads of Secret data are put to the policy too (the ``no-read-secrets`` rule); tables and
  metadata-only lists are not;
* the service proxy of the Services a ``service_proxy`` callable answers for (the
  ``monitoring`` namespace's Prometheus, over the series the orchestrator scrapes) is answered
  here, as the twin's API server answers it; any other Service's proxy goes to the cluster;
* everything else streams through unchanged — chunked watch and ``logs -f`` responses as they
  arrive — with the agent's credentials replaced by the orchestrator's. Impersonation headers
  are dropped, and connection upgrades (``exec``, ``attach``, ``port-forward``) are refused
  with the twin's message, so the agent's view is the same on both backends.

Like the twin's API server, one loopback port speaks plain HTTP and TLS (sniffed from the first
byte; kubectl only sends tokens over TLS), with the twin's throwaway CA.
"""

from __future__ import annotations

import http.client
import json
import logging
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Optional
from urllib.parse import parse_qsl, unquote, urlencode

import yaml

from ..k8s.store import ApiError
from ..policy import Decision, MutationRequest
from ..serving.http import Admission, ExtensionHandler, Request, Response, ServiceProxy
from ..serving.loopback import LoopbackServer
from .api import KubeApi

log = logging.getLogger(__name__)

PUBLIC_PATHS = ("/healthz", "/livez", "/readyz")
MUTATING = ("POST", "PUT", "PATCH", "DELETE")
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
              "transfer-encoding", "upgrade", "content-length", "host", "authorization"}
NAMESPACE_SUBRESOURCES = ("status", "finalize")
_JSON = "application/json"
_REASONS = {s.value: s.phrase for s in HTTPStatus}


@dataclass(frozen=True)
class ResourcePath:
    """``/api/v1/namespaces/shop/deployments/cart/scale`` → group "", version v1, namespace
    shop, resource deployments, name cart, subresource scale."""

    group: str
    version: str
    resource: str
    namespace: Optional[str] = None
    name: Optional[str] = None
    subresource: Optional[str] = None
    watch: bool = False

    @property
    def base(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def object_path(self) -> str:
        ns = f"/namespaces/{self.namespace}" if self.namespace else ""
        return f"{self.base}{ns}/{self.resource}/{self.name}"

    def collection_path(self) -> str:
        ns = f"/namespaces/{self.namespace}" if self.namespace else ""
        return f"{self.base}{ns}/{self.resource}"


def parse_path(path: str) -> Optional[ResourcePath]:
    parts = [p for p in path.strip("/").split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    watch = bool(rest) and rest[0] == "watch"
    if watch:
        rest = rest[1:]
    if not rest:
        return None
    ns = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in NAMESPACE_SUBRESOURCES:
        ns, rest = rest[1], rest[2:]
    return ResourcePath(group, version, rest[0], ns, rest[1] if len(rest) > 1 else None,
                        rest[2] if len(rest) > 2 else None, watch)


def mutation_verb(method: str, rp: ResourcePath) -> str:
    if method == "POST":
        return "evict" if rp.subresource == "eviction" else "create"
    return {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]


def _status(code: int, reason: str, message: str, *, kind: str = "", name: str = "") -> bytes:
    return json.dumps(ApiError(code, reason, message, kind=kind, name=name).status(), separators=(",", ":")).encode()


class _Upstream503(Exception):
    pass


class PolicyProxy(LoopbackServer):
    def __init__(self, upstream: KubeApi, *, tokens: dict[str, str], admission: Admission,
                 extensions: Optional[dict[str, ExtensionHandler]] = None,
                 service_proxy: Optional[ServiceProxy] = None, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__("policy-proxy", host, port)
        self.upstream = upstream
        self.tokens = dict(tokens)
        self.admission = admission
        self.extensions = dict(sorted((extensions or {}).items(), key=lambda kv: -len(kv[0])))
        self.service_proxy = service_proxy

    def _respond(self, conn: Any, method: str, target: str, headers: dict[str, str], body: bytes,
                 keep_alive: bool) -> bool:
        return self._handle(conn, method, target, headers, body) and keep_alive

    # -- one request ---------------------------------------------------------------------------
    def _handle(self, conn: Any, method: str, target: str, headers: dict[str, str], body: bytes) -> bool:
        """Answer one request; False when the connection must close (a stream ended it)."""
        path, _, qs = target.partition("?")
        path = unquote(path)
        query = dict(parse_qsl(qs, keep_blank_values=True)) if qs else {}
        if path in PUBLIC_PATHS:
            _send(conn, 200, "text/plain; charset=utf-8", b"ok")
            return True
        auth = headers.get("authorization", "")
        actor = self.tokens.get(auth[7:].strip()) if auth[:7].lower() == "bearer " else None
        if actor is None:
            if path == "/version" and method == "GET":
                return self._forward(conn, method, target, headers, body)
            _send(conn, 401, _JSON, _status(401, "Unauthorized", "Unauthorized"))
            return True
        with self.gate(actor, method, path) as held:
            return self._handle_as(conn, method, target, path, query, headers, body, actor, held.release)

    def _handle_as(self, conn: Any, method: str, target: str, path: str, query: dict[str, str],
                   headers: dict[str, str], body: bytes, actor: str, release: Any) -> bool:
        if "upgrade" in headers.get("connection", "").lower() or headers.get("upgrade"):
            _send(conn, 400, _JSON, _status(400, "BadRequest", "exec, attach and port-forward are not available "
                                            "through the sremarathon policy layer; use pod logs, events and metrics"))
            return True
        for prefix, handler in self.extensions.items():
            if path.startswith(prefix) or path == prefix.rstrip("/"):
                return self._extension(conn, handler, method, path, query, headers, body, actor, target)
        rp = parse_path(path)
        if (rp is not None and self.service_proxy is not None and rp.group == "" and rp.resource == "services"
                and rp.namespace and rp.name and rp.subresource == "proxy"):
            name, port = _proxy_target(rp.name)
            inner = path[len(f"/api/v1/namespaces/{rp.namespace}/services/{rp.name}/proxy"):] or "/"
            proxied = Request(method=method, path=inner, query=query, body=None, actor=actor, headers=headers,
                              raw_query=target.partition("?")[2], raw_body=body)
            resp = self.service_proxy(rp.namespace, name, port, proxied)
            if resp is not None:
                _send(conn, resp.status, resp.content_type, _payload(resp))
                return True
        if rp is not None and method == "GET" and rp.resource == "secrets" and rp.subresource is None:
            accept = headers.get("accept", "")
            if "as=PartialObjectMetadata" not in accept and not ("as=Table" in accept
                                                                 and query.get("includeObject") != "Object"):
                watching = rp.watch or query.get("watch", "").lower() in ("1", "true", "yes", "t")
                req = MutationRequest(actor=actor, channel="kube", verb="watch" if watching else
                                      ("get" if rp.name else "list"), resource=rp.resource,
                                      namespace=rp.namespace, name=rp.name, app=rp.namespace)
                decision = self.admission.decide(req)
                if not decision.allowed:
                    self._record(req, decision, 403)
                    _send(conn, 403, _JSON, self._forbidden(rp, decision))
                    return True
        if rp is None or method not in MUTATING:
            return self._forward(conn, method, target, headers, body, release=release)
        return self._mutate(conn, method, target, query, headers, body, rp, actor)

    def _mutate(self, conn: Any, method: str, target: str, query: dict[str, str], headers: dict[str, str],
                body: bytes, rp: ResourcePath, actor: str) -> bool:
        verb = mutation_verb(method, rp)
        dry_run = bool(query.get("dryRun"))
        after = self._after(method, target, query, headers, body, rp)
        req = MutationRequest(actor=actor, channel="kube", verb=verb, resource=rp.resource, namespace=rp.namespace,
                              name=rp.name, subresource=rp.subresource, app=rp.namespace, body=after)
        decision = self.admission.decide(req)
        if not decision.allowed:
            self._record(req, decision, 403)
            _send(conn, 403, _JSON, self._forbidden(rp, decision))
            return True
        box: dict[str, int] = {}
        try:
            keep = self._forward(conn, method, target, headers, body, status_out=box)
        finally:
            if not dry_run and "status" in box:
                self._record(req, decision, box["status"])
        return keep

    def _after(self, method: str, target: str, query: dict[str, str], headers: dict[str, str], body: bytes,
               rp: ResourcePath) -> Any:
        """The object as it would be after the change, as the server computes it; the parsed raw
        body when it cannot (the request will fail the same way)."""
        raw = _parse_body(body, headers.get("content-type", ""))
        try:
            if method == "DELETE":
                path = rp.object_path() if rp.name else rp.collection_path()
                if not rp.name:
                    sel = {k: v for k, v in query.items() if k in ("labelSelector", "fieldSelector")}
                    path += ("?" + urlencode(sel)) if sel else ""
                status, data = self._upstream("GET", path, headers)
                return json.loads(data) if status == 200 else raw
            if method == "POST" and rp.subresource == "eviction":
                status, data = self._upstream("GET", rp.object_path(), headers)
                return json.loads(data) if status == 200 else raw
            dry_query = dict(query, dryRun="All")
            path, _, _ = target.partition("?")
            status, data = self._upstream(method, f"{path}?{urlencode(dry_query)}", headers, body)
            if status >= 300:
                return raw
            result = json.loads(data) if data else raw
            if rp.subresource == "scale" and isinstance(result, dict):
                s, parent = self._upstream("GET", rp.object_path(), headers)
                if s == 200:
                    obj = json.loads(parent)
                    obj.setdefault("spec", {})["replicas"] = (result.get("spec") or {}).get("replicas", 0)
                    return obj
            return result
        except (ValueError, _Upstream503):
            return raw

    def _upstream(self, method: str, path: str, headers: dict[str, str], body: Optional[bytes] = None) -> tuple[int, bytes]:
        fwd = {k: v for k, v in _forward_headers(headers).items() if k.lower() not in ("accept", "accept-encoding")}
        fwd["Accept"] = _JSON
        try:
            return self.upstream.request(method, path, body, fwd)
        except (OSError, http.client.HTTPException) as exc:
            raise _Upstream503(str(exc)) from None

    def _forward(self, conn: Any, method: str, target: str, headers: dict[str, str], body: bytes,
                 status_out: Optional[dict[str, int]] = None, release: Any = None) -> bool:
        up = self.upstream
        streaming = method == "GET" and any(f"{k}=" in target for k in ("watch", "follow"))
        upstream_conn = up.connection(timeout=None if streaming else 60)
        try:
            fwd = _forward_headers(headers)
            fwd.update(up.auth_headers())
            upstream_conn.request(method, up.prefix + target, body=body if body or method in MUTATING else None,
                                  headers=fwd)
            resp = upstream_conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            upstream_conn.close()
            if status_out is not None:
                status_out["status"] = 503
            _send(conn, 503, _JSON, _status(503, "ServiceUnavailable",
                                            f"the cluster's API server is unreachable through the policy layer: {exc}"))
            return True
        if status_out is not None:
            status_out["status"] = resp.status
        try:
            out_headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
            length = resp.getheader("content-length")
            chunked = length is None and method != "HEAD" and resp.status not in (204, 304)
            head = f"HTTP/1.1 {resp.status} {resp.reason or _REASONS.get(resp.status, '')}\r\n"
            head += "".join(f"{k}: {v}\r\n" for k, v in out_headers)
            if not chunked:
                data = resp.read() if method != "HEAD" else b""
                head += f"Content-Length: {len(data) if method != 'HEAD' else (length or 0)}\r\n\r\n"
                conn.sendall(head.encode("latin-1") + data)
                return True
            head += "Transfer-Encoding: chunked\r\n\r\n"
            conn.sendall(head.encode("latin-1"))
            if streaming and release is not None:
                release()  # a watch or a follow streams on while the cluster runs
            try:
                while True:
                    piece = resp.read1(65536)
                    if not piece:
                        break
                    conn.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            except http.client.HTTPException:  # the upstream cut the stream: end ours, close
                conn.sendall(b"0\r\n\r\n")
                return False
            conn.sendall(b"0\r\n\r\n")
            return not streaming
        finally:
            upstream_conn.close()

    def _extension(self, conn: Any, handler: ExtensionHandler, method: str, path: str, query: dict[str, str],
                   headers: dict[str, str], body: bytes, actor: str, target: str = "") -> bool:
        form = headers.get("content-type", "").split(";")[0].strip().lower() == "application/x-www-form-urlencoded"
        try:
            parsed = json.loads(body) if body and not form else None
        except ValueError:
            _send(conn, 400, _JSON, _status(400, "BadRequest", "the request body is not JSON"))
            return True
        try:
            resp: Response = handler(Request(method=method, path=path, query=query, body=parsed, actor=actor,
                                             headers=headers, raw_query=target.partition("?")[2], raw_body=body))
        except Exception as exc:  # noqa: BLE001 - never kill the connection thread
            log.exception("policy proxy: extension %s failed", path)
            _send(conn, 500, _JSON, _status(500, "InternalError", f"Internal error occurred: {exc}"))
            return True
        _send(conn, resp.status, resp.content_type, _payload(resp))
        return True

    def _record(self, req: MutationRequest, decision: Decision, status: int) -> None:
        try:
            self.admission.record(req, decision, status)
        except Exception:  # pragma: no cover - recording must never break the API
            log.exception("admission.record failed")

    @staticmethod
    def _forbidden(rp: ResourcePath, decision: Decision) -> bytes:
        return _status(403, "Forbidden", decision.message or "forbidden", kind=rp.resource, name=rp.name or "")


def _payload(resp: Response) -> bytes:
    if isinstance(resp.body, (bytes, bytearray)):
        return bytes(resp.body)
    if isinstance(resp.body, (dict, list)):
        return json.dumps(resp.body, separators=(",", ":")).encode()
    return str(resp.body).encode()


def _proxy_target(target: str) -> tuple[str, str]:
    """``[scheme:]name[:port]`` of a service proxy path: (name, port or "")."""
    parts = target.split(":")
    if len(parts) >= 3:
        return parts[1], parts[2]
    return parts[0], parts[1] if len(parts) > 1 else ""


def _forward_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k not in HOP_BY_HOP and not k.startswith("impersonate-")}


def _parse_body(body: bytes, content_type: str) -> Any:
    if not body:
        return None
    try:
        return json.loads(body)
    except ValueError:
        pass
    if "yaml" in content_type:
        try:
            return yaml.safe_load(body.decode("utf-8", "replace"))
        except yaml.YAMLError:
            return None
    return None  # protobuf and the like: decided without a body


def _send(conn: Any, status: int, ctype: str, payload: bytes) -> None:
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(payload)}\r\nCache-Control: no-cache, private\r\n\r\n")
    conn.sendall(head.encode("latin-1") + payload)


__all__ = ["PolicyProxy", "ResourcePath", "mutation_verb", "parse_path"]
