"""How long an HTTP probe waits for its answer when the pod is overloaded.

A probe is a request like any other to the pod's HTTP server: it queues behind the requests in
flight. The traffic engine's overload model (``twin/traffic.py``) is that when a pod's CPU
demand passes its limit, the share ``1 - limit/demand`` of what arrives cannot be served in
time and waits until its caller gives up; the same share of the kubelet's probes then waits past
their ``timeoutSeconds`` ("context deadline exceeded"), while below the limit a probe answers
within milliseconds. Which probes fall into that share is a low-discrepancy sequence per pod
(golden-ratio steps from a phase hashed from the pod's uid): deterministic, drawing nothing from
the run's random streams, and spreading failures evenly — so a probe that tolerates
``failureThreshold: 3`` consecutive failures survives a moderate overload that a probe with
``failureThreshold: 1`` does not.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

GOLDEN = 0.6180339887498949


class Loaded(Protocol):
    """What the queue reads of a container (``kubelet.Container``): its CPU demand and limit."""

    pod_uid: str
    cpu_millicores: float
    cpu_limit: float


def overload_share(c: Loaded) -> float:
    """The share of the requests (and probes) arriving at ``c`` that wait past any deadline."""
    if not c.cpu_limit or c.cpu_millicores <= c.cpu_limit:
        return 0.0
    return 1.0 - c.cpu_limit / c.cpu_millicores


class ProbeQueue:
    """Which of a container's probes time out in its queue (per container: how many it sent)."""

    def __init__(self) -> None:
        self.sent: dict[str, int] = {}  # pod uid -> probes sent into an overloaded queue so far

    def timeouts(self, c: Loaded, probe: dict[str, Any], dt: float) -> list[bool]:
        """For each of the probes of this kubelet pass (one per ``periodSeconds`` of ``dt``),
        whether it timed out in the queue; empty when the pod is not overloaded."""
        share = overload_share(c)
        if share <= 0.0:
            return []
        n = max(1, int(dt // max(1, int(probe.get("periodSeconds", 10)))))
        k = self.sent.get(c.pod_uid, 0)
        self.sent[c.pod_uid] = k + n
        phase = int.from_bytes(hashlib.sha256(c.pod_uid.encode()).digest()[:8], "big") / 2.0**64
        return [((phase + (k + i) * GOLDEN) % 1.0) < share for i in range(n)]

    def forget(self, uid: str) -> None:
        self.sent.pop(uid, None)
