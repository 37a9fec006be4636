"""What HeuristicSRE remembers between steps: its journal's content."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .graph import CallGraph
from .incident import Incident, ServiceKey, WatchGroup


@dataclass
class LatencyBaseline:
    """A service's healthy p99 latency, a slow-moving average of healthy samples."""

    p99: float
    n: int = 1
    """Healthy samples it has taken in."""


@dataclass
class HeuristicState:
    incidents: dict[str, Incident] = field(default_factory=dict)
    """Every incident of the run, open or not, by key."""
    open: dict[str, str] = field(default_factory=dict)
    """Component -> the key of its open incident."""
    generation: dict[str, int] = field(default_factory=dict)
    """Component -> incidents opened for it so far."""
    graph: CallGraph = field(default_factory=CallGraph)
    baseline: dict[str, LatencyBaseline] = field(default_factory=dict)
    """``app/svc`` -> its healthy latency."""
    reverted: list[str] = field(default_factory=list)
    """Change ids the agent reverted (never blamed again)."""
    cordoned: list[str] = field(default_factory=list)
    """Nodes the agent cordoned (it uncordons only those, when their incident is over)."""
    owner: dict[str, str] = field(default_factory=dict)
    """Alert id -> the incident it belongs to."""
    config_edges_for: list[str] = field(default_factory=list)
    """Apps whose ConfigMaps have been read for call edges (once per app)."""
    watch: dict[str, WatchGroup] = field(default_factory=dict)
    """``app/svc`` -> its latest watch group."""

    def open_incident(self, component: str) -> Incident | None:
        key = self.open.get(component)
        return None if key is None else self.incidents[key]

    def live_services(self) -> set[ServiceKey]:
        """The services of every incident that is not closed."""
        return {s for inc in self.incidents.values() if not inc.closed for s in inc.services}

    def to_json(self) -> dict[str, Any]:
        return {
            "incidents": {k: inc.to_json() for k, inc in self.incidents.items()},
            "open": self.open, "generation": self.generation, "edges": self.graph.to_json(),
            "baseline": {k: {"p99": b.p99, "n": b.n} for k, b in self.baseline.items()},
            "reverted": self.reverted, "cordoned": self.cordoned, "owner": self.owner,
            "config_edges_for": self.config_edges_for,
            "watch": {k: w.to_json() for k, w in self.watch.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> HeuristicState:
        return cls(
            incidents={k: Incident.from_json(k, v) for k, v in (d.get("incidents") or {}).items()},
            open=dict(d.get("open") or {}), generation=dict(d.get("generation") or {}),
            graph=CallGraph({app: {caller: list(cs) for caller, cs in callers.items()}
                             for app, callers in (d.get("edges") or {}).items()}),
            baseline={k: LatencyBaseline(float(b["p99"]), int(b.get("n", 1))) for k, b in (d.get("baseline") or {}).items()},
            reverted=list(d.get("reverted") or []), cordoned=list(d.get("cordoned") or []),
            owner=dict(d.get("owner") or {}), config_edges_for=list(d.get("config_edges_for") or []),
            watch={k: WatchGroup.from_json(w) for k, w in (d.get("watch") or {}).items()},
        )
