"""Reference agents: ``--agent=pytest_sremarathon.baselines:NoopAgent`` (or ``:RollbackAgent``).

They use nothing but the public contract (:mod:`pytest_sremarathon.agent.protocol`), exactly
like a third-party agent, and give the scoreboard its floor (``NoopAgent``) and a simple
"blame the last deploy" SRE reflex (``RollbackAgent``).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from pytest_sremarathon.agent.protocol import (
    Alert,
    Change,
    Claim,
    Environment,
    Finding,
    Observation,
    PipelineError,
    Report,
)

__all__ = ["NoopAgent", "RollbackAgent"]


class NoopAgent:
    """Does nothing and says nothing: the score every other agent must beat."""

    def setup(self, env: Environment) -> None:
        return None

    def step(self, obs: Observation) -> Report:
        return Report()


def _utc(t: datetime) -> datetime:
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


class RollbackAgent:
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
        self.incidents: dict[str, dict[str, Any]] = {}  # key -> {app, service, alerts, change, ...}
        self.open: dict[str, str] = {}                   # "app/service" -> open incident key
        self.generation: dict[str, int] = {}             # "app/service" -> incidents opened
        self.reverted: list[str] = []                    # change ids we reverted
        self.our_changes: list[str] = []                 # change ids our reverts created
        self._journal: Optional[Path] = None

    # -- contract --

    def setup(self, env: Environment) -> None:
        self._load(Path(env.workspace))

    def step(self, obs: Observation) -> Report:
        if self._journal is None:
            self._load(Path(obs.workspace))
        latest: dict[str, Alert] = {}
        for alert in [*obs.alerts, *obs.new_alerts]:
            latest[alert.id] = alert
        self._assign(latest)

        notes: list[str] = []
        changes_cache: dict[str, list[Change]] = {}
        findings: list[Finding] = []
        claims: list[Claim] = []
        for svc_key, key in list(self.open.items()):
            inc = self.incidents[key]
            alerts = [latest[a] for a in inc["alerts"] if a in latest]
            if inc["change"] is None:
                inc["change"], inc["same_service"] = self._blame(obs, inc, alerts, changes_cache, notes)
            if inc["change"] is not None and not inc["revert_attempted"]:
                inc["revert_attempted"] = True
                try:
                    revert = obs.pipeline.revert(inc["app"], inc["change"])
                except PipelineError as exc:
                    inc["revert_error"] = str(exc)
                    notes.append(f"{key}: revert of {inc['change']} refused: {exc}")
                else:
                    self.reverted.append(inc["change"])
                    self.our_changes.append(revert.id)
                    inc["revert"] = revert.id
                    notes.append(f"{key}: reverted {inc['change']} as {revert.id}")
            findings.append(Finding(
                incident=key, alerts=list(inc["alerts"]),
                component=f"service:{inc['app']}/{inc['service']}",
                cause=f"change:{inc['change']}" if inc["change"] else None,
                confidence=0.8 if inc["change"] and inc["same_service"] else 0.5 if inc["change"] else 0.3))
            if alerts and all(a.status == "resolved" for a in alerts):
                claims.append(Claim(incident=key))
                inc["claimed_step"] = obs.step
                del self.open[svc_key]
                notes.append(f"{key}: all {len(alerts)} alerts resolved, claiming resolved")
        self._save()
        return Report(findings=findings, claims=claims, notes="\n".join(notes)[:20000])

    # -- internals --

    def _assign(self, latest: dict[str, Alert]) -> None:
        known = {a for inc in self.incidents.values() for a in inc["alerts"]}
        for alert in sorted(latest.values(), key=lambda a: (_utc(a.starts_at), a.id)):
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
                self.incidents[key] = {"app": app, "service": service, "alerts": [], "change": None,
                                       "same_service": False, "revert_attempted": False}
            self.incidents[key]["alerts"].append(alert.id)
            known.add(alert.id)

    def _blame(self, obs: Observation, inc: dict[str, Any], alerts: list[Alert],
               cache: dict[str, list[Change]], notes: list[str]) -> tuple[Optional[str], bool]:
        if not alerts:
            return None, False
        app = inc["app"]
        if app not in cache:
            try:
                cache[app] = obs.pipeline.changes(app)
            except PipelineError as exc:
                notes.append(f"changes({app}) failed: {exc}")
                cache[app] = []
        until = max(_utc(a.starts_at) for a in alerts)
        candidates = [c for c in cache[app] if _utc(c.time) <= until
                      and c.id not in self.reverted and c.id not in self.our_changes]
        same = [c for c in candidates if c.service == inc["service"]]
        pool = same or candidates
        if not pool:
            return None, False
        best = max(pool, key=lambda c: _utc(c.time))
        return best.id, bool(same)

    def _load(self, workspace: Path) -> None:
        self._journal = workspace / self.JOURNAL
        try:
            state = json.loads(self._journal.read_text())
        except (OSError, ValueError):
            return
        if isinstance(state, dict) and state.get("version") == 1:
            self.incidents = state.get("incidents", {})
            self.open = state.get("open", {})
            self.generation = state.get("generation", {})
            self.reverted = state.get("reverted", [])
            self.our_changes = state.get("our_changes", [])

    def _save(self) -> None:
        if self._journal is None:
            return
        state = {"version": 1, "incidents": self.incidents, "open": self.open,
                 "generation": self.generation, "reverted": self.reverted, "our_changes": self.our_changes}
        tmp = self._journal.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
            os.replace(tmp, self._journal)
        except OSError:
            pass  # the journal is a convenience; the in-memory state carries on
