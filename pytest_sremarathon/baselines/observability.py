"""The monitoring namespace as an agent built for production reads it: PromQL at
``PROMETHEUS_URL`` and traces at ``JAEGER_URL``, with the kubeconfig's bearer token, over plain
HTTP (the URLs are loopback: no proxy). Also what a trace says about where a failure began."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import yaml

PROMETHEUS_ENV, JAEGER_ENV = "PROMETHEUS_URL", "JAEGER_URL"


class ObservabilityError(Exception):
    """A monitoring service refused or could not answer a query."""


def kubeconfig_token(kubeconfig: Path) -> str:
    """The bearer token of the kubeconfig's current user (the agent's one credential)."""
    config = yaml.safe_load(Path(kubeconfig).read_text()) or {}
    current = config.get("current-context")
    contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
    user = (contexts.get(current) or {}).get("user") if current else None
    users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
    found = users.get(user) if user else next(iter(users.values()), None)
    return str((found or {}).get("token") or "")


class HTTPJson:
    """GETs of JSON from one service's base URL with the bearer token."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only

    def get(self, path: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        url = self.base_url + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise ObservabilityError(f"GET {path}: HTTP {exc.code}: {exc.read()[:300]!r}") from None
        except (OSError, ValueError) as exc:
            raise ObservabilityError(f"GET {path}: {exc}") from None


class Prometheus(HTTPJson):
    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector (at the server's now: the virtual clock)."""
        body = self.get("/api/v1/query", {"query": expr})
        if body.get("status") != "success":
            raise ObservabilityError(f"query {expr!r}: {body.get('error')}")
        return list(body["data"]["result"])


class Jaeger(HTTPJson):
    def traces(self, service: str, *, lookback: str = "10m", limit: int = 20, **params: str) -> list[dict[str, Any]]:
        """A search's traces, newest first (the window ends at the server's now)."""
        body = self.get("/api/traces", {"service": service, "lookback": lookback, "limit": limit, **params})
        return list(body.get("data") or [])


def from_environment(kubeconfig: Path) -> tuple[Optional[Prometheus], Optional[Jaeger]]:
    """The clients of the services the run offers (None for one it does not)."""
    token = kubeconfig_token(kubeconfig)
    prom, jaeger = os.environ.get(PROMETHEUS_ENV), os.environ.get(JAEGER_ENV)
    return (Prometheus(prom, token) if prom else None), (Jaeger(jaeger, token) if jaeger else None)


# -- reading a trace -----------------------------------------------------------------------------
def _tags(span: Mapping[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags") or []}


def _component(trace: Mapping[str, Any], span: Mapping[str, Any]) -> Optional[str]:
    """The component a span stands for. A server span: its process's service (Jaeger's
    ``<service>.<namespace>``). A client span (a call no pod answered): the service it called,
    or the third-party API (``peer.service`` without a namespace) — unless the name does not
    resolve (``no such host``): then the caller is calling something that does not exist."""
    tags = _tags(span)
    if tags.get("span.kind") == "client" and "no such host" not in str(tags.get("otel.status_description") or ""):
        peer = str(tags.get("peer.service") or "")
        if not peer:
            return None
        svc, dot, ns = peer.rpartition(".")
        return f"service:{ns}/{svc}" if dot else f"external:{peer}"
    name = str((trace.get("processes") or {}).get(span.get("processID"), {}).get("serviceName") or "")
    svc, dot, ns = name.rpartition(".")
    return f"service:{ns}/{svc}" if dot and svc != "ingress" else None


def _depths(trace: Mapping[str, Any]) -> dict[str, int]:
    spans = {s["spanID"]: s for s in trace.get("spans") or []}
    depth: dict[str, int] = {}

    def of(sid: str) -> int:
        if sid not in depth:
            refs = spans[sid].get("references") or []
            parent = str(refs[0]["spanID"]) if refs else ""
            depth[sid] = of(parent) + 1 if parent in spans else 0
        return depth[sid]

    for sid in spans:
        of(sid)
    return depth


def deepest_error(trace: Mapping[str, Any]) -> Optional[str]:
    """Where the failure of a failed request began: the component of its deepest erroring span
    (its callers fail because it did; nothing it called failed first)."""
    depth = _depths(trace)
    failing = [s for s in trace.get("spans") or [] if _tags(s).get("error") is True]
    if not failing:
        return None
    span = max(failing, key=lambda s: (depth[s["spanID"]], s["startTime"]))
    return _component(trace, span)


def slowest_self(trace: Mapping[str, Any]) -> Optional[str]:
    """Where a slow request spent its time: the component of the span with the most time not
    spent in its children."""
    spans = trace.get("spans") or []
    children: dict[str, int] = {}
    for s in spans:
        for ref in s.get("references") or []:
            children[ref["spanID"]] = children.get(ref["spanID"], 0) + int(s["duration"])
    if not spans:
        return None
    span = max(spans, key=lambda s: int(s["duration"]) - children.get(s["spanID"], 0))
    return _component(trace, span)
