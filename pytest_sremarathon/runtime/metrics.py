"""The runtime's ``/metrics``: Prometheus text exposition format 0.0.4, no client library.

Series (every one labelled ``app`` and ``service``):

==========================================  =========  ==========================================
``sremarathon_requests_total``              counter    requests served, by ``endpoint`` and ``code``
``sremarathon_request_duration_seconds``    histogram  handling time, by ``endpoint``
``sremarathon_upstream_requests_total``     counter    outgoing ``ctx.call``s, by ``upstream`` and ``code``
``sremarathon_ready``                       gauge      the last readiness check (1 ready, 0 not)
``sremarathon_cache_entries``               gauge      entries the code retains (``ctx.cache`` and module state)
``sremarathon_build_info``                  gauge      1, labelled with the artifact ``digest``
``process_cpu_seconds_total``               counter    user+system CPU of the process
``process_resident_memory_bytes``           gauge      resident set size
``process_start_time_seconds``              gauge      Unix time the process started
==========================================  =========  ==========================================

The orchestrator turns these into the twin's per-service metrics (see
:mod:`pytest_sremarathon.kube.scrape`).
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections import defaultdict
from typing import Iterable

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{escape(str(v))}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _num(x: float) -> str:
    if x == float("inf"):
        return "+Inf"
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


def resident_memory_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):  # not Linux: the peak is the best we have
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class Registry:
    """Thread-safe counters and histograms for one service process."""

    def __init__(self, app: str, service: str, digest: str) -> None:
        self.app, self.service, self.digest = app, service, digest
        self.started = time.time()
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str], int] = defaultdict(int)
        self._upstream: dict[tuple[str, str], int] = defaultdict(int)
        self._hist: dict[str, list[int]] = {}
        self._sum: dict[str, float] = defaultdict(float)
        self._count: dict[str, int] = defaultdict(int)
        self.ready = 0
        self.cache_entries = 0

    def observe(self, endpoint: str, code: int, seconds: float) -> None:
        with self._lock:
            self._requests[(endpoint, str(code))] += 1
            buckets = self._hist.setdefault(endpoint, [0] * len(BUCKETS))
            for i, le in enumerate(BUCKETS):
                if seconds <= le:
                    buckets[i] += 1
            self._sum[endpoint] += seconds
            self._count[endpoint] += 1

    def upstream(self, service: str, code: str) -> None:  # code: an HTTP status, "timeout" or "error"
        with self._lock:
            self._upstream[(service, str(code))] += 1

    def render(self) -> str:
        base = (("app", self.app), ("service", self.service))
        out: list[str] = []

        def family(name: str, kind: str, help_: str) -> None:
            out.append(f"# HELP {name} {help_}")
            out.append(f"# TYPE {name} {kind}")

        with self._lock:
            family("sremarathon_requests_total", "counter", "Requests served, by endpoint and HTTP status code.")
            for (endpoint, code), n in sorted(self._requests.items()):
                out.append(f"sremarathon_requests_total{_labels(base + (('endpoint', endpoint), ('code', code)))} {n}")
            family("sremarathon_request_duration_seconds", "histogram", "Time to handle a request.")
            for endpoint, buckets in sorted(self._hist.items()):
                labels = base + (("endpoint", endpoint),)
                for le, n in zip(BUCKETS, buckets):
                    out.append(f"sremarathon_request_duration_seconds_bucket{_labels(labels + (('le', _num(le)),))} {n}")
                out.append(f"sremarathon_request_duration_seconds_bucket{_labels(labels + (('le', '+Inf'),))} "
                           f"{self._count[endpoint]}")
                out.append(f"sremarathon_request_duration_seconds_sum{_labels(labels)} {_num(self._sum[endpoint])}")
                out.append(f"sremarathon_request_duration_seconds_count{_labels(labels)} {self._count[endpoint]}")
            family("sremarathon_upstream_requests_total", "counter", "Calls to other services, by upstream and code.")
            for (upstream, code), n in sorted(self._upstream.items()):
                out.append(f"sremarathon_upstream_requests_total"
                           f"{_labels(base + (('upstream', upstream), ('code', code)))} {n}")
        family("sremarathon_ready", "gauge", "Result of the last readiness check (1 ready, 0 not ready).")
        out.append(f"sremarathon_ready{_labels(base)} {self.ready}")
        family("sremarathon_cache_entries", "gauge", "Entries retained by the service code.")
        out.append(f"sremarathon_cache_entries{_labels(base)} {self.cache_entries}")
        family("sremarathon_build_info", "gauge", "The artifact this process runs.")
        out.append(f"sremarathon_build_info{_labels(base + (('digest', self.digest),))} 1")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
        out.append(f"process_cpu_seconds_total {_num(round(usage.ru_utime + usage.ru_stime, 6))}")
        family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
        out.append(f"process_resident_memory_bytes {resident_memory_bytes()}")
        family("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.")
        out.append(f"process_start_time_seconds {_num(round(self.started, 3))}")
        return "\n".join(out) + "\n"
