"""RollbackAgent: one incident per alerting service; revert that service's latest change."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pytest_sremarathon.agent.protocol import Alert, Change, Claim, Finding, Observation, PipelineError, Report

from .alerts import latest_alerts
from .per_service import PerServiceAgent, ServiceIncident
from .times import utc


@dataclass
class RollbackIncident(ServiceIncident):
    change: Optional[str] = None
    """The change blamed (and reverted); ``None`` until there is one to blame."""
    same_service: bool = False
    """Whether the blamed change touched the incident's own service (else: the app's latest)."""
    revert_attempted: bool = False
    revert: Optional[str] = None
    """The change the revert created."""
    revert_error: Optional[str] = None
    """Why the pipeline refused the revert (a policy denial, say); it is not retried."""


class RollbackAgent(PerServiceAgent[RollbackIncident]):
    """One incident per alerting service; blame and revert that service's latest change.

    Every step it:

    1. groups firing alerts by ``(labels["app"], labels["service"])`` into one open incident
       per service (key ``svc:<app>/<service>``; once claimed, the next one for that service
       is ``svc:<app>/<service>#2`` …);
    2. localizes it to ``service:<app>/<service>`` and blames ``change:<id>``, the most recent
       pipeline change of that app at or before the incident's latest alert start — one for
       the same service if any, else the app's latest — skipping changes it already reverted
       and its own reverts;
    3. reverts that change once per incident (``pipeline.revert`` also deploys); a refusal
       (e.g. a policy denial) is noted, not retried;
    4. claims the incident resolved once every alert in it is resolved.

    State lives on the instance (the agent's process persists between steps) and in
    ``rollback-agent.json`` in the workspace, so a restarted process carries on where the last
    one stopped.
    """

    JOURNAL = "rollback-agent.json"

    def __init__(self) -> None:
        super().__init__(RollbackIncident)
        self.reverted: list[str] = []     # change ids we reverted
        self.our_changes: list[str] = []  # change ids our reverts created

    def step(self, obs: Observation) -> Report:
        self._begin(obs)
        latest = latest_alerts(obs)
        self.book.assign(latest)

        notes: list[str] = []
        changes_cache: dict[str, list[Change]] = {}
        findings: list[Finding] = []
        claims: list[Claim] = []
        for svc_key, key in list(self.book.open.items()):
            inc = self.book.incidents[key]
            alerts = [latest[a] for a in inc.alerts if a in latest]
            if inc.change is None:
                inc.change, inc.same_service = self._blame(obs, inc, alerts, changes_cache, notes)
            if inc.change is not None and not inc.revert_attempted:
                inc.revert_attempted = True
                try:
                    revert = obs.pipeline.revert(inc.app, inc.change)
                except PipelineError as exc:
                    inc.revert_error = str(exc)
                    notes.append(f"{key}: revert of {inc.change} refused: {exc}")
                else:
                    self.reverted.append(inc.change)
                    self.our_changes.append(revert.id)
                    inc.revert = revert.id
                    notes.append(f"{key}: reverted {inc.change} as {revert.id}")
            findings.append(Finding(
                incident=key, alerts=list(inc.alerts), component=inc.component,
                cause=f"change:{inc.change}" if inc.change else None,
                confidence=0.8 if inc.change and inc.same_service else 0.5 if inc.change else 0.3))
            if alerts and all(a.status == "resolved" for a in alerts):
                claims.append(Claim(incident=key))
                self.book.claimed(svc_key, obs.step)
                notes.append(f"{key}: all {len(alerts)} alerts resolved, claiming resolved")
        self._save()
        return Report(findings=findings, claims=claims, notes="\n".join(notes)[:20000])

    def _blame(self, obs: Observation, inc: RollbackIncident, alerts: list[Alert],
               cache: dict[str, list[Change]], notes: list[str]) -> tuple[Optional[str], bool]:
        """The change to revert: the latest of the app at or before the incident's latest alert
        start, the service's own if there is one, never one already reverted or our own."""
        if not alerts:
            return None, False
        app = inc.app
        if app not in cache:
            try:
                cache[app] = obs.pipeline.changes(app)
            except PipelineError as exc:
                notes.append(f"changes({app}) failed: {exc}")
                cache[app] = []
        until = max(utc(a.starts_at) for a in alerts)
        candidates = [c for c in cache[app] if utc(c.time) <= until
                      and c.id not in self.reverted and c.id not in self.our_changes]
        same = [c for c in candidates if c.service == inc.service]
        pool = same or candidates
        if not pool:
            return None, False
        best = max(pool, key=lambda c: utc(c.time))
        return best.id, bool(same)

    def _state_to_json(self) -> dict[str, Any]:
        return {"reverted": self.reverted, "our_changes": self.our_changes}

    def _state_from_json(self, state: dict[str, Any]) -> None:
        self.reverted = list(state.get("reverted") or [])
        self.our_changes = list(state.get("our_changes") or [])
