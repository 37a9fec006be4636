"""Is a service failing? Telemetry and pods, judged against the service's own baseline."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

from pytest_sremarathon.agent.protocol import Alert, Observation, ServiceError

from ..alerts import alert_service
from .cluster import View
from .incident import ServiceKey
from .state import HeuristicState, LatencyBaseline
from .tuning import Tuning

#: A latency alert that states its objective ("… over its SLO 250 ms").
_SLO = re.compile(r"\bSLO (\d+(?:\.\d+)?)\s*ms")


@dataclass
class Health:
    """A service's recent telemetry (the last 2.5 minutes) and the verdict."""

    error_ratio: float = 0.0
    p99: float = 0.0
    """Median of the p99 latency samples, ms."""
    cpu: float = 0.0
    ready: float = 0.0
    """The fewest ready pods of the samples."""
    rps: float = 0.0
    rps_before: float = 0.0
    utilisation: float = 0.0
    """CPU per ready pod as a share of the pod's limit."""
    sick: bool = False
    why: str = ""
    """The symptoms, in words."""


def metric(obs: Observation, app: str, svc: str, name: str, minutes: float) -> list[float]:
    """The values of a metric over the last ``minutes``; nothing when telemetry fails."""
    try:
        series = obs.telemetry.metrics(app, svc, name, since=obs.time - timedelta(minutes=minutes))
    except ServiceError:
        return []
    return [v for _, v in series]


def per_pod_share(cpu: list[float], ready: list[float], limit: float) -> float:
    """CPU used per ready pod as a share of the pod's limit, averaged over the samples (what
    ``kubectl top pods`` against the deployment's limits shows)."""
    if not limit or not cpu or not ready:
        return 0.0
    # The two series may differ in length (a sample missing in one): pair what there is.
    shares = [c / (max(r, 1.0) * limit) for c, r in zip(cpu, ready, strict=False)]
    return sum(shares) / len(shares)


def utilisation(obs: Observation, view: View, app: str, svc: str) -> float:
    return per_pod_share(metric(obs, app, svc, "cpu_millicores", 2.5),
                         metric(obs, app, svc, "ready_pods", 2.5),
                         view.deployments[(app, svc)].cpu_limit)


def assess(obs: Observation, view: View, latest: dict[str, Alert], state: HeuristicState,
           tuning: Tuning) -> dict[ServiceKey, Health]:
    """Telemetry of every service worth a look: those alerting, those in open incidents,
    those whose pods are unhealthy, and (every half hour) everyone, to keep baselines."""
    keys: set[ServiceKey] = set()
    slos: dict[ServiceKey, float] = {}
    for a in latest.values():
        k = alert_service(a)
        if a.status == "firing" and k and k[0] in view.services and k[1] in view.services[k[0]]:
            keys.add(k)
            m = _SLO.search(a.annotations.get("description", ""))
            if m:
                slos[k] = float(m.group(1))
    keys |= state.live_services()
    for p in view.pods:
        if p.active and (not p.ready or p.waiting):
            keys.add((p.ns, p.service))
    for (app, svc), d in view.deployments.items():
        if d.available < d.replicas:
            keys.add((app, svc))
    refresh = obs.step % 6 == 1
    if refresh:
        keys |= set(view.deployments)
    out: dict[ServiceKey, Health] = {}
    for app, svc in sorted(keys):
        if (app, svc) not in view.deployments:
            continue
        out[(app, svc)] = service_health(obs, view, app, svc, refresh, state, tuning, slos.get((app, svc)))
    return out


def service_health(obs: Observation, view: View, app: str, svc: str, refresh: bool, state: HeuristicState,
                   tuning: Tuning, slo_ms: Optional[float] = None) -> Health:
    """One service's verdict; a healthy sample also moves its latency baseline (every half
    hour, or at once when it has none)."""
    h = Health()
    err = metric(obs, app, svc, "error_ratio", 2.5)
    p99 = metric(obs, app, svc, "latency_p99_ms", 2.5)
    cpu = metric(obs, app, svc, "cpu_millicores", 2.5)
    ready = metric(obs, app, svc, "ready_pods", 2.5)
    h.error_ratio = sum(err) / len(err) if err else 0.0
    h.p99 = sorted(p99)[len(p99) // 2] if p99 else 0.0
    h.cpu = sum(cpu) / len(cpu) if cpu else 0.0
    h.ready = min(ready) if ready else 0.0
    d = view.deployments[(app, svc)]
    h.utilisation = per_pod_share(cpu, ready, d.cpu_limit)
    base = state.baseline.get(f"{app}/{svc}")
    reasons = []
    if h.error_ratio >= tuning.error_ratio:
        reasons.append(f"errors {h.error_ratio:.0%}")
    if base and h.p99 > tuning.latency_factor * base.p99 and h.p99 > base.p99 + 8:
        reasons.append(f"p99 {h.p99:.0f}ms vs {base.p99:.0f}ms")
    elif slo_ms and h.p99 > slo_ms:
        reasons.append(f"p99 {h.p99:.0f}ms over its {slo_ms:.0f}ms SLO")
    if h.utilisation >= 0.95:
        reasons.append(f"cpu {h.utilisation:.0%} of limit")
    if not reasons:  # slower-burning trouble: restarts, memory at the limit
        restarts = metric(obs, app, svc, "restarts", 12)
        if restarts and restarts[-1] > restarts[0]:
            reasons.append(f"{restarts[-1] - restarts[0]:.0f} restart(s) in 12 min")
        memory = metric(obs, app, svc, "memory_bytes", 2.5)
        if memory and d.memory_limit and max(memory) >= 0.9 * d.memory_limit:
            reasons.append(f"memory at {max(memory) / d.memory_limit:.0%} of its limit")
    pods = view.pods_of(app, svc)
    bad = [p for p in pods if not p.ready or p.waiting]
    if bad:
        reasons.append(f"{len(bad)}/{len(pods)} pods unhealthy")
    if d.replicas == 0:
        reasons.append("scaled to zero")
    elif d.available == 0:
        reasons.append("no available replicas")
    elif d.available < d.replicas:
        reasons.append(f"{d.available}/{d.replicas} replicas available")
    h.sick = bool(reasons)
    h.why = ", ".join(reasons)
    if not h.sick and p99 and (refresh or base is None):
        if base is None:
            state.baseline[f"{app}/{svc}"] = LatencyBaseline(p99=max(h.p99, 1.0))
        else:  # slow-moving: a healthy sample moves the baseline a fifth of the way
            base.p99 = round(0.8 * base.p99 + 0.2 * max(h.p99, 1.0), 2)
            base.n += 1
    return h
