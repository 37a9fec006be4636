"""The scrape targets a cluster's Prometheus would have, as ``/api/v1/targets`` lists them
and as the ``up`` series reports them: one per application pod (the pool of its Service's
ServiceMonitor), one kubelet (cAdvisor) per node, kube-state-metrics, and Prometheus itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from ..prometheus import TSDB, Target
from ..prometheus.tsdb import Block

PROMETHEUS_INSTANCE = "prometheus.monitoring.svc:9090"


@dataclass(frozen=True)
class TargetState:
    """One target at one scrape: its identifying labels, its URL and whether it answered."""

    job: str
    instance: str
    pool: str
    url: str
    up: bool
    labels: tuple[tuple[str, str], ...] = ()  # namespace, pod, service, node …
    error: str = ""


@dataclass
class ScrapeTargets:
    """The targets of the latest scrape (a ``TargetSource`` for the Prometheus API) and their
    ``up`` series."""

    db: TSDB
    interval: str = "30s"
    _targets: list[TargetState] = field(default_factory=list)
    _last: Optional[float] = None
    _refs: dict[tuple[str, str, tuple[tuple[str, str], ...]], int] = field(default_factory=dict)
    _block: Optional[Block] = None
    # The ``up`` row of the last targets that differed from the scrape before: (those targets,
    # their refs, their values). A row follows from its targets alone (the refs from their job,
    # instance and labels, the values from ``up``), so equal targets append the same row again;
    # most scrapes nothing changed (a scraper reuses each TargetState while its target stands).
    _row: tuple[list[TargetState], list[int], list[float]] = field(default_factory=lambda: ([], [], []))

    def collect(self, t: float, targets: Sequence[TargetState]) -> None:
        """Remember this scrape's targets and append their ``up`` samples at ``t``."""
        self._targets = list(targets)
        self._last = t
        if self._targets != self._row[0] or not self._targets:
            refs: list[int] = []
            values: list[float] = []
            for tg in self._targets:
                key = (tg.job, tg.instance, tg.labels)
                ref = self._refs.get(key)
                if ref is None:
                    ref = self._refs[key] = self.db.ref({"__name__": "up", "job": tg.job, "instance": tg.instance,
                                                         **dict(tg.labels)})
                refs.append(ref)
                values.append(1.0 if tg.up else 0.0)
            self._row = (self._targets, refs, values)
        if self._block is None:
            self._block = self.db.block()
        self._block.append(t, self._row[1], self._row[2])

    def targets(self) -> Sequence[Target]:
        return [Target(labels={"job": tg.job, "instance": tg.instance, **dict(tg.labels)}, scrape_pool=tg.pool,
                       scrape_url=tg.url, health="up" if tg.up else "down", last_error=tg.error,
                       last_scrape=self._last, last_scrape_duration=0.002, scrape_interval=self.interval,
                       discovered_labels={"__address__": tg.instance, "__scheme__": "http",
                                          "__metrics_path__": tg.url.split(tg.instance, 1)[-1] or "/metrics",
                                          "job": tg.job})
                for tg in self._targets]


def prometheus_self() -> TargetState:
    return TargetState("prometheus", PROMETHEUS_INSTANCE, "serviceMonitor/monitoring/prometheus/0",
                       f"http://{PROMETHEUS_INSTANCE}/metrics", True, (("namespace", "monitoring"),))
