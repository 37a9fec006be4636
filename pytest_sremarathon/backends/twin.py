"""The embedded backend: a two-zone twin cluster with the scenario's applications deployed
through their pipelines, served over a loopback Kubernetes API. The marathon and
`sremarathon twin up` build it the same way.

The ``monitoring`` namespace holds the ``prometheus`` Service over the cluster's series, the
``alertmanager`` Service over the alerts the agent's Observation carries and the
``jaeger-query`` Service over the traced requests (:mod:`.monitoring`): through the API
server's service proxy and at ``/prometheus/``, ``/alertmanager/`` and ``/jaeger/`` on the same
server (``urls``). Their randomness (which requests are traced, trace and silence ids) comes
from streams of their own seeded by ``seed``, so the simulation draws the same with or without
them."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..clock import VirtualClock
from ..cluster import Topology
from ..k8s.store import Store
from ..pipeline.service import Pipelines
from ..policy import MutationRequest
from ..runtime.code import ArtifactStore
from ..scenario import Scenario
from ..serving.http import Admission
from ..tracing import JaegerQuery, TraceRecorder
from ..twin.apiserver import ApiServer
from ..twin.cluster import TwinCluster
from ..twin.tracing import MAX_TRACES, HeadSampler
from .agent_api import PREFIX, make_handler
from .monitoring import (
    DeferredAlerts,
    DeferredRules,
    Monitoring,
    alertmanager_service,
    jaeger_service,
    prometheus_service,
)


class TwinBackend:
    name = "twin"

    def __init__(self, scenario: Scenario, clock: VirtualClock, *, emit: Callable[[str, Any], None],
                 admission: Admission, private_dir: Path, tokens: dict[str, str], seed: int = 0,
                 traces: bool = True) -> None:
        self.clock = clock
        # The watch history keeps the kinds a client has asked about (the API server adds them).
        self.store = Store(clock, history_kinds=set())
        topo = scenario.spec.topology
        self.cluster = TwinCluster(self.store, list(scenario.apps), ArtifactStore(),
                                   Topology(tuple(topo.zones), topo.nodes_per_zone, topo.node_cpu, topo.node_memory))
        self.cluster.bootstrap()
        self.pipelines = Pipelines(list(scenario.apps), self.cluster, private_dir / "repos", clock, emit)
        for app in scenario.apps:
            self.pipelines.deploy(app.namespace, "HEAD", "orchestrator")
        # A debug pod's main process shows the agent what the policy lets it read of Secrets.
        self.cluster.runtime.agent_secrets = lambda ns, name: admission.decide(MutationRequest(
            actor="agent", channel="kube", verb="get", resource="secrets", namespace=ns, name=name, app=ns)).allowed
        self.rules = DeferredRules()  # the alert rules' state, once the marathon gives its engine
        self.monitoring = Monitoring()
        prometheus, self.prometheus = prometheus_service(
            self.cluster.prometheus, self.store.lock, lambda: clock.now.timestamp(),
            targets=self.cluster.scraper.targets, rules=self.rules, admission=admission,
            start_time=clock.now.timestamp())
        self.monitoring.add(prometheus)
        self.alert_feed = DeferredAlerts()  # the Observation's alerts, once the marathon gives them
        alertmanager, self.alertmanager = alertmanager_service(
            self.alert_feed.firing, lambda: clock.now, random.Random(f"{seed}:alertmanager"), self.store.lock,
            admission)
        self.monitoring.add(alertmanager)
        rng = random.Random(f"{seed}:traces")
        self.traces = TraceRecorder(rng, max_traces=MAX_TRACES)
        if traces:  # (off: to measure what tracing costs)
            self.cluster.traffic.tracer = HeadSampler(self.traces, rng)
        # virtual µs, as Prometheus answers in virtual seconds: start/end and span times agree
        jaeger = JaegerQuery(self.traces, now_us=lambda: int(clock.now.timestamp() * 1_000_000))
        self.monitoring.add(jaeger_service(jaeger, self.store.lock, admission))
        for svc in self.monitoring.services.values():
            self.cluster.apply(svc.service_object())
        self.cluster.runtime.services = self.monitoring.service_proxy  # `curl prometheus.monitoring:9090` in an exec
        self.server = ApiServer(self.store, tokens=tokens, admission=admission, telemetry=self.cluster,
                                extensions={PREFIX: make_handler(self.pipelines, self.cluster.metrics, admission),
                                            **self.monitoring.extensions()},
                                service_proxy=self.monitoring.service_proxy, runtime=self.cluster.runtime,
                                on_write=self.cluster.react)
        self.server.start()

    @property
    def urls(self) -> dict[str, str]:
        """The monitoring services' direct URLs (``{"prometheus": "http://127.0.0.1:PORT/prometheus"}``)."""
        return self.monitoring.urls(self.server.url)

    def tick(self, dt: float, rng: random.Random) -> None:
        self.cluster.tick(dt, rng)

    def settled(self) -> None:
        """The warm-up is over (:meth:`TwinCluster.settled`)."""
        self.cluster.settled()

    def close(self) -> None:
        self.server.stop()
