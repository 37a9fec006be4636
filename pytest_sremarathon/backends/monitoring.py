"""The ``monitoring`` namespace's services as the agent reaches them, on both backends.

Each service (Prometheus here; Alertmanager and the Jaeger query are added the same way, with
:meth:`Monitoring.add`) is one handler that sees the path *inside* the service
(``/api/v1/query``) and is reachable two ways, behind the agent's token:

* through the API server's service proxy:
  ``/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/api/v1/query`` (kubectl
  ``get --raw``, the official client's ``connect_get_namespaced_service_proxy_with_path``,
  HolmesGPT's discovery), as :meth:`Monitoring.service_proxy`;
* at a direct URL on the agent's server: ``{server}/prometheus/api/v1/query``
  (:attr:`Monitoring.urls`, ``Environment.prometheus_url``, ``PROMETHEUS_URL``), as an
  extension mounted like ``/sremarathon/v1/``.

**Locks.** The store and the PromQL engine are not thread-safe; the cluster appends under its
store lock (the twin's tick holds it throughout), so every request is answered holding that
lock too (:func:`prometheus_handler`). Charged think time also serialises the agent's requests
with the ticks through the world lock, before the request reaches here.

**Policy.** Prometheus's HTTP API only reads (its POSTs are queries too): every request is put to
the policy point as a read (verb ``get`` on ``services/proxy``), which only the read rules judge
— allowed unless one denies it, a denial is recorded, an allowed read is not (reads are not
actions). The namespace itself stays protected: its Services cannot be changed or deleted
(``protected-namespaces``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional
from urllib.parse import parse_qs, urlencode

from ..alertmanager import (
    AlertmanagerAPI,
    AlertmanagerConfig,
    AlertRecord,
    AmAlert,
    Route,
    SilenceRequest,
    Verdict,
    from_record,
)
from ..policy import Decision, MutationRequest
from ..prometheus import TSDB, PrometheusAPI, RuleGroup, RuleSource, TargetSource
from ..serving.http import Admission, ExtensionHandler, Request, Response
from ..tracing import JaegerQuery

NAMESPACE = "monitoring"
PROMETHEUS = "prometheus"
PROMETHEUS_PORT = 9090
# The other observability services (issue 16): Alertmanager's API v2 and the Jaeger query API,
# mounted with Monitoring.add under "/alertmanager/" and "/jaeger/".
ALERTMANAGER = "alertmanager"
ALERTMANAGER_PORT = 9093
JAEGER_QUERY = "jaeger-query"
JAEGER_QUERY_PORT = 16686


@dataclass
class MonitoringService:
    """One Service of the monitoring namespace and what answers for it."""

    name: str  # the Service (``prometheus``)
    port: int  # its port (``9090``)
    prefix: str  # the direct URL's path on the agent's server (``/prometheus``)
    handler: ExtensionHandler  # sees the path inside the service
    port_name: str = "web"
    labels: dict[str, str] = field(default_factory=dict)

    def service_object(self) -> dict[str, Any]:
        """The Service as the cluster lists it (no selector: nothing in the cluster backs it)."""
        labels = {"app.kubernetes.io/name": self.name, "app.kubernetes.io/part-of": "kube-prometheus", **self.labels}
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": self.name, "namespace": NAMESPACE, "labels": labels},
                "spec": {"type": "ClusterIP",
                         "ports": [{"name": self.port_name, "port": self.port, "targetPort": self.port_name,
                                    "protocol": "TCP"}]}}


class Monitoring:
    """The monitoring services of one backend: their mounts and URLs."""

    def __init__(self) -> None:
        self.services: dict[str, MonitoringService] = {}

    def add(self, service: MonitoringService) -> None:
        self.services[service.name] = service

    def extensions(self) -> dict[str, ExtensionHandler]:
        """The direct mounts: prefix -> a handler that strips it."""
        return {s.prefix + "/": _strip(s.prefix, s.handler) for s in self.services.values()}

    def service_proxy(self, namespace: str, name: str, port: str, req: Request) -> Optional[Response]:
        """The API server's service proxy, for the monitoring Services (None for any other)."""
        svc = self.services.get(name) if namespace == NAMESPACE else None
        if svc is None or port not in ("", str(svc.port), svc.port_name):
            return None
        return svc.handler(req)

    def urls(self, base: str) -> dict[str, str]:
        """Each service's direct URL on the server at ``base`` (``http://127.0.0.1:PORT``)."""
        return {name: base.rstrip("/") + s.prefix for name, s in self.services.items()}

    @staticmethod
    def proxy_url(base: str, name: str, port: int) -> str:
        """A service's URL through the API server's service proxy."""
        return f"{base.rstrip('/')}/api/v1/namespaces/{NAMESPACE}/services/{name}:{port}/proxy"


def _strip(prefix: str, handler: ExtensionHandler) -> ExtensionHandler:
    def handle(req: Request) -> Response:
        path = req.path[len(prefix):] if req.path.startswith(prefix) else req.path
        return handler(Request(req.method, path or "/", req.query, req.body, req.actor, req.headers,
                               raw_query=req.raw_query, raw_body=req.raw_body))
    return handle


# -- Prometheus -----------------------------------------------------------------------------------

class DeferredRules:
    """A RuleSource whose source is set later (the marathon's alert engine is made after the
    backend); none until then."""

    def __init__(self) -> None:
        self.source: Optional[RuleSource] = None

    def rule_groups(self) -> Sequence[RuleGroup]:
        return self.source.rule_groups() if self.source is not None else []


def prometheus_handler(api: PrometheusAPI, lock: AbstractContextManager[Any], admission: Optional[Admission] = None,
                       service: str = PROMETHEUS) -> ExtensionHandler:
    """Answer Prometheus's HTTP API (paths inside the service) holding ``lock``."""

    def handle(req: Request) -> Response:
        if admission is not None:
            read = MutationRequest(actor=req.actor, channel="kube", verb="get", resource="services",
                                   namespace=NAMESPACE, name=service, subresource="proxy")
            decision = admission.decide(read)
            if not decision.allowed:
                admission.record(read, decision, 403)
                return Response(403, {"status": "error", "errorType": "forbidden", "error": decision.message})
        query = parse_qs(req.raw_query, keep_blank_values=True) if req.raw_query else \
            {k: [v] for k, v in req.query.items()}
        body = req.raw_body if req.method.upper() == "POST" else None
        with lock:
            resp = api.handle(req.method, req.path, query, body)
        return Response(resp.status, resp.encode(), resp.content_type)

    return handle


def prometheus_service(db: TSDB, lock: AbstractContextManager[Any], now: Callable[[], float], *,
                       targets: Optional[TargetSource] = None, rules: Optional[RuleSource] = None,
                       admission: Optional[Admission] = None,
                       start_time: Optional[float] = None) -> tuple[MonitoringService, PrometheusAPI]:
    """The ``prometheus:9090`` Service over ``db``, at ``/prometheus`` on the agent's server."""
    api = PrometheusAPI(db, now=now, targets=targets, rules=rules, start_time=start_time,
                        alertmanagers=[f"http://alertmanager.{NAMESPACE}.svc:{ALERTMANAGER_PORT}/api/v2/alerts"])
    handler = prometheus_handler(api, lock, admission)
    return MonitoringService(PROMETHEUS, PROMETHEUS_PORT, "/prometheus", handler,
                             labels={"app.kubernetes.io/component": "prometheus"}), api


def unavailable_handler(message: str) -> ExtensionHandler:
    """A service that answers every request with Prometheus's error envelope (501)."""

    def handle(req: Request) -> Response:
        return Response(501, {"status": "error", "errorType": "unavailable", "error": message})

    return handle



def _read_denied(admission: Optional[Admission], actor: str, service: str) -> Optional[str]:
    """Put a request to a monitoring service to the policy point as a read (as Prometheus's
    are); the denial's message if a read rule denies it (recorded), else None."""
    if admission is None:
        return None
    read = MutationRequest(actor=actor, channel="kube", verb="get", resource="services", namespace=NAMESPACE,
                           name=service, subresource="proxy")
    decision = admission.decide(read)
    if decision.allowed:
        return None
    admission.record(read, decision, 403)
    return decision.message or "forbidden"


def _query_of(req: Request) -> dict[str, list[str]]:
    """The query as the handlers take it (``parse_qs``: repeated parameters kept)."""
    if req.raw_query:
        return parse_qs(req.raw_query, keep_blank_values=True)
    return {k: [v] for k, v in req.query.items()}


# -- Jaeger -------------------------------------------------------------------------------------

def jaeger_service(query: JaegerQuery, lock: AbstractContextManager[Any],
                   admission: Optional[Admission] = None) -> MonitoringService:
    """The ``jaeger-query:16686`` Service (the Jaeger query API over the traced requests), at
    ``/jaeger`` on the agent's server. Answered under ``lock``: the traffic engine records
    spans under it (the twin's tick holds it throughout)."""

    def handle(req: Request) -> Response:
        denied = _read_denied(admission, req.actor, JAEGER_QUERY)
        if denied is not None:
            return Response(403, {"data": None, "total": 0, "limit": 0, "offset": 0,
                                  "errors": [{"code": 403, "msg": denied}]})
        with lock:
            status, body = query.handle(req.method, req.path, _query_of(req))
        return Response(status, body)

    return MonitoringService(JAEGER_QUERY, JAEGER_QUERY_PORT, "/jaeger", handle, port_name="query",
                             labels={"app.kubernetes.io/component": "query", "app.kubernetes.io/part-of": "jaeger"})


# -- Alertmanager -------------------------------------------------------------------------------

class DeferredAlerts:
    """The alerts the agent's Observation carries, once the marathon gives them (its alert
    history, which the alert engine's transitions fill); the firing ones, as Alertmanager
    holds them. None until then (``sremarathon twin up`` evaluates no rules)."""

    def __init__(self) -> None:
        self.source: Optional[Callable[[], Iterable[AlertRecord]]] = None

    def firing(self) -> list[AmAlert]:
        if self.source is None:
            return []
        # generatorURL: where Prometheus shows the rule behind the alert
        return [from_record(a, generator_url=f"http://{PROMETHEUS}.{NAMESPACE}.svc:{PROMETHEUS_PORT}/alerts?"
                                             + urlencode({"search": a.labels.get("alertname", "")}))
                for a in list(self.source()) if a.ends_at is None]


def silence_mutation(req: SilenceRequest) -> MutationRequest:
    """A silence change as the policy point judges it (``no-silence-alerts``). No namespace:
    with ``monitoring``, ``protected-namespaces`` would answer first and name the wrong rule."""
    return MutationRequest(actor=req.actor, channel="alertmanager", verb=req.verb, resource="silences",
                           name=req.silence_id, body=req.body)


def alertmanager_service(alerts: Callable[[], Iterable[AmAlert]], now: Callable[[], datetime],
                         rng: random.Random, lock: AbstractContextManager[Any],
                         admission: Optional[Admission] = None) -> tuple[MonitoringService, AlertmanagerAPI]:
    """The ``alertmanager:9093`` Service (Alertmanager's API v2 over ``alerts``, silences that
    pass the policy point), at ``/alertmanager`` on the agent's server. ``now`` is the virtual
    clock, as Prometheus's; ``rng`` draws silence ids (a stream of its own)."""
    def decide(req: SilenceRequest) -> Verdict:
        return admission.decide(silence_mutation(req)) if admission is not None else Decision(True)

    def record(req: SilenceRequest, verdict: Verdict, status: int) -> None:
        if admission is not None:  # the verdict is the Decision decide returned
            admission.record(silence_mutation(req), verdict, status)  # type: ignore[arg-type]

    api = AlertmanagerAPI(alerts=alerts, now=now, rng=rng, decide=decide, record=record, started_at=now(),
                          config=AlertmanagerConfig(route=Route(receiver="sremarathon",
                                                                group_by=("alertname", "namespace")),
                                                    receivers=("sremarathon",)))

    def handle(req: Request) -> Response:
        denied = _read_denied(admission, req.actor, ALERTMANAGER)
        if denied is not None:
            return Response(403, denied)
        with lock:
            status, body = api.handle(req.method, req.path, _query_of(req), req.raw_body or b"", actor=req.actor)
        return Response(status, b"" if body is None else body)

    return MonitoringService(ALERTMANAGER, ALERTMANAGER_PORT, "/alertmanager", handle,
                             labels={"app.kubernetes.io/component": "alert-router"}), api
