"""The seeded fault schedule: when faults arrive, how long they stay, what they are.

Shapes come from CALIBRATION.md: Weibull inter-arrivals (bursty, shape ≈ 0.64), lognormal
active windows (ln-minutes μ ≈ 4.0, σ ≈ 1.2), a change-induced majority split between code and
configuration, the family mix of the scenario exactly (a quota per run, not a draw per fault). The count is fixed by the scenario and the arrival gaps are rescaled into the
injection window, so a run is as dense as asked while keeping the bursty shape. Benign changes
ship between the faulty ones so that "revert the latest change" is not a free answer.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional, Union

from . import yamlio
from .apps import AppSpec
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
    # A benign change that a faulty one ships as its trigger (manifest-hotfix-undone: the routine
    # deploy that undoes a live hotfix) is that fault's to ship, never the benign pool's.
    triggers = {app: {c.fault.trigger for c in cat if c.fault is not None and c.fault.trigger}
                for app, cat in scenario.catalogues.items()}
    benign = {app: [c for c in cat if not c.faulty and c.id not in triggers[app]]
              for app, cat in scenario.catalogues.items()}
    targets = Targets({f"worker-{z.split('-')[-1]}{i + 1}": z for z in spec.topology.zones
                       for i in range(spec.topology.nodes_per_zone)}, tuple(scenario.apps))
    busy_until: dict[tuple[str, str], datetime] = {}  # (app, change), ("node", name), ("zone", name)… -> end of its last use
    families, fam_weights = _weights(cfg.families)

    faults: list[Fault] = []
    owed: dict[str, int] = {}  # family -> draws it could not take (see below)
    # The run's family mix is the calibrated one (largest remainders of n × weight), in a seeded
    # order: a run of 60 faults drawn one by one would stray by ±6 points from it.
    draws = _quota(families, fam_weights, len(arrivals))
    rng.shuffle(draws)
    for at in arrivals:
        minutes = math.exp(rng.gauss(cfg.duration_ln_minutes_mu, cfg.duration_ln_minutes_sigma))
        seconds = min(max(minutes * 60, cfg.duration_min), cfg.duration_max)
        until = min(at + timedelta(seconds=_snap(seconds, spec.tick)), end)
        family = draws.pop()
        picked = None
        # A family drawn when none of its targets was free is owed: it takes the place of a later
        # draw of a family that stood in for it, as soon as it can. Node and zone faults keep to
        # one zone at a time and are often blocked; without this their share falls well below
        # the calibrated one and the stand-in (the first family in order) takes it.
        if owed and family == families[0]:
            for debtor in sorted(owed):
                picked = _pick(debtor, rng, cfg.code_share_of_changes, faulty, targets, registry, busy_until, at)
                if picked is not None:
                    owed[debtor] -= 1
                    if not owed[debtor]:
                        del owed[debtor]
                    break
        if picked is None:
            picked = _pick(family, rng, cfg.code_share_of_changes, faulty, targets, registry, busy_until, at)
        if picked is None:  # nothing of that family is free: fall back to any family that is
            for other in families:
                picked = _pick(other, rng, cfg.code_share_of_changes, faulty, targets, registry, busy_until, at)
                if picked is not None:
                    if other == families[0] and family != other:
                        owed[family] = owed.get(family, 0) + 1
                    break
        if picked is None:
            continue
        kind, app, params, busy_key = picked
        for key in (busy_key if isinstance(busy_key, list) else [busy_key]):
            busy_until[key] = max(busy_until.get(key, until), until)  # shared keys stay busy until the last use ends
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


def _quota(keys: list[str], weights: list[float], n: int) -> list[str]:
    """``n`` draws of ``keys`` in proportion to ``weights`` (largest remainders), in key order."""
    total = sum(weights) or 1.0
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    by_remainder = sorted(range(len(keys)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in by_remainder[: n - sum(counts)]:
        counts[i] += 1
    return [k for k, c in zip(keys, counts) for _ in range(c)]


def _snap(seconds: float, tick: float) -> float:
    return max(tick, round(seconds / tick) * tick)


BusyKey = tuple[str, str]
Picked = tuple[str, str, dict[str, Any], Union[BusyKey, list[BusyKey]]]


def _pick(family: str, rng: random.Random, code_share: float, faulty: dict[str, list[CuratedChange]],
          targets: Targets, registry: dict[str, FaultKind], busy_until: dict[tuple[str, str], datetime],
          at: datetime) -> Optional[Picked]:
    def free(key: tuple[str, str]) -> bool:
        return busy_until.get(key, at) <= at

    def held(app: str, c: CuratedChange) -> list[BusyKey]:
        """What else a change kind holds while active (``busy_keys(app)``: the autoscaling kinds'
        campaign holds the app's ingress, as a traffic surge does)."""
        keys = getattr(registry[c.fault.kind], "busy_keys", None) if c.fault is not None else None
        return list(keys(app)) if keys is not None else []

    if family == "change":
        want_code = rng.random() < code_share
        candidates = [(app, c) for app in sorted(faulty) for c in faulty[app]
                      if c.fault is not None and c.fault.kind in registry and free((app, c.id))
                      and all(free(k) for k in held(app, c))]
        preferred = [(a, c) for a, c in candidates if c.fault and c.fault.kind.startswith(CODE_KINDS_PREFIX) == want_code]
        pool = preferred or candidates
        if not pool:
            return None
        app, change = rng.choice(pool)
        assert change.fault is not None
        extra = held(app, change)
        return change.fault.kind, app, {"change": change.id}, [(app, change.id), *extra] if extra else (app, change.id)
    kinds = sorted(k for k, v in registry.items() if v.family == family)
    rng.shuffle(kinds)
    for kind in kinds:  # the first kind (in a seeded order) that has a free target
        chooser = _CHOOSERS.get(kind) or getattr(registry[kind], "choose", None)
        if chooser is None:  # a plugin's kind that picks its own target when injected
            choice: Optional[tuple[str, dict[str, Any], list[BusyKey]]] = \
                ("cluster", {}, [("kind", kind)]) if free(("kind", kind)) else None
        else:
            choice = chooser(rng, targets, free)
        if choice is not None:
            app, params, keys = choice
            return kind, app, params, keys
    return None


# -- targets of the kinds injected straight into the cluster ------------------------------------

@dataclass(frozen=True)
class Targets:
    """What non-change kinds can hit: the nodes (by zone) and the applications.

    A plugin's kind may define ``choose(rng, targets, free) -> (app, params, busy keys) | None``
    to pick its own target; ``free(key)`` tells whether a busy key (``("node", name)``,
    ``("zone", name)``, …) is unused at the fault's arrival. Without it, the kind is scheduled
    with ``app="cluster"`` and empty params."""

    node_zone: dict[str, str]
    apps: tuple[AppSpec, ...]

    @property
    def zones(self) -> list[str]:
        return list(dict.fromkeys(self.node_zone.values()))

    def nodes_in(self, zone: str) -> list[str]:
        return [n for n, z in self.node_zone.items() if z == zone]

    def zone_keys(self, zone: str) -> list[BusyKey]:
        """A zone-wide fault occupies the zone and every node in it."""
        return [("zone", zone)] + [("node", n) for n in self.nodes_in(zone)]

    def others_healthy(self, zone: str, free: Free) -> bool:
        """Node and zone faults stay inside one zone at a time, so the repair (moving work
        out of the troubled machines) always has a healthy zone to move it to."""
        return all(free(("impaired", z)) for z in self.zones if z != zone)


Free = Callable[[BusyKey], bool]
Choice = Optional[tuple[str, dict[str, Any], list[BusyKey]]]


def _node_kind(extra: Callable[[random.Random], dict[str, Any]]) -> Callable[[random.Random, Targets, Free], Choice]:
    def choose(rng: random.Random, targets: Targets, free: Free) -> Choice:
        nodes = [n for n, z in targets.node_zone.items()
                 if free(("node", n)) and free(("zone", z)) and targets.others_healthy(z, free)]
        if not nodes:
            return None
        node = rng.choice(nodes)
        return "cluster", {"node": node, **extra(rng)}, [("node", node), ("impaired", targets.node_zone[node])]
    return choose


def _zone_kind(extra: Callable[[random.Random], dict[str, Any]]) -> Callable[[random.Random, Targets, Free], Choice]:
    def choose(rng: random.Random, targets: Targets, free: Free) -> Choice:
        zones = [z for z in targets.zones
                 if all(free(k) for k in targets.zone_keys(z)) and targets.others_healthy(z, free)]
        if not zones:
            return None
        zone = rng.choice(zones)
        return "cluster", {"zone": zone, **extra(rng)}, targets.zone_keys(zone) + [("impaired", zone)]
    return choose


def _zone_partition(rng: random.Random, targets: Targets, free: Free) -> Choice:
    zones = [z for z in targets.zones if all(free(k) for k in targets.zone_keys(z)) and free(("impaired", z))]
    if len(zones) < 2 or len(zones) < len(targets.zones):
        return None
    zone = rng.choice(zones)
    peer = rng.choice([z for z in zones if z != zone])
    return "cluster", {"zone": zone, "peer": peer}, \
        targets.zone_keys(zone) + targets.zone_keys(peer) + [("impaired", zone), ("impaired", peer)]


def _datastores(targets: Targets, needs_auth: bool) -> list[tuple[str, str]]:
    return [(app.namespace, svc) for app in targets.apps for svc, spec in app.services.items()
            if spec.datastore is not None and (not needs_auth or svc in _password_datastores(app.root))]


@functools.lru_cache(maxsize=32)
def _password_datastores(root: Path) -> frozenset[str]:
    """Workloads (Deployments, StatefulSets) of the app's manifests that take a ``*PASSWORD`` from a Secret."""
    out = set()
    for path in sorted((root / "manifests").glob("*.yaml")):
        for doc in yamlio.load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in ("Deployment", "StatefulSet"):
                continue
            for c in (((doc.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []:
                if any(str(e.get("name", "")).endswith("PASSWORD") and "secretKeyRef" in (e.get("valueFrom") or {})
                       for e in c.get("env") or []):
                    out.add(doc["metadata"]["name"])
    return frozenset(out)


def _datastore_kind(needs_auth: bool, extra: Callable[[random.Random], dict[str, Any]],
                    param: str) -> Callable[[random.Random, Targets, Free], Choice]:
    def choose(rng: random.Random, targets: Targets, free: Free) -> Choice:
        pool = [(ns, ds) for ns, ds in _datastores(targets, needs_auth) if free(("datastore", f"{ns}/{ds}"))]
        if not pool:
            return None
        ns, ds = rng.choice(pool)
        return ns, {param: ds, **extra(rng)}, [("datastore", f"{ns}/{ds}")]
    return choose


def _external_outage(rng: random.Random, targets: Targets, free: Free) -> Choice:
    pool = [(app.namespace, name) for app in targets.apps for name, ext in sorted(app.externals.items())
            if ext.fallback is not None and free(("external", name))]
    if not pool:
        return None
    ns, name = rng.choice(pool)
    return ns, {"external": name}, [("external", name)]


def _dns_degraded(rng: random.Random, targets: Targets, free: Free) -> Choice:
    """Cluster-wide: one at a time."""
    if not free(("dns", "cluster")):
        return None
    return "cluster", {"share": rng.choice([0.02, 0.03, 0.05])}, [("dns", "cluster")]


def _traffic_surge(rng: random.Random, targets: Targets, free: Free) -> Choice:
    pool = [app.namespace for app in targets.apps if free(("surge", app.namespace))]
    if not pool:
        return None
    ns = rng.choice(pool)
    return ns, {"utilisation": rng.choice([1.3, 1.6, 2.0])}, [("surge", ns)]


_CHOOSERS: dict[str, Callable[[random.Random, Targets, Free], Choice]] = {
    "node-failure": _node_kind(lambda rng: {}),
    "cpu-noisy-neighbour": _node_kind(lambda rng: {"steal": rng.choice([0.9, 0.95])}),
    "disk-pressure": _node_kind(lambda rng: {}),
    "zone-outage": _zone_kind(lambda rng: {}),
    "network-latency": _zone_kind(lambda rng: {"latency_ms": rng.choice([120, 250, 400])}),
    "dependency-dns-zone": _zone_kind(lambda rng: {}),
    "zone-partition": _zone_partition,
    "dependency-slow-datastore": _datastore_kind(False, lambda rng: {"latency_ms": rng.choice([150, 250, 450])},
                                                 "service"),
    "dependency-credential-expired": _datastore_kind(True, lambda rng: {}, "datastore"),
    "dependency-external-outage": _external_outage,
    "traffic-surge": _traffic_surge,
    "dependency-dns-degraded": _dns_degraded,
}
