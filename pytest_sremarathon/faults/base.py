"""What every fault kind provides: injection, its root-cause component, the services it
affects, a mitigation condition judged from cluster evidence, and the on-call cleanup."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol

from ..k8s.objects import workload_kind
from ..provenance import EvidenceRef

if TYPE_CHECKING:
    from ..apps import AppSpec
    from ..cluster import Cluster
    from ..pipeline.service import Pipelines
    from .catalogue import CuratedChange


class World(Protocol):
    """The parts of a running marathon that fault kinds act on."""

    cluster: Cluster
    pipelines: Pipelines
    apps: dict[str, AppSpec]

    def curated(self, app: str, change_id: str) -> CuratedChange: ...


@dataclass
class Fault:
    """One scheduled fault; its ground-truth identity plus what injection learned."""

    id: str
    kind: str
    family: str  # change | dependency | infrastructure | load
    app: str
    start: datetime
    end: datetime
    params: dict[str, Any]
    component: str = ""
    change: Optional[str] = None  # pipeline change id, for change-induced faults
    description: str = ""
    impact: set[tuple[str, str]] = field(default_factory=set)  # (namespace, service) showing symptoms
    nodes: set[str] = field(default_factory=set)
    zones: set[str] = field(default_factory=set)
    arrived: bool = False  # its cause is in (a faulty change committed and queued for its build …)
    injected: bool = False  # … and active: ``truth.fault`` recorded, the window running
    ended: bool = False
    mitigated: bool = False


class FaultKind:
    """Base class; subclasses set ``name``/``family`` and implement the four operations."""

    name: ClassVar[str]
    family: ClassVar[str]
    description: ClassVar[str] = ""
    # The catalogue's columns (``sremarathon kinds``; docs/INTERNALS.md "Fault kinds"). Every
    # built-in kind fills them; a plugin kind that does not shows its description only.
    #: How the root cause is named (DESIGN.md identifiers), e.g. ``service:<app>/<service>``.
    component_form: ClassVar[str] = ""
    #: How the fault reaches the cluster.
    arrives: ClassVar[str] = "injected straight into the cluster or its surroundings"
    #: The repair the kind documents: what an SRE owes while the fault is active.
    repair: ClassVar[str] = ""
    #: What the mitigation judge reads from the cluster to call the fault repaired.
    judge: ClassVar[str] = ""

    def inject(self, world: World, fault: Fault) -> None:
        raise NotImplementedError

    def mitigated(self, world: World, fault: Fault) -> bool:
        raise NotImplementedError

    def active(self, world: World, fault: Fault) -> bool:
        """Has what ``inject`` did taken effect? The fault's window starts when it has (a
        change's build takes time); most kinds act at once."""
        return True

    def cleanup(self, world: World, fault: Fault) -> None:
        raise NotImplementedError

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """What the mitigation condition reads, as provenance can attribute it: the repair is
        the agent's when an agent action since the fault began put one of these into its
        present state (SCORING.md §3). The default, for kinds that do not say: the pod
        templates, replica counts and pods of every service the fault touches, the Services of
        its app, and the cordons of its nodes."""
        services = {(fault.app, s) for s in world.apps[fault.app].services} if fault.app in world.apps else set()
        out = [ref for ns, svc in sorted(services | fault.impact) for ref in workload_evidence(world, ns, svc)]
        out += [EvidenceRef("Service", ns, svc, "spec") for ns, svc in sorted(services)]
        return out + node_evidence(fault.nodes)

    def symptoms_from(self, world: World, ns: str, service: str) -> set[tuple[str, str]]:
        """A failing service shows symptoms on itself and every transitive caller."""
        app = world.apps[ns]
        return {(ns, service)} | {(ns, s) for s in app.callers_of(service)}


def workload_evidence(world: World, ns: str, service: str, *, pods: bool = True,
                      replicas: bool = True) -> list[EvidenceRef]:
    """A service's workload, its Deployment or StatefulSet (pod template and, with ``replicas``,
    its replica count) and, with ``pods``, its active pods."""
    kind = workload_kind(world.cluster.store, ns, service)
    out = [EvidenceRef(kind, ns, service, "template")]
    if replicas:
        out.append(EvidenceRef(kind, ns, service, "replicas"))
    if pods:
        out += [EvidenceRef("Pod", ns, p["metadata"]["name"], "origin")
                for p in world.cluster.store.list("Pod", ns)
                if (p["metadata"].get("labels") or {}).get("app") == service and not p["metadata"].get("deletionTimestamp")]
    return out


def node_evidence(nodes: Iterable[str]) -> list[EvidenceRef]:
    return [EvidenceRef("Node", None, n, "unschedulable") for n in sorted(nodes)]
