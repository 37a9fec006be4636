"""A small HTTP client for a Kubernetes API server, from a kubeconfig.

The orchestrator's side of a real cluster needs three things that the official client makes
awkward: raw streaming (the policy proxy), the pod proxy (scraping ``/metrics``) and
server-side apply of rendered manifests. :class:`KubeApi` is just a base URL, a TLS context
(the cluster's CA, the kubeconfig's client certificate) and a bearer token — read from the
kubeconfig ``kind`` writes, or any kubeconfig with token or client-certificate credentials.
Exec plugins and auth providers (cloud logins) are not supported: they need the cloud's CLI.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import quote, urlsplit

import yaml

from ..errors import SremarathonError


class KubeconfigError(SremarathonError):
    pass


class KubeApiError(Exception):
    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.body = body


def _material(entry: dict[str, Any], key: str, base: Path) -> Optional[bytes]:
    """``<key>-data`` (base64) or ``<key>`` (a file, relative to the kubeconfig)."""
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        path = Path(os.path.expanduser(entry[key]))
        return (path if path.is_absolute() else base / path).read_bytes()
    return None


@dataclass
class KubeApi:
    server: str  # scheme://host:port[/prefix]
    ssl_context: Optional[ssl.SSLContext] = None
    token: Optional[str] = None
    timeout: float = 30.0
    ca_pem: Optional[bytes] = field(default=None, repr=False)

    @property
    def scheme(self) -> str:
        return urlsplit(self.server).scheme

    @property
    def host(self) -> str:
        return urlsplit(self.server).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        parts = urlsplit(self.server)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def prefix(self) -> str:
        return urlsplit(self.server).path.rstrip("/")

    @classmethod
    def from_kubeconfig(cls, path: Path, context: Optional[str] = None) -> KubeApi:
        path = Path(path).expanduser()
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except FileNotFoundError:
            raise KubeconfigError(f"{path}: kubeconfig not found") from None
        except yaml.YAMLError as exc:
            raise KubeconfigError(f"{path}: not valid YAML: {exc}") from None
        name = context or config.get("current-context")
        ctx = next((c.get("context") or {} for c in config.get("contexts") or [] if c.get("name") == name), None)
        if ctx is None:
            raise KubeconfigError(f"{path}: no context {name!r} (contexts: "
                                  f"{', '.join(c.get('name', '?') for c in config.get('contexts') or []) or 'none'})")
        cluster = next((c.get("cluster") or {} for c in config.get("clusters") or []
                        if c.get("name") == ctx.get("cluster")), None)
        user = next((u.get("user") or {} for u in config.get("users") or [] if u.get("name") == ctx.get("user")), {})
        if cluster is None or not cluster.get("server"):
            raise KubeconfigError(f"{path}: context {name!r} names cluster {ctx.get('cluster')!r}, which has no server")
        if user.get("exec") or user.get("auth-provider"):
            raise KubeconfigError(f"{path}: user {ctx.get('user')!r} authenticates with an exec plugin or auth "
                                  f"provider; give a kubeconfig with a token or a client certificate "
                                  f"(e.g. `kubectl create token` or kind's own kubeconfig)")
        base = path.parent
        server = cluster["server"]
        ssl_ctx = None
        ca = _material(cluster, "certificate-authority", base)
        if server.startswith("https"):
            if cluster.get("insecure-skip-tls-verify"):
                ssl_ctx = ssl.create_default_context()
                ssl_ctx.check_hostname = False
                ssl_ctx.verify_mode = ssl.CERT_NONE
            else:
                ssl_ctx = ssl.create_default_context(cadata=ca.decode() if ca else None)
                if cluster.get("tls-server-name"):
                    ssl_ctx.check_hostname = False  # the chain is still verified against the CA
            cert, key = _material(user, "client-certificate", base), _material(user, "client-key", base)
            if cert and key:
                _load_cert_chain(ssl_ctx, cert, key)
        token = user.get("token")
        if not token and user.get("tokenFile"):
            token = Path(user["tokenFile"]).read_text().strip()
        return cls(server=server, ssl_context=ssl_ctx, token=token, ca_pem=ca)

    # -- requests ----------------------------------------------------------------------------
    def connection(self, timeout: Optional[float] = None) -> http.client.HTTPConnection:
        t = self.timeout if timeout is None else timeout
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, context=self.ssl_context, timeout=t)
        return http.client.HTTPConnection(self.host, self.port, timeout=t)

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def request(self, method: str, path: str, body: Optional[bytes] = None, headers: Optional[dict[str, str]] = None,
                timeout: Optional[float] = None) -> tuple[int, bytes]:
        conn = self.connection(timeout)
        try:
            conn.request(method, self.prefix + path, body=body, headers={
                "Accept": "application/json", "User-Agent": "sremarathon-orchestrator", **self.auth_headers(),
                **(headers or {})})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def json(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
             ok: tuple[int, ...] = (200, 201, 202), timeout: Optional[float] = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        status, raw = self.request(method, path, data, {"Content-Type": content_type} if data else None, timeout)
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        if status not in ok:
            message = parsed.get("message") if isinstance(parsed, dict) else str(parsed)[:300]
            raise KubeApiError(status, f"{method} {path}: {message}", parsed)
        return parsed

    def get(self, path: str, **kw: Any) -> Any:
        return self.json("GET", path, **kw)

    def apply(self, obj: dict[str, Any], *, field_manager: str = "sremarathon", force: bool = True) -> Any:
        """Server-side apply (``PATCH application/apply-patch+yaml``) of one manifest."""
        return self.json("PATCH", object_path(obj) + f"?fieldManager={quote(field_manager)}"
                         + ("&force=true" if force else ""), obj, content_type="application/apply-patch+yaml")


# kind -> (group/version path prefix, plural, namespaced) for the objects the apps' manifests use
RESOURCES: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "Node": ("/api/v1", "nodes", False),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Secret": ("/api/v1", "secrets", True),
    "Service": ("/api/v1", "services", True),
    "Pod": ("/api/v1", "pods", True),
    "Endpoints": ("/api/v1", "endpoints", True),
    "Event": ("/api/v1", "events", True),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ReplicaSet": ("/apis/apps/v1", "replicasets", True),
    "PodDisruptionBudget": ("/apis/policy/v1", "poddisruptionbudgets", True),
    "HorizontalPodAutoscaler": ("/apis/autoscaling/v2", "horizontalpodautoscalers", True),
    "PriorityClass": ("/apis/scheduling.k8s.io/v1", "priorityclasses", False),
    # stateful workloads and their claims (a curated change may add a claim: manifest-claim-unbindable)
    "StatefulSet": ("/apis/apps/v1", "statefulsets", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses", False),  # what the claims name, where missing
    # batch work, node agents, and each app's network policies, quota and limits
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "Job": ("/apis/batch/v1", "jobs", True),
    "CronJob": ("/apis/batch/v1", "cronjobs", True),
    "NetworkPolicy": ("/apis/networking.k8s.io/v1", "networkpolicies", True),
    "ResourceQuota": ("/api/v1", "resourcequotas", True),
    "LimitRange": ("/api/v1", "limitranges", True),
}


def api_version(kind: str) -> str:
    prefix = RESOURCES[kind][0]
    return prefix[len("/api/"):] if prefix.startswith("/api/") else prefix[len("/apis/"):]


def collection_path(kind: str, namespace: Optional[str] = None) -> str:
    try:
        prefix, plural, namespaced = RESOURCES[kind]
    except KeyError:
        raise KeyError(f"kind {kind!r} is not one the sremarathon adapter manages; known: {', '.join(RESOURCES)}") from None
    if namespaced and namespace:
        return f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{prefix}/{plural}"


def object_path(obj: dict[str, Any]) -> str:
    md = obj.get("metadata") or {}
    return f"{collection_path(obj['kind'], md.get('namespace'))}/{md['name']}"


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` reads files only; keep the key on disk only while it loads."""
    fd, path = tempfile.mkstemp(prefix="sremarathon-client-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cert + b"\n" + key)
        ctx.load_cert_chain(path)
    finally:
        os.unlink(path)


@contextmanager
def streaming(api: KubeApi, method: str, path: str, headers: dict[str, str],
              body: Optional[bytes] = None) -> Iterator[http.client.HTTPResponse]:
    """An open response to read incrementally (watch, logs -f); closed on exit."""
    conn = api.connection(timeout=None)
    try:
        conn.request(method, api.prefix + path, body=body, headers=headers)
        yield conn.getresponse()
    finally:
        conn.close()
