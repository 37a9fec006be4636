"""The kube backend's Prometheus series: what each scrape read from the service processes
(``/metrics`` through the pod proxy, :mod:`.scrape`) and from the cluster's objects, recorded
under the names the twin records (:mod:`pytest_sremarathon.monitoring.catalog`), so an agent's
PromQL reads the same on both backends.

=================================================  ==============================================
the runtime exports                                recorded as
=================================================  ==============================================
``sremarathon_requests_total{endpoint,code}``      ``http_requests_total`` (+ namespace, service,
                                                   pod, container, job, instance)
``sremarathon_request_duration_seconds_*``         ``http_request_duration_seconds_*``
``process_cpu_seconds_total``                      ``container_cpu_usage_seconds_total``
``process_resident_memory_bytes``                  ``container_memory_working_set_bytes``
a datastore's requests and their ``_sum``          its exporter's ``*_commands_total{cmd}`` and
                                                   ``*_commands_duration_seconds_total{cmd}``
=================================================  ==============================================

plus kube-state-metrics from the mirrored objects (:mod:`pytest_sremarathon.monitoring.kube_state`)
and ``up`` per scraped pod (0 when its ``/metrics`` did not answer). The counters are the
processes' own: real counts of the real requests the load generator sent (at the backend's
traffic scale), resets included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

from ..apps import AppSpec
from ..k8s.store import Store
from ..monitoring.catalog import (
    DATASTORES,
    HTTP_DURATION,
    HTTP_REQUESTS,
    SLO_P99,
    datastore_flavour,
    datastore_names,
    declare,
)
from ..monitoring.kube_state import KSM_INSTANCE, KSM_JOB, ContainerUsage, KubeState
from ..monitoring.targets import ScrapeTargets, TargetState, prometheus_self
from ..prometheus import TSDB
from ..prometheus.tsdb import Block
from .scrape import CPU, DURATION, REQUESTS, RSS, Sample

DEFAULT_RETENTION = 24 * 3600.0


@dataclass(frozen=True)
class ScrapedPod:
    """One application pod at one scrape: who it is, and what its ``/metrics`` said (None:
    no answer)."""

    namespace: str
    service: str
    pod: str
    uid: str
    container: str
    node: str
    image: str
    ip: str
    port: int
    running: bool
    samples: Optional[Sequence[Sample]]


class KubeSeries:
    """Records one real cluster's series into ``db`` at every scrape."""

    def __init__(self, apps: Iterable[AppSpec], store: Store, retention: float = DEFAULT_RETENTION) -> None:
        self.store = store
        self.db = TSDB(retention=retention)
        declare(self.db)
        self.kube_state = KubeState(self.db)
        self.targets = ScrapeTargets(self.db)
        self._blocks: dict[str, Block] = {}  # pod uid -> its series' block
        self._refs: dict[tuple[str, str, tuple[tuple[str, str], ...]], int] = {}  # (uid, name, labels) -> ref
        self._flavours: dict[tuple[str, str], str] = {}
        self._clients: dict[tuple[str, str], list[str]] = {}
        slo_refs, slo_values = [], []
        for app in apps:
            for svc, spec in app.services.items():
                if spec.slo_p99_ms:
                    slo_refs.append(self.db.ref({"__name__": SLO_P99, "namespace": app.namespace, "service": svc}))
                    slo_values.append(spec.slo_p99_ms / 1000.0)
                if spec.datastore:
                    self._flavours[(app.namespace, svc)] = datastore_flavour(spec.datastore)
                    self._clients[(app.namespace, svc)] = sorted(s for s, sp in app.services.items() if svc in sp.calls)
        self._slo = (slo_refs, slo_values, self.db.block())

    def record(self, now: datetime, pods: Sequence[ScrapedPod]) -> None:
        """Append one scrape at ``now`` (call with ``store.lock`` held: readers take it too)."""
        t = now.timestamp()
        running: dict[tuple[str, str], int] = {}
        for p in pods:
            if p.running:
                running[(p.namespace, p.service)] = running.get((p.namespace, p.service), 0) + 1
        targets: list[TargetState] = []
        usage: list[ContainerUsage] = []
        live: set[str] = set()
        for p in pods:
            live.add(p.uid)
            up = p.samples is not None
            instance = f"{p.ip}:{p.port}" if p.ip else p.pod
            targets.append(TargetState(p.service, instance, f"serviceMonitor/monitoring/{p.service}/0",
                                       f"http://{instance}/metrics", up,
                                       (("namespace", p.namespace), ("pod", p.pod), ("service", p.service)),
                                       "" if up else "the pod's /metrics did not answer through the pod proxy"))
            if p.samples is None:
                continue
            refs, values, cpu, rss = self._pod_series(p, instance, running)
            block = self._blocks.get(p.uid)
            if block is None:
                block = self._blocks[p.uid] = self.db.block()
            block.append(t, refs, values)
            usage.append(ContainerUsage(p.namespace, p.pod, p.container, p.node, p.image, cpu, rss))
        for uid in [u for u in self._blocks if u not in live]:
            del self._blocks[uid]
        if len(self._refs) > 4 * len(live) * 64 + 4096:  # forget the refs of pods long gone
            self._refs = {k: v for k, v in self._refs.items() if k[0] in live}
        targets.append(TargetState(KSM_JOB, KSM_INSTANCE, "serviceMonitor/monitoring/kube-state-metrics/0",
                                   f"http://{KSM_INSTANCE}/metrics", True, (("namespace", "monitoring"),)))
        targets.append(prometheus_self())
        self._slo[2].append(t, self._slo[0], self._slo[1])
        self.targets.collect(t, targets)
        self.kube_state.collect(t, self.store, usage)

    def _ref(self, uid: str, name: str, labels: dict[str, str]) -> int:
        key = (uid, name, tuple(sorted(labels.items())))
        ref = self._refs.get(key)
        if ref is None:
            ref = self._refs[key] = self.db.ref({"__name__": name, **labels})
        return ref

    def _pod_series(self, p: ScrapedPod, instance: str,
                    running: dict[tuple[str, str], int]) -> tuple[list[int], list[float], float, float]:
        base = {"namespace": p.namespace, "service": p.service, "pod": p.pod, "job": p.service, "instance": instance}
        flavour = self._flavours.get((p.namespace, p.service))
        refs: list[int] = []
        values: list[float] = []
        cpu = rss = 0.0
        commands: dict[str, list[float]] = {}
        assert p.samples is not None
        for s in p.samples:
            if s.name == CPU:
                cpu = s.value
                continue
            if s.name == RSS:
                rss = s.value
                continue
            if s.name == REQUESTS:
                suffix = None
            elif s.name.startswith(DURATION + "_"):
                suffix = s.name[len(DURATION):]
            else:
                continue
            labels = {k: v for k, v in s.labels if k not in ("app", "service")}
            if flavour:  # a datastore: its exporter's command counters
                if suffix in (None, "_sum"):
                    acc = commands.setdefault(labels.get("endpoint", ""), [0.0, 0.0])
                    acc[0 if suffix is None else 1] += s.value
                continue
            name = HTTP_REQUESTS if suffix is None else HTTP_DURATION + suffix
            refs.append(self._ref(p.uid, name, {**base, "container": p.container, **labels}))
            values.append(s.value)
        if flavour:
            prefix, _port, label, names = DATASTORES[flavour]
            commands_name, seconds_name, connections_name, extra = datastore_names(prefix)
            for op, (count, seconds) in sorted(commands.items()):
                cmd = names.get(op, op)
                refs.append(self._ref(p.uid, commands_name, {**base, label: cmd}))
                values.append(count)
                refs.append(self._ref(p.uid, seconds_name, {**base, label: cmd}))
                values.append(seconds)
            clients = sum(running.get((p.namespace, svc), 0) for svc in self._clients.get((p.namespace, p.service), []))
            refs.append(self._ref(p.uid, f"{prefix}_up", base))
            values.append(1.0)
            refs.append(self._ref(p.uid, connections_name, {**base, **extra}))
            values.append(float(clients))
        return refs, values, cpu, rss
