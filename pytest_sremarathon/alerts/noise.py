"""Background alerts that no fault explains: the non-actionable majority of a real pager's
traffic (CALIBRATION.md: 70–90% of alerts are not actionable)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

# name, severity, label kind, summary — the usual suspects of a kube-prometheus pager
TEMPLATES: tuple[tuple[str, str, str, str], ...] = (
    ("CPUThrottlingHigh", "info", "pod", "{target} is throttled 27% of the time"),
    ("KubeHpaMaxedOut", "warning", "service", "HPA of {target} has been at max replicas for 15m"),
    ("KubeClientCertificateExpiration", "warning", "cluster", "A client certificate expires in less than 7 days"),
    ("NodeClockNotSynchronising", "warning", "node", "Clock on {target} is not synchronising"),
    ("KubeJobFailed", "warning", "cluster", "Job monitoring/backup-etcd failed to complete"),
    ("NodeFilesystemSpaceFillingUp", "warning", "node", "Filesystem on {target} is predicted to run out of space within 24h"),
    ("TargetDown", "warning", "service", "10% of the {target} targets are down"),
    ("KubeletTooManyPods", "info", "node", "{target} is running at 91% of its pod capacity"),
    ("PrometheusRuleFailures", "warning", "cluster", "Prometheus is failing rule evaluations"),
    ("KubeAPIErrorBudgetBurn", "warning", "cluster", "The API server is burning too much error budget"),
    ("ServiceLatencySLOBurn", "warning", "service", "{target} p99 latency above its SLO"),
    ("KubeMemoryOvercommit", "warning", "cluster", "Cluster has overcommitted memory resource requests"),
)

#: How the kube-prometheus rules behind those alerts read (group, PromQL, for: seconds), for
#: ``/api/v1/rules``: where a real pager's background alerts come from.
RULES: dict[str, tuple[str, str, float]] = {
    "CPUThrottlingHigh": ("kubernetes-resources",
                          'sum by (container, pod, namespace) (increase(container_cpu_cfs_throttled_periods_total'
                          '{container!=""}[5m])) / sum by (container, pod, namespace) '
                          '(increase(container_cpu_cfs_periods_total[5m])) > 0.25', 900),
    "KubeHpaMaxedOut": ("kubernetes-apps", 'kube_horizontalpodautoscaler_status_current_replicas'
                        ' == kube_horizontalpodautoscaler_spec_max_replicas', 900),
    "KubeClientCertificateExpiration": ("kubernetes-system-apiserver",
                                        'apiserver_client_certificate_expiration_seconds_count > 0 and on (job) '
                                        'histogram_quantile(0.01, sum by (job, le) (rate('
                                        'apiserver_client_certificate_expiration_seconds_bucket[5m]))) < 604800', 300),
    "NodeClockNotSynchronising": ("node-exporter", 'min_over_time(node_timex_sync_status[5m]) == 0'
                                  ' and node_timex_maxerror_seconds >= 16', 600),
    "KubeJobFailed": ("kubernetes-apps", 'kube_job_failed > 0', 900),
    "NodeFilesystemSpaceFillingUp": ("node-exporter", 'predict_linear(node_filesystem_avail_bytes{fstype!=""}[6h], '
                                     '24 * 60 * 60) < 0', 3600),
    "TargetDown": ("general.rules", '100 * (count by (job, namespace, service) (up == 0)'
                   ' / count by (job, namespace, service) (up)) > 10', 600),
    "KubeletTooManyPods": ("kubernetes-system-kubelet", 'count by (node) (kube_pod_info == 1)'
                           ' / on (node) kube_node_status_allocatable{resource="pods"} > 0.95', 900),
    "PrometheusRuleFailures": ("prometheus", 'increase(prometheus_rule_evaluation_failures_total[5m]) > 0', 900),
    "KubeAPIErrorBudgetBurn": ("kube-apiserver-slos", 'sum(apiserver_request:burnrate1h) > (14.40 * 0.01000)', 120),
    "KubeMemoryOvercommit": ("kubernetes-resources",
                             'sum(namespace_memory:kube_pod_container_resource_requests:sum) - '
                             '(sum(kube_node_status_allocatable{resource="memory"}) - '
                             'max(kube_node_status_allocatable{resource="memory"})) > 0', 600),
}


class NoiseConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    alerts_per_hour: float = Field(default=6.0, ge=0)
    flapping_share: float = Field(default=0.3, ge=0, le=1)  # share of noise alerts that flap
    median_minutes: float = Field(default=12.0, gt=0)  # lognormal median duration of one episode


@dataclass
class NoiseEpisode:
    name: str
    severity: str
    labels: dict[str, str]
    summary: str
    fire_at: datetime
    resolve_at: datetime
    flaps_left: int


class NoiseGenerator:
    def __init__(self, config: NoiseConfig, rng: random.Random, targets: dict[str, list[str]]) -> None:
        self.config = config
        self.rng = rng
        self.targets = targets  # label kind -> candidate values (service "ns/svc", node names, pods)
        self.pending: list[NoiseEpisode] = []

    def _labels(self, kind: str) -> tuple[dict[str, str], str]:
        if kind == "service" and self.targets.get("service"):
            ns, svc = self.rng.choice(self.targets["service"]).split("/")
            return {"namespace": ns, "app": ns, "service": svc}, f"{ns}/{svc}"
        if kind == "node" and self.targets.get("node"):
            node = self.rng.choice(self.targets["node"])
            return {"node": node}, node
        if kind == "pod" and self.targets.get("service"):
            ns, svc = self.rng.choice(self.targets["service"]).split("/")
            return {"namespace": ns, "app": ns, "service": svc, "container": svc}, f"{ns}/{svc}"
        return {"namespace": "monitoring"}, "cluster"

    def _duration(self) -> timedelta:
        minutes = self.config.median_minutes * math.exp(self.rng.gauss(0, 0.8))
        return timedelta(minutes=max(2.0, min(minutes, 180.0)))

    def tick(self, now: datetime, dt: float) -> list[NoiseEpisode]:
        """Start new episodes (Poisson) and return the episodes that begin at this tick."""
        expected = self.config.alerts_per_hour * dt / 3600
        starts = 0
        # Poisson by inversion (small means)
        threshold, product = math.exp(-expected), self.rng.random()
        while product > threshold:
            starts += 1
            product *= self.rng.random()
        out: list[NoiseEpisode] = []
        for _ in range(starts):
            name, severity, kind, summary = self.rng.choice(TEMPLATES)
            labels, target = self._labels(kind)
            flaps = self.rng.randint(2, 5) if self.rng.random() < self.config.flapping_share else 0
            out.append(NoiseEpisode(name, severity, labels, summary.format(target=target), now, now + self._duration(), flaps))
        return out

    def refire(self, episode: NoiseEpisode, now: datetime) -> Optional[NoiseEpisode]:
        """A flapping alert fires again shortly after it resolved."""
        if episode.flaps_left <= 0:
            return None
        gap = timedelta(minutes=self.rng.uniform(2, 8))
        return NoiseEpisode(episode.name, episode.severity, episode.labels, episode.summary, now + gap,
                            now + gap + timedelta(minutes=self.rng.uniform(2, 6)), episode.flaps_left - 1)
