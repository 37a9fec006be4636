"""Time series of per-service metrics, sampled once per tick (the twin's Prometheus)."""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from datetime import datetime
from typing import Optional

METRICS = ("requests_per_second", "error_ratio", "latency_p50_ms", "latency_p99_ms", "cpu_millicores",
           "memory_bytes", "restarts", "ready_pods")


class MetricStore:
    def __init__(self) -> None:
        self._times: dict[tuple[str, str], list[datetime]] = defaultdict(list)
        self._values: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        # (app, service) -> its series' lists in METRICS order (the same lists as in _values,
        # which never drops one): a record appends to them without building a key per metric.
        self._columns: dict[tuple[str, str], tuple[list[float], ...]] = {}

    def record(self, app: str, service: str, t: datetime, values: dict[str, float]) -> None:
        key = (app, service)
        self._times[key].append(t)
        columns = self._columns.get(key)
        if columns is None:
            columns = self._columns[key] = tuple(self._values[(app, service, name)] for name in METRICS)
        get = values.get
        for name, column in zip(METRICS, columns):
            column.append(float(get(name, 0.0)))

    def series(self, app: str, service: str, name: str, since: Optional[datetime] = None) -> list[tuple[datetime, float]]:
        if name not in METRICS:
            raise KeyError(f"unknown metric {name!r}; known metrics: {', '.join(METRICS)}")
        times = self._times.get((app, service), [])
        values = self._values.get((app, service, name), [])
        start = bisect_left(times, since) if since else 0
        return list(zip(times[start:], values[start:]))

    def window(self, app: str, service: str, name: str, n: int) -> list[float]:
        """The last ``n`` samples (most recent last)."""
        return self._values.get((app, service, name), [])[-n:]

    def latest(self, app: str, service: str, name: str, default: float = 0.0) -> float:
        values = self._values.get((app, service, name))
        return values[-1] if values else default

    def services(self) -> list[tuple[str, str]]:
        return sorted(self._times)
