"""HeuristicSRE's incidents: one per localized component, and the watch groups for the rest."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from ..times import iso, iso_or_none, parse_time, time_or_none

#: An ``(app, service)`` pair.
ServiceKey = tuple[str, str]


@dataclass
class Action:
    """Something the agent did for an incident (a note in its journal; the marathon records the
    real requests)."""

    t: datetime
    what: str


@dataclass
class Incident:
    """One localized failure, from the step it was diagnosed (and alerted on) until it is
    claimed resolved or closed.

    Times are whole seconds (:func:`~pytest_sremarathon.baselines.times.whole_seconds`): what
    the journal keeps, so that a restarted agent reasons with the same times.
    """

    key: str
    """``<component>``, then ``<component>#2`` … for later failures of the same component."""
    component: str
    """What failed: ``service:<app>/<svc>``, ``node:<n>``, ``zone:<z>`` or ``external:<name>``."""
    kind: str
    """The diagnosis, a :attr:`Hypothesis.kind`; it picks the repair."""
    app: Optional[str]
    """The app of a service or external fault; ``None`` for machines."""
    opened: datetime
    why: str = ""
    """The latest diagnosis in words."""
    alerts: list[str] = field(default_factory=list)
    """Ids of the alerts it explains (an alert belongs to at most one incident)."""
    onset: Optional[datetime] = None
    """When the earliest of its alerts started."""
    services: list[ServiceKey] = field(default_factory=list)
    """Every failing service it has explained, sorted."""
    nodes: list[str] = field(default_factory=list)
    """The machines it is about (node and zone incidents), sorted."""
    hosted: list[ServiceKey] = field(default_factory=list)
    """For a machine incident: the services its nodes hosted when it opened."""
    cause: Optional[str] = None
    """The id of the change last reverted for it."""
    tried: list[str] = field(default_factory=list)
    """Change ids reverted for it, in order."""
    tried_at: list[datetime] = field(default_factory=list)
    """When each of those reverts was done."""
    actions: list[Action] = field(default_factory=list)
    last_action: Optional[datetime] = None
    healthy: int = 0
    """Consecutive steps its services have been healthy since the last action."""
    absent: int = 0
    """Consecutive steps no diagnosis has named its component."""
    ready_to_claim: bool = False
    """Repaired, and healthy for long enough: claimed once its alerts are resolved."""
    claimed: bool = False
    closed: bool = False
    closed_at: Optional[datetime] = None
    restarted: list[str] = field(default_factory=list)
    """Deployments restarted for it (each at most once)."""
    scale_targets: dict[str, int] = field(default_factory=dict)
    """Replicas it scaled each deployment to (re-applied when a deploy resets them)."""
    last_scaled: Optional[datetime] = None
    fallback_key: Optional[str] = None
    """The degraded-mode setting switched on for it…"""
    fallback_value: Optional[str] = None
    """… and the value it was set to."""
    fallback_tried: list[str] = field(default_factory=list)
    no_fallback_noted: bool = False
    """Whether the report already said the service has no fallback setting (said once)."""
    no_room_noted: bool = False
    """Whether the report already said there is no room to drain its nodes (said once)."""

    def record(self, t: datetime, what: str) -> None:
        """An action was done at ``t`` (whole seconds): the healthy count starts over."""
        self.actions.append(Action(t, what))
        self.last_action = t
        self.healthy = 0

    def close(self, t: datetime) -> None:
        self.closed = True
        self.closed_at = t

    def to_json(self) -> dict[str, Any]:
        return {
            "component": self.component, "kind": self.kind, "app": self.app, "opened": iso(self.opened),
            "why": self.why, "alerts": self.alerts, "onset": iso_or_none(self.onset),
            "services": [list(s) for s in self.services], "nodes": self.nodes,
            "hosted": [list(s) for s in self.hosted], "cause": self.cause, "tried": self.tried,
            "tried_at": [iso(t) for t in self.tried_at],
            "actions": [{"t": iso(a.t), "what": a.what} for a in self.actions],
            "last_action": iso_or_none(self.last_action), "healthy": self.healthy, "absent": self.absent,
            "ready_to_claim": self.ready_to_claim, "claimed": self.claimed, "closed": self.closed,
            "closed_at": iso_or_none(self.closed_at), "restarted": self.restarted,
            "scale_targets": self.scale_targets, "last_scaled": iso_or_none(self.last_scaled),
            "fallback_key": self.fallback_key, "fallback_value": self.fallback_value,
            "fallback_tried": self.fallback_tried, "no_fallback_noted": self.no_fallback_noted,
            "no_room_noted": self.no_room_noted,
        }

    @classmethod
    def from_json(cls, key: str, d: dict[str, Any]) -> Incident:
        opened = parse_time(d.get("opened"))
        if opened is None:
            raise ValueError(f"incident {key} has no opening time")
        return cls(
            key=key, component=str(d["component"]), kind=str(d["kind"]), app=d.get("app"), opened=opened,
            why=str(d.get("why") or ""), alerts=list(d.get("alerts") or []), onset=time_or_none(d.get("onset")),
            services=[(str(a), str(s)) for a, s in d.get("services") or []], nodes=list(d.get("nodes") or []),
            hosted=[(str(a), str(s)) for a, s in d.get("hosted") or []], cause=d.get("cause"),
            tried=list(d.get("tried") or []),
            tried_at=[t for t in (time_or_none(x) for x in d.get("tried_at") or []) if t is not None],
            actions=[Action(t, str(a.get("what", ""))) for a in d.get("actions") or []
                     if (t := time_or_none(a.get("t"))) is not None],
            last_action=time_or_none(d.get("last_action")), healthy=int(d.get("healthy") or 0),
            absent=int(d.get("absent") or 0), ready_to_claim=bool(d.get("ready_to_claim")),
            claimed=bool(d.get("claimed")), closed=bool(d.get("closed")), closed_at=time_or_none(d.get("closed_at")),
            restarted=list(d.get("restarted") or []),
            scale_targets={str(k): int(v) for k, v in (d.get("scale_targets") or {}).items()},
            last_scaled=time_or_none(d.get("last_scaled")), fallback_key=d.get("fallback_key"),
            fallback_value=d.get("fallback_value"), fallback_tried=list(d.get("fallback_tried") or []),
            no_fallback_noted=bool(d.get("no_fallback_noted")), no_room_noted=bool(d.get("no_room_noted")),
        )


@dataclass
class WatchGroup:
    """Firing alerts of one service that no diagnosis explains (yet), grouped as a pager
    groups them: reported, never acted on or claimed."""

    key: str
    """``watch:<app>/<svc>``, then ``…#2`` … once the earlier group has gone quiet."""
    n: int
    """Which group of the service this is (1, 2, …)."""
    open: bool = True
    alerts: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "n": self.n, "open": self.open, "alerts": self.alerts}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> WatchGroup:
        return cls(key=str(d["key"]), n=int(d["n"]), open=bool(d.get("open")), alerts=list(d.get("alerts") or []))
