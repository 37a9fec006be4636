"""One incident per alerting service: the grouping RollbackAgent and RestartAgent share.

Firing alerts are grouped by ``(labels["app"], labels["service"])`` into one open incident per
service, keyed ``svc:<app>/<service>``; once that one is claimed, the next one for the same
service is ``svc:<app>/<service>#2`` and so on. The grouping and whatever the agent adds to it
live in the agent's journal, so a restarted process carries on where the last one stopped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Optional, TypeVar

from pytest_sremarathon.agent.protocol import Alert, Environment, Observation

from .alerts import by_start
from .journal import Journal

_Self = TypeVar("_Self", bound="ServiceIncident")


@dataclass
class ServiceIncident:
    """The alerts of one service, from its first firing alert until the agent claims it."""

    key: str
    app: str
    service: str
    alerts: list[str] = field(default_factory=list)
    """Alert ids, in the order they joined."""
    claimed_step: Optional[int] = None
    """The step at which the agent claimed it resolved (then it is no longer open)."""

    @property
    def component(self) -> str:
        return f"service:{self.app}/{self.service}"

    def to_json(self) -> dict[str, Any]:
        """The journal's form: every field but the key (the journal is keyed by it)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "key"}

    @classmethod
    def from_json(cls: type[_Self], key: str, data: dict[str, Any]) -> _Self:
        names = {f.name for f in dataclasses.fields(cls)} - {"key"}
        return cls(key=key, **{k: v for k, v in data.items() if k in names})


Incident = TypeVar("Incident", bound=ServiceIncident)


class ServiceIncidents(Generic[Incident]):
    """Every incident so far, which is open for each service, and how many each service had."""

    def __init__(self, kind: type[Incident]) -> None:
        self.kind = kind
        self.incidents: dict[str, Incident] = {}
        self.open: dict[str, str] = {}        # "app/service" -> key of its open incident
        self.generation: dict[str, int] = {}  # "app/service" -> incidents opened

    def assign(self, latest: dict[str, Alert]) -> None:
        """Add each alert not seen before to its service's open incident, opening one for a
        firing alert when none is open."""
        known = {a for inc in self.incidents.values() for a in inc.alerts}
        for alert in by_start(latest):
            app, service = alert.labels.get("app"), alert.labels.get("service")
            if not app or not service or alert.id in known:
                continue
            svc_key = f"{app}/{service}"
            key = self.open.get(svc_key)
            if key is None:
                if alert.status != "firing":
                    continue  # fired and resolved unseen, with nothing open to attach it to
                n = self.generation.get(svc_key, 0) + 1
                self.generation[svc_key] = n
                key = f"svc:{svc_key}" if n == 1 else f"svc:{svc_key}#{n}"
                self.open[svc_key] = key
                self.incidents[key] = self.kind(key=key, app=app, service=service)
            self.incidents[key].alerts.append(alert.id)
            known.add(alert.id)

    def claimed(self, svc_key: str, step: int) -> None:
        """The open incident of ``svc_key`` was claimed resolved at ``step``: it is over."""
        self.incidents[self.open.pop(svc_key)].claimed_step = step

    def to_json(self) -> dict[str, Any]:
        return {"incidents": {k: inc.to_json() for k, inc in self.incidents.items()},
                "open": self.open, "generation": self.generation}

    def load_json(self, state: dict[str, Any]) -> None:
        self.incidents = {k: self.kind.from_json(k, v) for k, v in (state.get("incidents") or {}).items()}
        self.open = dict(state.get("open") or {})
        self.generation = dict(state.get("generation") or {})


class PerServiceAgent(Generic[Incident]):
    """The shared skeleton: the incidents, and the journal they are kept in.

    A subclass names its :attr:`JOURNAL` file and adds its own state with
    :meth:`_state_to_json` and :meth:`_state_from_json`.
    """

    JOURNAL = "per-service-agent.json"

    def __init__(self, kind: type[Incident]) -> None:
        self.book: ServiceIncidents[Incident] = ServiceIncidents(kind)
        self._journal = Journal(self.JOURNAL)

    def setup(self, env: Environment) -> None:
        self._restore(Path(env.workspace))

    def _begin(self, obs: Observation) -> None:
        """Called first in every step: an agent used without ``setup`` still finds its journal."""
        if not self._journal.bound:
            self._restore(Path(obs.workspace))

    def _restore(self, workspace: Path) -> None:
        state = self._journal.load(workspace)
        if state is not None:
            self.book.load_json(state)
            self._state_from_json(state)

    def _save(self) -> None:
        self._journal.save({**self.book.to_json(), **self._state_to_json()})

    def _state_to_json(self) -> dict[str, Any]:
        return {}

    def _state_from_json(self, state: dict[str, Any]) -> None:
        return None
