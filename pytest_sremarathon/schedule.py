"""The seeded fault schedule: when faults arrive, how long they stay, what they are.

Shapes come from CALIBRATION.md: Weibull inter-arrivals (bursty, shape ≈ 0.64), lognormal
active windows (ln-minutes μ ≈ 4.0, σ ≈ 1.2), a change-induced majority split between code and
configuration. The count is fixed by the scenario and the arrival gaps are rescaled into the
injection window, so a run is as dense as asked while keeping the bursty shape. Benign changes
ship between the faulty ones so that "revert the latest change" is not a free answer.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Optional

from .clock import iso
from .faults.base import Fault, FaultKind
from .faults.catalogue import CuratedChange
from .scenario import Scenario

CODE_KINDS_PREFIX = "code-"


@dataclass
class PlannedChange:
    at: datetime
    app: str
    change: str  # curated change id


@dataclass
class Schedule:
    seed: int
    faults: list[Fault]
    benign: list[PlannedChange]

    def to_json(self) -> dict[str, Any]:
        """The ground truth as committed before the run (what is known before injection)."""
        return {
            "seed": self.seed,
            "faults": [{"id": f.id, "kind": f.kind, "family": f.family, "app": f.app, "start": iso(f.start),
                        "end": iso(f.end), "params": f.params} for f in self.faults],
            "benign_changes": [{"at": iso(c.at), "app": c.app, "change": c.change} for c in self.benign],
        }


def _weights(pairs: dict[str, float]) -> tuple[list[str], list[float]]:
    keys = sorted(k for k, w in pairs.items() if w > 0)
    return keys, [pairs[k] for k in keys]


def generate(scenario: Scenario, registry: dict[str, FaultKind], seed: int, start: datetime) -> Schedule:
    spec, cfg = scenario.spec, scenario.spec.schedule
    rng = random.Random(f"schedule:{seed}")
    end = start + timedelta(seconds=spec.duration)
    window_start = start + timedelta(seconds=cfg.warmup)
    window_end = end - timedelta(seconds=cfg.quiet_tail)
    if window_end <= window_start:
        window_end = window_start + timedelta(seconds=spec.tick)

    # Arrival times: Weibull gaps, rescaled so `faults` arrivals fill the injection window.
    n = cfg.faults
    gaps = [rng.weibullvariate(1.0, cfg.interarrival_weibull_shape) for _ in range(n)]
    span = (window_end - window_start).total_seconds()
    total = sum(gaps) or 1.0
    arrivals, acc = [], 0.0
    for g in gaps:
        acc += g
        offset = (acc - gaps[0] * 0.5) / total * span  # first fault after a partial gap
        arrivals.append(window_start + timedelta(seconds=_snap(offset, spec.tick)))

    faulty = {app: [c for c in cat if c.faulty] for app, cat in scenario.catalogues.items()}
    benign = {app: [c for c in cat if not c.faulty] for app, cat in scenario.catalogues.items()}
    nodes = [f"worker-{z.split('-')[-1]}{i + 1}" for z in spec.topology.zones for i in range(spec.topology.nodes_per_zone)]
    busy_until: dict[tuple[str, str], datetime] = {}  # (app, change) or ("node", name) -> end of its last use
    families, fam_weights = _weights(cfg.families)

    faults: list[Fault] = []
    for at in arrivals:
        minutes = math.exp(rng.gauss(cfg.duration_ln_minutes_mu, cfg.duration_ln_minutes_sigma))
        seconds = min(max(minutes * 60, cfg.duration_min), cfg.duration_max)
        until = min(at + timedelta(seconds=_snap(seconds, spec.tick)), end)
        family = rng.choices(families, fam_weights)[0]
        picked = _pick(family, rng, cfg.code_share_of_changes, faulty, nodes, registry, busy_until, at)
        if picked is None:  # nothing of that family is free: fall back to any family that is
            for other in families:
                picked = _pick(other, rng, cfg.code_share_of_changes, faulty, nodes, registry, busy_until, at)
                if picked is not None:
                    break
        if picked is None:
            continue
        kind, app, params, busy_key = picked
        busy_until[busy_key] = until
        faults.append(Fault(id=f"F{len(faults) + 1:02d}", kind=kind, family=registry[kind].family, app=app,
                            start=at, end=until, params=params))

    n_benign = int(round(cfg.benign_per_faulty * sum(1 for f in faults if f.family == "change")))
    pool = [(app, c.id) for app in sorted(benign) for c in benign[app]]
    rng.shuffle(pool)
    planned = []
    for app, change_id in pool[:n_benign]:
        offset = rng.uniform(cfg.warmup / 2, spec.duration - cfg.quiet_tail / 2)
        planned.append(PlannedChange(start + timedelta(seconds=_snap(offset, spec.tick)), app, change_id))
    planned.sort(key=lambda c: (c.at, c.app, c.change))
    return Schedule(seed, faults, planned)


def _snap(seconds: float, tick: float) -> float:
    return max(tick, round(seconds / tick) * tick)


def _pick(family: str, rng: random.Random, code_share: float, faulty: dict[str, list[CuratedChange]],
          nodes: list[str], registry: dict[str, FaultKind], busy_until: dict[tuple[str, str], datetime],
          at: datetime) -> Optional[tuple[str, str, dict[str, Any], tuple[str, str]]]:
    def free(key: tuple[str, str]) -> bool:
        return busy_until.get(key, at) <= at

    if family == "change":
        want_code = rng.random() < code_share
        candidates = [(app, c) for app in sorted(faulty) for c in faulty[app]
                      if c.fault is not None and c.fault.kind in registry and free((app, c.id))]
        preferred = [(a, c) for a, c in candidates if c.fault and c.fault.kind.startswith(CODE_KINDS_PREFIX) == want_code]
        pool = preferred or candidates
        if not pool:
            return None
        app, change = rng.choice(pool)
        assert change.fault is not None
        return change.fault.kind, app, {"change": change.id}, (app, change.id)
    kinds = sorted(k for k, v in registry.items() if v.family == family)
    if not kinds:
        return None
    kind = rng.choice(kinds)
    if kind == "node-failure":
        up = [n for n in nodes if free(("node", n))]
        if not up:
            return None
        node = rng.choice(up)
        return kind, "cluster", {"node": node}, ("node", node)
    return None
