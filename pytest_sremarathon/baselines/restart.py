"""RestartAgent: one incident per alerting service; ``rollout restart`` of its deployment."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional, TypeVar

from pytest_sremarathon.agent.protocol import Claim, Finding, Observation, Report

from .alerts import latest_alerts
from .kube_client import KubeClient, KubeError
from .per_service import PerServiceAgent, ServiceIncident
from .times import iso_or_none, time_or_none, whole_seconds

_Self = TypeVar("_Self", bound="RestartIncident")


@dataclass
class RestartIncident(ServiceIncident):
    restarts: int = 0
    restarted_at: Optional[datetime] = None
    """When the last restart was done (whole seconds, as the journal keeps it)."""

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "restarted_at": iso_or_none(self.restarted_at)}

    @classmethod
    def from_json(cls: type[_Self], key: str, data: dict[str, Any]) -> _Self:
        inc = super().from_json(key, {**data, "restarted_at": None})
        inc.restarted_at = time_or_none(data.get("restarted_at"))
        return inc


class RestartAgent(PerServiceAgent[RestartIncident]):
    """One incident per alerting service (grouped as :class:`RollbackAgent` groups them); the
    repair is ``kubectl rollout restart deployment/<service>`` in the alert's namespace.

    It localizes each incident to ``service:<app>/<service>`` and names no cause. A restart is
    done once per incident, and once more if the incident is still firing
    :attr:`RETRY_AFTER` later; the incident is claimed resolved once every alert in it is
    resolved. Restarting fixes what a fresh process fixes (a stale credential, a wedged
    datastore) and nothing that is in the code, the configuration or the machines.
    """

    JOURNAL = "restart-agent.json"
    RETRY_AFTER = timedelta(minutes=30)

    def __init__(self) -> None:
        super().__init__(RestartIncident)
        self._kube: Optional[KubeClient] = None

    def step(self, obs: Observation) -> Report:
        self._begin(obs)
        latest = latest_alerts(obs)
        self.book.assign(latest)
        notes: list[str] = []
        findings: list[Finding] = []
        claims: list[Claim] = []
        for svc_key, key in list(self.book.open.items()):
            inc = self.book.incidents[key]
            alerts = [latest[a] for a in inc.alerts if a in latest]
            firing = [a for a in alerts if a.status == "firing"]
            last = inc.restarted_at
            if firing and (last is None or obs.time - last >= self.RETRY_AFTER) and inc.restarts < 2:
                inc.restarts += 1
                inc.restarted_at = whole_seconds(obs.time)
                ns = firing[0].labels.get("namespace") or inc.app
                try:
                    self._kube_for(obs).restart(ns, inc.service, obs.time)
                    notes.append(f"{key}: restarted deployment {ns}/{inc.service}")
                except KubeError as exc:
                    notes.append(f"{key}: restart of {ns}/{inc.service} failed: {exc}")
            findings.append(Finding(incident=key, alerts=list(inc.alerts), component=inc.component, confidence=0.4))
            if alerts and not firing:
                claims.append(Claim(incident=key))
                self.book.claimed(svc_key, obs.step)
                notes.append(f"{key}: all {len(alerts)} alerts resolved, claiming resolved")
        self._save()
        return Report(findings=findings, claims=claims, notes="\n".join(notes)[:20000])

    def _kube_for(self, obs: Observation) -> KubeClient:
        if self._kube is None:
            self._kube = KubeClient(Path(obs.kubeconfig))
        return self._kube
