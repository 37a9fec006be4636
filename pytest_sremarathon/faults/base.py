"""What every fault kind provides: injection, its root-cause component, the services it
affects, a mitigation condition judged from cluster evidence, and the on-call cleanup."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol

if TYPE_CHECKING:
    from ..apps import AppSpec
    from ..pipeline.service import Pipelines
    from ..twin.cluster import TwinCluster
    from .catalogue import CuratedChange


class World(Protocol):
    """The parts of a running marathon that fault kinds act on."""

    cluster: "TwinCluster"
    pipelines: "Pipelines"
    apps: dict[str, "AppSpec"]

    def curated(self, app: str, change_id: str) -> "CuratedChange": ...


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
    injected: bool = False
    ended: bool = False
    mitigated: bool = False


class FaultKind:
    """Base class; subclasses set ``name``/``family`` and implement the four operations."""

    name: ClassVar[str]
    family: ClassVar[str]
    description: ClassVar[str] = ""

    def inject(self, world: World, fault: Fault) -> None:
        raise NotImplementedError

    def mitigated(self, world: World, fault: Fault) -> bool:
        raise NotImplementedError

    def cleanup(self, world: World, fault: Fault) -> None:
        raise NotImplementedError

    def symptoms_from(self, world: World, ns: str, service: str) -> set[tuple[str, str]]:
        """A failing service shows symptoms on itself and every transitive caller."""
        app = world.apps[ns]
        return {(ns, service)} | {(ns, s) for s in app.callers_of(service)}
