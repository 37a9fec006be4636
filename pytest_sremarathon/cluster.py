"""What a cluster offers the pipeline, the fault kinds and the alert rules, whichever backend
runs it: the embedded twin (:class:`~pytest_sremarathon.twin.cluster.TwinCluster`) or a real
cluster behind the kube adapter (:class:`~pytest_sremarathon.kube.cluster.KubeCluster`).

These Protocols are the whole surface those layers may touch, so they can be written and tested
without knowing which backend is underneath. The knobs are read-only properties holding mutable
containers: a fault turns a knob by mutating it (``network.node_up[node] = False``), and the
kube adapter's knobs act on the real cluster when they are turned."""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping, MutableSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .k8s.store import Store
    from .metrics import MetricStore
    from .runtime.code import ArtifactStore


@dataclass
class Topology:
    zones: tuple[str, ...] = ("zone-a", "zone-b")
    nodes_per_zone: int = 2
    node_cpu: str = "4"
    node_memory: str = "16Gi"

    def node_names(self) -> list[tuple[str, str]]:
        return [(f"worker-{z.split('-')[-1]}{i + 1}", z) for z in self.zones for i in range(self.nodes_per_zone)]


def diurnal(t: datetime) -> float:
    """Traffic shape over the day: trough 35% at 04:00 UTC, peak 100% at 16:00 UTC."""
    hours = t.hour + t.minute / 60
    return 0.35 + 0.65 * (0.5 - 0.5 * math.cos(2 * math.pi * (hours - 4) / 24))


@dataclass
class SaturableBackend:
    """A datastore provisioned for the load its cache leaves it (faults/datastore.py, the cache
    stampede; twin/backend_queue.py runs it): past ``capacity_rps`` per serving pod its
    requests queue, and the queue's wait is added to every request it serves."""

    cache: str  # the cache in front of it (a service of the same namespace)
    warm_rps: float  # its load while the cache was warm
    headroom: float  # where its capacity lies between the warm load (0) and the stuck one (1)
    client_timeout_ms: float  # the tightest deadline of the cache's clients
    warm_hit_ratio: float = 1.0  # the cache's before the trigger
    capacity_rps: float = 0.0  # per serving pod; set from the first stuck tick's load
    backlog: float = 0.0  # requests waiting
    delay_ms: float = 0.0  # the wait a request finds now
    offered_rps: float = 0.0  # measured last tick
    hit_ratio: float = 1.0  # the cache's, over the last few ticks (weighted by real requests)
    window: list[tuple[float, float]] = field(default_factory=list)  # (hits, misses) per tick
    primed: bool = False


class NetworkKnobs(Protocol):
    """Physical network state the infrastructure faults turn."""

    @property
    def node_up(self) -> MutableMapping[str, bool]: ...
    @property
    def node_zone(self) -> Mapping[str, str]: ...
    @property
    def partitions(self) -> MutableSet[frozenset[str]]: ...
    @property
    def zone_latency_ms(self) -> MutableMapping[str, float]: ...
    @property
    def dns_broken_zones(self) -> MutableSet[str]: ...
    @property
    def node_cpu_noise(self) -> MutableMapping[str, float]: ...
    @property
    def pod_delay_ms(self) -> MutableMapping[str, float]: ...  # pod uid -> ms added to each request
    @property
    def externals_down(self) -> MutableSet[str]: ...
    @property
    def dns_race_share(self) -> MutableMapping[str, float]: ...  # namespace -> share of lookups lost
    @property
    def backends(self) -> MutableMapping[str, SaturableBackend]: ...  # "<ns>/<datastore>" -> its queue
    cpu_overload_timeouts: bool
    @property
    def clock_skew(self) -> MutableMapping[str, float]: ...  # node -> seconds its clock is off
    credentials_checked: bool  # do third-party APIs refuse an expired credential here?


class RunningContainer(Protocol):
    """A container as fault kinds and alert rules read one."""

    @property
    def namespace(self) -> str: ...
    @property
    def service(self) -> str: ...
    @property
    def pod_name(self) -> str: ...
    @property
    def pod_uid(self) -> str: ...
    @property
    def node(self) -> str: ...
    @property
    def state(self) -> str: ...  # running | waiting | terminated
    @property
    def ready(self) -> bool: ...
    @property
    def restarts(self) -> int: ...
    @property
    def ctx(self) -> Any: ...  # the handler context (``.config_data``: what it started with)
    @property
    def module(self) -> Any: ...  # the running code (a datastore's: its ``_DATA``)
    @property
    def memory(self) -> int: ...

    def log(self, t: datetime, line: str) -> None: ...


class KubeletControl(Protocol):
    @property
    def containers(self) -> Mapping[str, Any]: ...  # pod uid -> RunningContainer
    @property
    def disk_pressure(self) -> MutableSet[str]: ...  # nodes whose disk is filling up

    def memory_of(self, c: Any) -> int: ...


class WorkerNodes(Protocol):
    """The cluster's worker nodes (the twin's :class:`Topology`; on kube, the nodes it lists)."""

    def node_names(self) -> list[tuple[str, str]]: ...  # (name, zone) of each worker


class Cluster(Protocol):
    """One running cluster: its objects, knobs, metrics and deploy target."""

    @property
    def store(self) -> Store: ...
    @property
    def topology(self) -> WorkerNodes: ...
    @property
    def network(self) -> NetworkKnobs: ...
    @property
    def kubelet(self) -> KubeletControl: ...
    @property
    def metrics(self) -> MetricStore: ...
    @property
    def artifacts(self) -> ArtifactStore: ...
    @property
    def surge(self) -> MutableMapping[str, float]: ...  # app namespace -> traffic multiplier

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def node_usage(self, node: str) -> tuple[int, int]: ...  # (millicores, bytes)
