"""Build realistic run records with the real BundleWriter, and read their scores (shared by the
bundle and scoring tests)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

from pytest_sremarathon.agent.protocol import Alert, Claim, Finding, Report
from pytest_sremarathon.bundle import BundleWriter, commitment
from pytest_sremarathon.clock import EPOCH, iso
from pytest_sremarathon.events import (
    Action,
    AgentStep,
    AlertTransition,
    ClusterEvent,
    RunEnd,
    RunStart,
    SLISample,
    TruthAlert,
    TruthEffect,
    TruthFault,
    TruthFaultEnd,
    TruthMitigation,
)
from pytest_sremarathon.scoring import SCORING_VERSION, MarathonScore

APPS = ("shop", "bank", "blog")
_OPEN: list[BundleWriter] = []


def close_all() -> None:
    """Close every writer the tests opened (an unsealed run keeps its events file open)."""
    while _OPEN:
        _OPEN.pop().close()
SERVICES = ("frontend", "cart", "checkout", "catalog", "payments")


def at(minutes: float) -> datetime:
    return EPOCH + timedelta(minutes=minutes)


def fault(fid: str, *, app: str = "shop", service: str = "cart", kind: str = "code-bug",
          change: Optional[str] = None, component: Optional[str] = None,
          start: float = 10, end: float = 70) -> dict[str, Any]:
    """A schedule entry (times in minutes from the run start)."""
    return {"id": fid, "kind": kind, "app": app, "change": change,
            "component": component or f"service:{app}/{service}",
            "start": iso(at(start)), "planned_end": iso(at(end)),
            "description": f"{kind} in {app}/{service}"}


def only(score: MarathonScore, fid: str):
    """The scored result of fault ``fid``."""
    return next(r for r in score.faults if r.id == fid)


def finding(incident: str, alerts: Iterable[str], component: Optional[str] = None,
            cause: Optional[str] = None) -> Finding:
    return Finding(incident=incident, alerts=list(alerts), component=component, cause=cause)


class Recorder:
    """Writes one run on a virtual clock: ``rec.now = at(12); rec.alert(...); rec.step(...)``."""

    def __init__(self, run_dir: Path, faults: list[dict[str, Any]], *, salt: str = "pepper-1234",
                 seed: int = 42, key: Any = None, minutes: float = 240, retain: Any = "default",
                 agent: str = "tests.agents:Scripted", scoring_version: int = SCORING_VERSION) -> None:
        self.schedule = {"seed": seed, "faults": faults}
        self.salt = salt
        self.faults = {f["id"]: f for f in faults}
        self.attribution: dict[str, list[str]] = {}
        self.now = EPOCH
        self.steps = 0
        self.actions = 0
        kwargs = {} if retain == "default" else {"retain": retain}
        self.writer = BundleWriter(run_dir, signing_key=key, **kwargs)
        _OPEN.append(self.writer)
        self.writer.emit(self.now, "run.start", RunStart(
            scenario="marathon-test", scenario_digest="d" * 64, seed=seed, agent=agent, backend="twin",
            apps=list(APPS), start=iso(EPOCH), end=iso(at(minutes)), tick_seconds=30, cadence_seconds=300,
            segments=[{"name": "all", "start": iso(EPOCH), "end": iso(at(minutes))}],
            ground_truth_commitment=commitment(salt, self.schedule), scoring_version=scoring_version))

    @property
    def events(self):
        return self.writer.events

    def inject(self, fid: str) -> None:
        f = self.faults[fid]
        self.writer.emit(self.now, "truth.fault", TruthFault(
            id=fid, kind=f["kind"], app=f["app"], component=f["component"], change=f["change"],
            start=iso(self.now), planned_end=f["planned_end"], description=f["description"],
            impact=list(f.get("impact") or []), nodes=list(f.get("nodes") or [])))

    def cleanup(self, fid: str, how: str = "cleanup") -> None:
        self.writer.emit(self.now, "truth.fault_end", TruthFaultEnd(id=fid, how=how))

    def alert(self, aid: str, *faults: str, app: str = "shop", status: str = "firing") -> None:
        self.writer.emit(self.now, "alert", AlertTransition(alert=Alert(
            id=aid, name="HighErrorRate", status=status, severity="warning",
            labels={"app": app, "service": "cart", "namespace": app},
            annotations={"summary": f"error ratio above 5% on {app}"}, starts_at=self.now)))
        if aid not in self.attribution:
            self.attribution[aid] = list(faults)
            self.writer.emit(self.now, "truth.alert", TruthAlert(alert=aid, faults=list(faults)))

    def step(self, findings: Iterable[Finding] = (), claims: Iterable[str] = (), outcome: str = "ok") -> None:
        report = Report(findings=list(findings), claims=[Claim(incident=c) for c in claims]) \
            if outcome == "ok" else None
        self.writer.emit(self.now, "agent.step", AgentStep(step=self.steps, outcome=outcome, report=report))
        self.steps += 1

    def action(self, app: Optional[str] = "shop", *, allowed: bool = True, actor: str = "agent",
               verb: str = "revert", channel: str = "pipeline", target: Optional[str] = None) -> str:
        """Record an agent action; returns its id."""
        self.actions += 1
        aid = f"act-{self.actions:05d}"
        self.writer.emit(self.now, "action", Action(
            actor=actor, channel=channel, id=aid, verb=verb, target=target or f"pipeline/{app}/{verb}", app=app,
            allowed=allowed, rule=None if allowed else "no-scale-to-zero", status=200 if allowed else 403))
        return aid

    def effect(self, action: str, obj: str, aspect: str) -> None:
        self.writer.emit(self.now, "truth.effect", TruthEffect(action=action, object=obj, aspect=aspect))

    def mitigate(self, fid: str, mitigated: bool = True, by: Optional[str] = "agent",
                 actions: Iterable[str] = ()) -> None:
        self.writer.emit(self.now, "truth.mitigation",
                         TruthMitigation(fault=fid, mitigated=mitigated, by=by if mitigated else None,
                                         actions=list(actions) if mitigated else []))

    def sli(self, rng: random.Random) -> None:
        self.writer.emit(self.now, "sli", SLISample(services={
            f"{a}/{s}": [round(rng.uniform(5, 50), 2), round(rng.random() * 0.02, 4), round(rng.uniform(20, 400), 1)]
            for a in APPS for s in SERVICES}))

    def cluster(self, message: str) -> None:
        self.writer.emit(self.now, "cluster", ClusterEvent(reason="OOMKilled", object="pod/shop/cart-1",
                                                           message=message))

    def end(self, reason: str = "completed") -> None:
        self.writer.emit(self.now, "run.end", RunEnd(reason=reason, steps=self.steps))

    def seal(self) -> Path:
        self.writer.add_file("scenario.yaml", "name: marathon-test\nseed: 42\n")
        return self.writer.seal({"schedule": self.schedule, "alerts": self.attribution}, self.salt,
                                {"wall": {"note": "wall-clock stats live in wall.json"}})


def marathon(run_dir: Path, *, n_faults: int = 6, hours: float = 3, seed: int = 7, key: Any = None,
             alerts_per_fault: int = 15, noise_per_hour: int = 40, cadence_min: float = 5,
             tick_s: float = 30, seal: bool = True) -> Recorder:
    """A whole run: overlapping faults, alert storms plus noise, SLI samples every tick, an agent
    that correlates (cumulative findings every step), localizes some faults, repairs a few, and
    claims some incidents resolved."""
    rng = random.Random(seed)
    minutes = hours * 60
    faults = []
    for i in range(n_faults):
        start = rng.uniform(5, minutes * 0.8)
        app = APPS[i % 3]
        service = SERVICES[rng.randrange(len(SERVICES))]
        faults.append(fault(f"f{i:02d}", app=app, service=service, kind=rng.choice(["code-bug", "config", "oom"]),
                            change=f"c{i:03d}" if i % 3 else None, start=start,
                            end=min(minutes, start + rng.uniform(20, 90))))
    rec = Recorder(run_dir, faults, seed=seed, key=key, minutes=minutes)
    rec.writer.add_file("wall.json", '{"seconds": 12.5}')
    fault_alerts: dict[str, list[str]] = {f["id"]: [] for f in faults}
    pending = sorted((f["start"], "inject", f["id"]) for f in faults)
    ends = {f["id"]: f["planned_end"] for f in faults}
    active: set[str] = set()
    repaired: set[str] = set()
    next_alert = 0
    ticks = int(minutes * 60 / tick_s)
    per_tick_noise = noise_per_hour * tick_s / 3600
    for k in range(1, ticks + 1):
        rec.now = EPOCH + timedelta(seconds=k * tick_s)
        now_s = iso(rec.now)
        while pending and pending[0][0] <= now_s:
            _, _, fid = pending.pop(0)
            rec.inject(fid)
            active.add(fid)
        for fid in sorted(active):
            if ends[fid] <= now_s:
                rec.cleanup(fid)
                active.discard(fid)
        for fid in sorted(active):
            if len(fault_alerts[fid]) < alerts_per_fault and rng.random() < 0.3:
                aid = f"a{next_alert:05d}"
                next_alert += 1
                fault_alerts[fid].append(aid)
                rec.alert(aid, fid, app=rec.faults[fid]["app"])
        if rng.random() < per_tick_noise:
            aid = f"a{next_alert:05d}"
            next_alert += 1
            rec.alert(aid, app=APPS[rng.randrange(3)])
        rec.sli(rng)
        if rng.random() < 0.01:
            rec.cluster("container cart exceeded its memory limit " + "x" * rng.randrange(200))
        if k % int(cadence_min * 60 / tick_s) == 0:
            findings = []
            claims = []
            for fid, ids in fault_alerts.items():
                if not ids:
                    continue
                f = rec.faults[fid]
                localize = int(fid[1:]) % 2 == 0
                findings.append(finding(f"inc-{fid}", ids, component=f["component"] if localize else None))
                if fid in active and localize and fid not in repaired and rng.random() < 0.3:
                    rec.action(f["app"])
                    rec.mitigate(fid)
                    repaired.add(fid)
                if fid in repaired or rng.random() < 0.05:
                    claims.append(f"inc-{fid}")
            if rng.random() < 0.05:
                rec.action("blog", allowed=False, verb="delete")
            rec.step(findings, claims)
            rec.writer.append_file("agent/stderr.log", f"step {rec.steps}: {len(findings)} findings\n")
            rec.writer.append_file("agent/reports.jsonl", f'{{"step": {rec.steps}, "findings": {len(findings)}}}\n')
    for fid in sorted(active):
        rec.cleanup(fid, how="run-end")
    rec.end()
    if seal:
        rec.seal()
    return rec
