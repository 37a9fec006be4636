"""Telemetry on a real cluster without installing anything: the orchestrator scrapes every
application pod's ``/metrics`` through the API server's pod proxy
(``/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/metrics``) and turns the counters into the
twin's per-service metrics (:data:`pytest_sremarathon.metrics.METRICS`), recorded in the
same :class:`~pytest_sremarathon.metrics.MetricStore` — so the alert rules, the agent's
telemetry endpoint and the SLI records read the same numbers on both backends.

Per service, between two scrapes ``dt`` seconds apart (the twin's definitions):

* ``requests_per_second`` — Δ ``sremarathon_requests_total`` / dt, summed over pods;
* ``error_ratio`` — Δ requests with a status ≥ 400 / Δ requests;
* ``latency_p50_ms`` / ``latency_p99_ms`` — quantiles of the Δ of the summed
  ``sremarathon_request_duration_seconds`` histogram (linear within a bucket, as PromQL's
  ``histogram_quantile``);
* ``cpu_millicores`` — Δ ``process_cpu_seconds_total`` / dt × 1000, summed over pods;
* ``memory_bytes`` — the largest pod's ``process_resident_memory_bytes``;
* ``restarts`` and ``ready_pods`` — from the pods' status (container restarts; Ready pods).

A counter that went down (the process restarted) counts from zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional

from ..metrics import MetricStore

REQUESTS = "sremarathon_requests_total"
DURATION = "sremarathon_request_duration_seconds"
CPU = "process_cpu_seconds_total"
RSS = "process_resident_memory_bytes"


class ParseError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str, default: str = "") -> str:
        return dict(self.labels).get(key, default)


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|\})')


def _unescape(s: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}.get(m.group(1), "\\" + m.group(1)), s)


def _float(s: str) -> float:
    low = s.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(s)


def parse(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition (format 0.0.4); comments are skipped."""
    out: list[Sample] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if not m:
            raise ParseError(f"line {lineno}: no metric name in {raw!r}")
        name, pos = m.group(0), m.end()
        labels: list[tuple[str, str]] = []
        if pos < len(line) and line[pos] == "{":
            pos += 1
            if line[pos:pos + 1] == "}":
                pos += 1
            else:
                while True:
                    lm = _LABEL.match(line, pos)
                    if not lm:
                        raise ParseError(f"line {lineno}: bad labels in {raw!r}")
                    labels.append((lm.group(1), _unescape(lm.group(2))))
                    pos = lm.end()
                    if lm.group(3) == "}":
                        break
        parts = line[pos:].split()
        if not parts:
            raise ParseError(f"line {lineno}: no value in {raw!r}")
        try:
            value = _float(parts[0])
        except ValueError:
            raise ParseError(f"line {lineno}: bad value {parts[0]!r}") from None
        out.append(Sample(name, tuple(labels), value))
    return out


@dataclass
class PodCounters:
    """The cumulative numbers of one process, read from one scrape."""

    requests: float = 0.0
    errors: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count, summed over endpoints
    cpu_seconds: float = 0.0
    rss_bytes: float = 0.0
    start_time: float = 0.0

    @classmethod
    def from_samples(cls, samples: Iterable[Sample]) -> PodCounters:
        c = cls()
        for s in samples:
            if s.name == REQUESTS:
                c.requests += s.value
                code = s.label("code")
                if not code.isdigit() or int(code) >= 400:
                    c.errors += s.value
            elif s.name == DURATION + "_bucket":
                le = _float(s.label("le", "+Inf"))
                c.buckets[le] = c.buckets.get(le, 0.0) + s.value
            elif s.name == CPU:
                c.cpu_seconds = s.value
            elif s.name == RSS:
                c.rss_bytes = s.value
            elif s.name == "process_start_time_seconds":
                c.start_time = s.value
        return c


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """PromQL's ``histogram_quantile`` over cumulative ``{le: count}`` buckets (seconds)."""
    if not buckets:
        return 0.0
    ordered = sorted(buckets.items())
    total = ordered[-1][1]
    if total <= 0:
        return 0.0
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in ordered:
        if count >= rank:
            if math.isinf(le):
                return prev_le  # the highest finite bound, as Prometheus does
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


@dataclass(frozen=True)
class PodScrape:
    """One pod's scrape: its service, its /metrics text (None when unreachable) and status."""

    namespace: str
    service: str
    pod: str
    text: Optional[str]
    ready: bool = True
    restarts: int = 0


def _delta(now: float, before: float) -> float:
    return now - before if now >= before else now  # a reset counter counts from zero


@dataclass
class ServiceMetrics:
    """Turns successive scrapes into per-service samples in a :class:`MetricStore`."""

    metrics: MetricStore = field(default_factory=MetricStore)
    _last: dict[tuple[str, str], PodCounters] = field(default_factory=dict)
    _last_time: Optional[datetime] = None

    def record(self, t: datetime, pods: Iterable[PodScrape], services: Iterable[tuple[str, str]],
               dt: Optional[float] = None) -> dict[tuple[str, str], dict[str, float]]:
        """Record one sample per service in ``services`` at time ``t`` from ``pods``; ``dt``
        defaults to the time since the previous call. Returns the values recorded."""
        if dt is None:
            dt = (t - self._last_time).total_seconds() if self._last_time is not None else 0.0
        self._last_time = t
        out: dict[tuple[str, str], dict[str, float]] = {
            key: {"cpu_millicores": 0.0, "memory_bytes": 0.0, "restarts": 0.0, "ready_pods": 0.0}
            for key in services}
        traffic: dict[tuple[str, str], list] = {}
        seen: dict[tuple[str, str], PodCounters] = {}
        for p in pods:
            key = (p.namespace, p.service)
            m = out.get(key)
            if m is None:
                continue
            m["restarts"] += p.restarts
            if p.ready:
                m["ready_pods"] += 1
            if p.text is None:
                continue
            now = PodCounters.from_samples(parse(p.text))
            pod_key = (p.namespace, p.pod)
            seen[pod_key] = now
            before = self._last.get(pod_key)
            if before is not None and before.start_time and now.start_time and before.start_time != now.start_time:
                before = None  # a new process behind the same pod name
            before = before or PodCounters(start_time=now.start_time)
            m["memory_bytes"] = max(m["memory_bytes"], now.rss_bytes)
            if dt > 0:
                m["cpu_millicores"] += _delta(now.cpu_seconds, before.cpu_seconds) / dt * 1000.0
            acc = traffic.setdefault(key, [0.0, 0.0, {}])
            acc[0] += _delta(now.requests, before.requests)
            acc[1] += _delta(now.errors, before.errors)
            for le, count in now.buckets.items():
                acc[2][le] = acc[2].get(le, 0.0) + _delta(count, before.buckets.get(le, 0.0))
        self._last = seen
        for key, (requests, errors, buckets) in traffic.items():
            if requests > 0 and dt > 0:
                m = out[key]
                m["requests_per_second"] = requests / dt
                m["error_ratio"] = min(1.0, errors / requests)
                m["latency_p50_ms"] = histogram_quantile(0.5, buckets) * 1000.0
                m["latency_p99_ms"] = histogram_quantile(0.99, buckets) * 1000.0
        for (ns, svc), values in out.items():
            self.metrics.record(ns, svc, t, values)
        return out


def pod_proxy_path(namespace: str, pod: str, port: int | str = 8080, path: str = "metrics") -> str:
    """The API server path that proxies to a pod's port."""
    return f"/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/{path.lstrip('/')}"
