"""After the repairs: which incidents to claim or close, and the step's report."""

from __future__ import annotations

from datetime import timedelta

from pytest_sremarathon.agent.protocol import Alert, Claim, Finding, Report

from ..times import utc, whole_seconds
from .context import StepContext
from .health import Health
from .incident import ServiceKey

#: Steps a repaired incident whose alerts keep firing is reported as ready before it is closed.
_CLOSE_READY_AFTER = 6


def follow_up(ctx: StepContext, health: dict[ServiceKey, Health], present: dict[str, str]) -> None:
    """Incidents whose failure is gone: claim the ones we repaired once they stay healthy,
    close the others."""
    state, tuning = ctx.state, ctx.tuning
    for comp, key in sorted(state.open.items()):
        inc = state.incidents[key]
        if key in present:
            inc.healthy = 0
            inc.ready_to_claim = False
            continue
        inc.absent += 1
        acted = bool(inc.actions)
        # (A machine incident that is no longer diagnosed has its machines back: pods
        # landing on them again are fine.)
        still = [s for s in inc.services if health.get(s, Health()).sick]
        inc.healthy = inc.healthy + 1 if not still else 0
        if acted and inc.healthy >= tuning.healthy_steps_to_claim:
            inc.ready_to_claim = True
        if inc.ready_to_claim or (not acted and inc.absent >= tuning.absent_steps_to_close):
            if not acted:
                inc.close(whole_seconds(ctx.obs.time))
                del state.open[comp]


def report(ctx: StepContext, latest: dict[str, Alert]) -> Report:
    """A finding per incident not yet claimed or closed (its alerts that fire or fired in the
    last three hours), a claim for each repaired one whose alerts are all resolved, and a
    finding per open watch group."""
    state, obs = ctx.state, ctx.obs
    findings: list[Finding] = []
    claims: list[Claim] = []
    for key, inc in sorted(state.incidents.items()):
        if inc.closed and not inc.ready_to_claim:
            continue
        if inc.claimed:
            continue
        comp = inc.component
        recent = obs.time - timedelta(hours=3)
        alerts = [a for a in inc.alerts if a in latest
                  and (latest[a].status == "firing" or utc(latest[a].starts_at) >= recent)]
        cause = f"change:{inc.cause}" if inc.cause else None
        confidence = 0.9 if inc.actions else 0.6
        findings.append(Finding(incident=key, alerts=alerts, component=comp, cause=cause, confidence=confidence))
        if inc.ready_to_claim:
            firing = [a for a in alerts if latest[a].status == "firing"]
            if alerts and not firing:
                claims.append(Claim(incident=key))
                inc.claimed = True
                ctx.notes.append(f"{key}: repaired and healthy for {inc.healthy} steps; claiming resolved")
            if not firing or inc.healthy >= _CLOSE_READY_AFTER:
                inc.close(whole_seconds(obs.time))
                state.open.pop(comp, None)
    for svc_key, w in sorted(state.watch.items()):
        if w.open and w.alerts:
            findings.append(Finding(incident=w.key, alerts=list(w.alerts), component=f"service:{svc_key}",
                                    confidence=0.3))
    return Report(findings=findings, claims=claims, notes="\n".join(ctx.notes)[:20000])
