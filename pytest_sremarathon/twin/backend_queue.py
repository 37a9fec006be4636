"""Queueing at a datastore provisioned below its cold-cache load (``Network.backends``).

A fluid queue per backend, advanced once a tick from the load the previous tick's sampled
traffic offered it: past its capacity (per serving pod) the backlog grows, and the wait it
causes (backlog / capacity) is added to every request the backend serves. The loop that makes
a cache stampede metastable is then the applications' own code: a cache miss reads the
backend; once the wait passes the caller's timeout, the read times out before the caller
writes the value back into the cache, so the cache never refills and the misses go on — while
the backend still serves every abandoned read (its load counts them) and the drivers' retry of
each. Only capacity above the
cold-cache load, or less load, drains the queue.

Costs nothing while no backend is armed (healthy runs): the cluster calls :func:`tick` only
when ``Network.backends`` holds one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..cluster import SaturableBackend

if TYPE_CHECKING:
    from .counts import Groups
    from .kubelet import Kubelet
    from .traffic import Network

#: The longest a request waits in the queue: past it the server refuses new connections
#: (mongod's ``net.maxIncomingConnections`` is reached by the waiting ones) — a bound, so that
#: a drained backend recovers in a few ticks rather than the hours an unbounded fluid would take.
MAX_WAIT_S = 30.0
#: Retries of a read that timed out: the database drivers' retryable reads (MongoDB's
#: "Retryable Reads" specification: one retry, on by default in every official driver).
RETRIES = 1
#: Ticks of the cache's hit ratio the judge reads (two minutes at the default 30 s tick).
HIT_WINDOW = 4


def tick(network: Network, kubelet: Kubelet, samples: Groups, dt: float) -> None:
    """Advance every armed backend by one tick of ``dt`` seconds; ``samples`` are the calls
    of the tick that just ran (twin/counts.py groups: key[:2] is (namespace, service), value[1]
    the real requests it stands for)."""
    offered: dict[tuple[str, str], float] = {}
    for key, group in samples.items():
        offered[(key[0], key[1])] = offered.get((key[0], key[1]), 0.0) + group[1]
    for name, backend in network.backends.items():
        ns, svc = name.split("/", 1)
        pods = [c for c in kubelet.containers.values()
                if c.namespace == ns and c.service == svc and c.state == "running" and c.ctx is not None]
        # (the tick before the backend was armed measured a load from before its trigger)
        _queue(network, backend, pods, offered.get((ns, svc), 0.0) / dt, dt if backend.primed else 0.0)
        _hit_ratio(backend, [c for c in kubelet.containers.values()
                             if c.namespace == ns and c.service == backend.cache and c.module is not None])


def _queue(network: Network, backend: SaturableBackend, pods: list, offered_rps: float, dt: float) -> None:
    if backend.delay_ms > backend.client_timeout_ms:  # the drivers retry a timed-out read once
        offered_rps *= 1 + RETRIES
    backend.offered_rps = offered_rps
    if not pods:  # no server: the waiting clients are still there when one comes back
        return
    if dt and not backend.capacity_rps:
        # Provisioned between the warm load and the stuck one (measured in the herd's tick,
        # the first with the queue full): both states are stable, which makes the failure
        # metastable.
        stuck = max(offered_rps, backend.warm_rps)
        backend.capacity_rps = (backend.warm_rps + backend.headroom * (stuck - backend.warm_rps)) / len(pods)
        backend.backlog = backend.capacity_rps * len(pods) * backend.delay_ms / 1000.0
    capacity = backend.capacity_rps * len(pods)
    if dt and capacity:
        backend.backlog = min(max(0.0, backend.backlog + (offered_rps - capacity) * dt), capacity * MAX_WAIT_S)
        backend.delay_ms = backend.backlog / capacity * 1000.0
    for c in pods:
        if backend.delay_ms > 0:
            network.pod_delay_ms[c.pod_uid] = backend.delay_ms
        else:
            network.pod_delay_ms.pop(c.pod_uid, None)


def _hit_ratio(backend: SaturableBackend, caches: list) -> None:
    """The cache's hit ratio from its pods' ``get_hits``/``get_misses`` counters since the last
    tick (read and zeroed here; the first look only zeroes what accumulated before)."""
    hits = misses = 0.0
    for c in caches:
        stats = getattr(c.module, "_STATS", None)
        if stats is None:
            continue
        hits += stats["get_hits"]
        misses += stats["get_misses"]
        stats["get_hits"] = stats["get_misses"] = 0.0
    if not backend.primed:
        backend.primed = True
        return
    backend.window = [*backend.window, (hits, misses)][-HIT_WINDOW:]
    total_hits = sum(h for h, _ in backend.window)
    total = total_hits + sum(m for _, m in backend.window)
    if total > 0:
        backend.hit_ratio = total_hits / total

