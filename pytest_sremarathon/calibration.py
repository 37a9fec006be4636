"""How a generated schedule compares with the calibration it was drawn from: fitted
inter-arrival shape, fitted active-window distribution, family mix and overlap."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .faults.base import Fault


def weibull_shape_mle(xs: Sequence[float], tol: float = 1e-9) -> float:
    """Maximum-likelihood Weibull shape k (Newton's method on the profile likelihood)."""
    xs = [x for x in xs if x > 0]
    if len(xs) < 2:
        raise ValueError("need at least two positive samples")
    logs = [math.log(x) for x in xs]
    mean_log = sum(logs) / len(logs)
    k = 1.2 / (statistics.pstdev(logs) or 1.0)  # moment-style start
    for _ in range(200):
        xk = [x ** k for x in xs]
        s0, s1 = sum(xk), sum(a * b for a, b in zip(xk, logs))
        s2 = sum(a * b * b for a, b in zip(xk, logs))
        f = s1 / s0 - 1 / k - mean_log
        df = (s2 * s0 - s1 * s1) / (s0 * s0) + 1 / (k * k)
        step = f / df
        k = max(k - step, k / 10)
        if abs(step) < tol:
            break
    return k


def lognormal_fit(xs: Sequence[float]) -> tuple[float, float]:
    """(μ, σ) of ln(x)."""
    logs = [math.log(x) for x in xs if x > 0]
    return statistics.fmean(logs), statistics.pstdev(logs)


def overlapping(faults: Sequence[Fault]) -> list[Fault]:
    """Faults whose active window intersects another fault's."""
    out = []
    for f in faults:
        if any(g is not f and g.start < f.end and f.start < g.end for g in faults):
            out.append(f)
    return out


def same_service_overlaps(faults: Sequence[Fault]) -> int:
    """Pairs of concurrent faults on the same app and service (change-induced)."""
    n = 0
    for i, f in enumerate(faults):
        for g in faults[i + 1:]:
            same = f.app == g.app and f.params.get("service") and f.params.get("service") == g.params.get("service")
            if same and g.start < f.end and f.start < g.end:
                n += 1
    return n


@dataclass
class ScheduleStats:
    faults: int
    by_family: dict[str, int]
    change_share: float
    code_share_of_changes: float
    overlap_share: float
    gap_weibull_shape: float | None
    duration_ln_minutes: tuple[float, float] | None
    benign_changes: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def lines(self) -> list[str]:
        fams = ", ".join(f"{k} {v}" for k, v in sorted(self.by_family.items()))
        out = [f"faults: {self.faults} ({fams}); benign changes: {self.benign_changes}",
               f"change-induced: {self.change_share:.0%} (code {self.code_share_of_changes:.0%} of changes)",
               f"overlapping another fault: {self.overlap_share:.0%}"]
        if self.gap_weibull_shape is not None:
            out.append(f"inter-arrival Weibull shape (MLE): {self.gap_weibull_shape:.2f}")
        if self.duration_ln_minutes is not None:
            mu, sigma = self.duration_ln_minutes
            out.append(f"active window ln-minutes: μ {mu:.2f}, σ {sigma:.2f} (median {math.exp(mu):.0f} min, after clipping)")
        return out


@dataclass
class AlertMix:
    """Alerts of a run by what they tell an on-call engineer."""

    total: int
    noise: int  # no fault behind it
    symptom: int  # a fault's, but on a component other than its root cause
    actionable: int  # on the root-cause component of a fault behind it

    @property
    def non_actionable_share(self) -> float:
        return (self.noise + self.symptom) / self.total if self.total else 0.0


def alert_mix(events: Sequence[Any]) -> AlertMix:
    """Classify every fired alert of a recorded run (``events`` of a bundle)."""
    components: dict[str, str] = {}
    labels: dict[str, dict[str, str]] = {}
    attributed: dict[str, list[str]] = {}
    for e in events:
        if e.type == "truth.fault":
            components[e.data["id"]] = e.data["component"]
        elif e.type == "alert" and e.data["alert"]["status"] == "firing":
            labels[e.data["alert"]["id"]] = e.data["alert"]["labels"]
        elif e.type == "truth.alert":
            attributed[e.data["alert"]] = e.data["faults"]
    noise = symptom = actionable = 0
    for alert_id, lab in labels.items():
        faults = attributed.get(alert_id, [])
        if not faults:
            noise += 1
            continue
        own = {f"service:{lab.get('namespace')}/{lab.get('service')}", f"node:{lab.get('node')}",
               f"zone:{lab.get('zone')}"}
        if any(components.get(f) in own for f in faults):
            actionable += 1
        else:
            symptom += 1
    return AlertMix(len(labels), noise, symptom, actionable)


def describe(faults: Sequence[Fault], benign: int = 0) -> ScheduleStats:
    by_family: dict[str, int] = {}
    for f in faults:
        by_family[f.family] = by_family.get(f.family, 0) + 1
    changes = [f for f in faults if f.family == "change"]
    starts = sorted(f.start for f in faults)
    gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:]) if b > a]
    durations = [(f.end - f.start).total_seconds() / 60 for f in faults]
    return ScheduleStats(
        faults=len(faults), by_family=by_family,
        change_share=len(changes) / len(faults) if faults else 0.0,
        code_share_of_changes=sum(f.kind.startswith("code-") for f in changes) / len(changes) if changes else 0.0,
        overlap_share=len(overlapping(faults)) / len(faults) if faults else 0.0,
        gap_weibull_shape=weibull_shape_mle(gaps) if len(gaps) >= 5 else None,
        duration_ln_minutes=lognormal_fit(durations) if len(durations) >= 5 else None,
        benign_changes=benign)
