"""Marathon-Score (the rules: SCORING.md), computed deterministically from recorded events.

Inputs are the records of ``events.jsonl`` only (plus, for a sealed bundle, the alert
attribution revealed in ``ground_truth.json`` for alerts no ``truth.alert`` record covers):

* faults: ``truth.fault`` (start, component, change …) and ``truth.fault_end`` (the end is that
  record's time). A fault still open when the scored window closes (``run.end``, ``until``, or
  the last record of a crashed run) ends there and is reported as still active.
* alert attribution: ``truth.alert`` (alert id -> fault ids, ``[]`` = noise). An alert counts
  for a finding only if its attribution was recorded at or before the finding's time.
* findings and claims: the ``report`` of ``agent.step`` records, made at the record's time.
* mitigation: ``truth.mitigation`` transitions (fault, mitigated, by).

Per fault f with active window [start, end):

* **C** — a finding made in [start, end) lists ≥ 1 alert attributed to f, and f holds a strict
  majority of that finding's fault-attributed alerts (noise and unknown ids are ignored; an
  alert attributed to several faults counts for each of them).
* **L** — a finding made in [start, end) that satisfies the C condition for f *and* names f's
  component (``finding.component == component``) or f's change (``finding.cause`` or
  ``finding.component`` equal to ``"change:<id>"``). Fault kinds (``kind:…``) do not localize.
  **Precision** (scoring version 2): the localization credit is ``1/k``, where ``k`` counts the
  distinct candidates the agent named for f over f's whole window — in every finding that
  correlates f, whatever its incident or step — as places (components) and as changes, the
  larger of the two counts; names of *another* fault that the same finding correlates (and
  that is active) do not count.
* **R** (only if L with credit ≥ :data:`REPAIR_MIN_CREDIT`) — the last mitigation transition to
  True before ``end`` is attributed to the agent (the judge's causal attribution, recorded on
  the ``truth.mitigation`` record with the agent actions it names), and it held: no transition
  back to False before ``end``, or the next one came ≥ :data:`HOLD_SECONDS` later.

``score_f = 20·C + 30·C·credit_L + 50·C·L·R`` (:data:`WEIGHTS`); the score is the mean over
faults. Side metrics, never folded into the score: times to C/L/R, false-resolution rate,
declared-done gap, policy denials, collateral (benign changes reverted, healthy workloads
restarted or scaled, nodes cordoned without a node fault), alert counts, agent step outcomes.

Bundles record the rules they were written for (``scoring_version`` in ``run.start`` and the
manifest); :func:`score_events` scores version-1 records by version 1's rules (no precision
factor, repair attribution as recorded) and says so on :attr:`MarathonScore.notes`.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Optional

from .bundle import ground_truth_attribution
from .clock import iso, parse_iso
from .events import SCORED_TYPES

if TYPE_CHECKING:
    from .bundle import Bundle
    from .events import Event

#: The one place the stage weights live (printed with every score).
WEIGHTS: dict[str, int] = {"correlation": 20, "localization": 30, "repair": 50}
#: A repair that is undone later still counts if it held this long (seconds).
HOLD_SECONDS = 600
#: The rules this module implements; bundles record the version they were written for.
SCORING_VERSION = 2
#: Verbs of the recorded requests that only look into a container (``kubectl exec``, ``attach``):
#: a denied one counts as a policy denial; an allowed one is neither an agent action nor collateral.
_LOOKS = frozenset({"exec", "attach"})
#: Repair credit needs the fault localized this precisely (credit 1/k: at most two candidates,
#: so one change of mind after a wrong first answer still earns the repair).
REPAIR_MIN_CREDIT = 0.5


@dataclass
class FaultResult:
    id: str
    kind: str
    app: str
    component: str
    change: Optional[str]
    start: str  # ISO-8601 UTC
    end: str  # end of the active window (fault end, or the end of the scored window)
    still_active: bool = False  # not cleaned up when the scored window closed
    correlated: bool = False
    localized: bool = False  # some correlating finding named the fault
    localization_credit: float = 0.0  # 1/candidates when localized (scoring version 2), else 0
    candidates: int = 0  # distinct candidates named for the fault in its window (see SCORING.md)
    repaired: bool = False
    repair_actions: list[str] = field(default_factory=list)  # agent actions the repair is attributed to
    points: float = 0.0
    t_correlate: Optional[float] = None  # seconds from start
    t_localize: Optional[float] = None
    t_repair: Optional[float] = None
    repair_step: Optional[int] = None  # the agent step whose action led to the repair
    claimed: bool = False  # some "resolved" claim maps to this fault
    false_claim: bool = False  # … made while it was active and unmitigated

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MarathonScore:
    score: float  # 0–100, mean of FaultResult.points
    faults: list[FaultResult]
    weights: dict[str, int] = field(default_factory=lambda: dict(WEIGHTS))
    run_start: Optional[str] = None
    window_end: Optional[str] = None  # where scoring stopped (run.end, until, or last record)
    complete: bool = False  # run.end was recorded inside the scored window
    scoring_version: int = SCORING_VERSION  # the rules this score was computed by
    notes: list[str] = field(default_factory=list)  # e.g. "scored by the version-1 rules"
    correlated: int = 0
    localized: int = 0
    localization_credit: float = 0.0  # sum of the faults' localization credit
    repaired: int = 0
    claims: int = 0
    false_claims: int = 0
    unmatched_claims: int = 0  # claims whose incident maps to no fault
    false_resolution_rate: Optional[float] = None  # false_claims / claims (None: no claims)
    claimed_share: float = 0.0  # % of faults some claim says are resolved
    repaired_share: float = 0.0  # % of faults with R
    declared_done_gap: float = 0.0  # claimed_share - repaired_share, in points
    policy_denials: int = 0
    collateral_actions: int = 0
    agent_actions: int = 0  # allowed agent actions
    # What the agent broke or disturbed outside any fault, by category (each a list of
    # {"t", "action", "target", ...}): benign_reverts, healthy_restarts, healthy_scales,
    # cordons_without_node_fault.
    collateral: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    alerts: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, int] = field(default_factory=dict)
    # How time was charged (run.start; not in the score): the think-time model, and the build
    # durations drawn per app (None: deploys were instant). Bundles before issue 14: frozen, instant.
    think_time: str = "frozen"
    builds: Optional[dict[str, Any]] = None
    step_time: dict[str, float] = field(default_factory=dict)  # charged virtual seconds: mean, max, overruns

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- internals

@dataclass
class _Mitigation:
    t: datetime
    mitigated: bool
    by: Optional[str]
    actions: list[str] = field(default_factory=list)


@dataclass
class _Fault:
    data: dict[str, Any]
    start: datetime
    end: Optional[datetime] = None
    ended_by_run_end: bool = False
    mitigations: list[_Mitigation] = field(default_factory=list)


@dataclass
class _Finding:
    t: datetime
    alerts: list[str]
    component: Optional[str]
    cause: Optional[str]
    majority: frozenset[str] = frozenset()

    @property
    def candidates(self) -> set[str]:
        """What the finding names as the root cause: its component and a ``change:`` cause
        (fault kinds name no place, so they are no candidate)."""
        out = {self.component} if self.component and not self.component.startswith("kind:") else set()
        if self.cause and self.cause.startswith("change:"):
            out.add(self.cause)
        return out


def _seconds(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds()


def _names_of(fault: dict[str, Any]) -> set[str]:
    """The identifiers that localize a fault: its component, and ``change:<id>``."""
    out = {fault["component"]} if fault.get("component") else set()
    if fault.get("change"):
        out.add(f"change:{fault['change']}")
    return out


def _names(finding: _Finding, fault: dict[str, Any]) -> bool:
    return bool(finding.candidates & _names_of(fault))


def _localization(fid: str, active: list[_Finding], faults: Mapping[str, _Fault],
                  ends: Mapping[str, datetime]) -> tuple[int, float]:
    """(candidates, credit) of fault ``fid`` from the findings that correlate it in its window.

    Names are counted in two dimensions, places (components) and changes (``change:<id>``),
    and ``k`` is the larger count: a finding's component and cause are one answer, not two.
    A name is not counted when it names another fault that the same finding correlates and
    that is active at the finding's time (an answer for that fault, not a guess about this
    one). Credit is ``1/k`` if some name is ``fid``'s own, else 0."""
    own = _names_of(faults[fid].data)
    places: set[str] = set()
    changes: set[str] = set()
    for fnd in active:
        for name in fnd.candidates:
            if name not in own and any(
                    g != fid and g in faults and faults[g].start <= fnd.t < ends[g] and name in _names_of(faults[g].data)
                    for g in fnd.majority):
                continue
            (changes if name.startswith("change:") else places).add(name)
    k = max(len(places), len(changes))
    right = bool((places | changes) & own)
    return k, (1.0 / k if right else 0.0)


def score_events(events: Iterable[Event], *, until: Optional[datetime] = None,
                 attribution: Optional[Mapping[str, list[str]]] = None) -> MarathonScore:
    """Score a run from its records (in recorded order), optionally only up to ``until``.

    ``attribution`` (alert -> faults, e.g. from a sealed bundle's ground truth) fills in alerts
    that have no ``truth.alert`` record; those count regardless of time.
    """
    cutoff = iso(until) if until is not None else None
    faults: dict[str, _Fault] = {}
    attributed: dict[str, tuple[str, list[str]]] = {}  # alert -> (recorded at, faults)
    findings: list[_Finding] = []
    latest_finding: dict[str, int] = {}  # incident -> index into findings
    claims: list[tuple[datetime, Optional[int]]] = []
    steps: list[tuple[datetime, int]] = []
    outcomes: Counter[str] = Counter()
    actions: list[tuple[datetime, Optional[str]]] = []  # allowed agent actions (t, app)
    action_records: dict[str, tuple[datetime, dict[str, Any]]] = {}  # id -> allowed agent action
    effects: list[tuple[datetime, dict[str, Any]]] = []
    version = 1  # until run.start says otherwise: bundles before version 2 do not
    think_time, builds = "frozen", None
    charged: list[tuple[float, float]] = []  # per step: (virtual seconds, overrun seconds)
    denials = 0
    run_start: Optional[datetime] = None
    run_end: Optional[datetime] = None
    last_t: Optional[datetime] = None

    for ev in events:
        if cutoff is not None and ev.t > cutoff:
            continue
        t = parse_iso(ev.t)
        last_t = t if last_t is None else max(last_t, t)
        d = ev.data
        kind = ev.type
        if kind == "run.start":
            run_start = parse_iso(d["start"]) if d.get("start") else t
            version = int(d.get("scoring_version", 1))
            if version > SCORING_VERSION:
                raise ValueError(f"the run was recorded for scoring version {version}, newer than this "
                                 f"sremarathon's ({SCORING_VERSION}); score it with the version that ran it")
            think_time, builds = str(d.get("think_time") or "frozen"), d.get("builds")
        elif kind == "run.end":
            run_end = t
        elif kind == "truth.fault":
            faults[d["id"]] = _Fault(data=d, start=parse_iso(d["start"]))
        elif kind == "truth.fault_end":
            f = faults.get(d["id"])
            if f is not None and f.end is None:
                f.end = t
                f.ended_by_run_end = d.get("how") == "run-end"
        elif kind == "truth.alert":
            prior = attributed.get(d["alert"])
            attributed[d["alert"]] = (prior[0] if prior else ev.t, list(d.get("faults") or []))
        elif kind == "truth.mitigation":
            f = faults.get(d["fault"])
            if f is not None:
                f.mitigations.append(_Mitigation(t, bool(d["mitigated"]), d.get("by"), list(d.get("actions") or [])))
        elif kind == "truth.effect":
            effects.append((t, d))
        elif kind == "action":
            if d.get("actor") == "agent":
                if d.get("allowed") and d.get("verb") in _LOOKS:
                    pass  # an exec or attach looks into a container: no action on the cluster
                elif d.get("allowed"):
                    actions.append((t, d.get("app")))
                    if d.get("id") and int(d.get("status", 200)) < 400:
                        action_records[d["id"]] = (t, d)
                else:
                    denials += 1
        elif kind == "agent.step":
            steps.append((t, int(d.get("step", len(steps)))))
            if d.get("virtual_seconds") is not None:
                charged.append((float(d["virtual_seconds"]), float(d.get("overrun_seconds") or 0.0)))
            outcomes[str(d.get("outcome"))] += 1
            report = d.get("report") or {}
            for fd in report.get("findings") or []:
                latest_finding[fd["incident"]] = len(findings)
                findings.append(_Finding(t=t, alerts=list(fd.get("alerts") or []),
                                         component=fd.get("component"), cause=fd.get("cause")))
            seen: set[str] = set()
            for cl in report.get("claims") or []:
                if cl.get("status", "resolved") == "resolved" and cl["incident"] not in seen:
                    seen.add(cl["incident"])
                    claims.append((t, latest_finding.get(cl["incident"])))

    # The scored window.
    window_end: Optional[datetime]
    if run_end is not None:
        window_end = run_end
    elif until is not None:
        window_end = max(until, last_t) if last_t is not None else until
    else:
        window_end = last_t
    fallback = dict(attribution or {})

    def faults_of(alert: str, at: str) -> list[str]:
        hit = attributed.get(alert)
        if hit is not None:
            return hit[1] if hit[0] <= at else []
        return fallback.get(alert, [])

    # Majority fault(s) of every finding.
    for fnd in findings:
        at = iso(fnd.t)
        counts: Counter[str] = Counter()
        n = 0
        for alert in dict.fromkeys(fnd.alerts):
            owners = set(faults_of(alert, at))
            if owners:
                n += 1
                counts.update(owners)
        fnd.majority = frozenset(g for g, c in counts.items() if 2 * c > n)

    # Per fault.
    in_scope = {fid: f for fid, f in faults.items() if window_end is not None and f.start < window_end}
    by_fault: dict[str, list[_Finding]] = {fid: [] for fid in in_scope}
    ends = {fid: max(f.end if f.end is not None else window_end, f.start)
            for fid, f in in_scope.items() if window_end is not None}
    for fnd in findings:
        for g in fnd.majority:
            if g in by_fault:
                by_fault[g].append(fnd)
    step_times = [s[0] for s in steps]
    results: dict[str, FaultResult] = {}
    for fid, f in in_scope.items():
        assert window_end is not None
        end = ends[fid]
        d = f.data
        r = FaultResult(id=fid, kind=d.get("kind", ""), app=d.get("app", ""),
                        component=d.get("component", ""), change=d.get("change"),
                        start=iso(f.start), end=iso(end),
                        still_active=f.end is None or f.ended_by_run_end)
        active = [x for x in by_fault[fid] if f.start <= x.t < end]
        if active:
            r.correlated = True
            r.t_correlate = _seconds(f.start, active[0].t)
            naming = [x for x in active if _names(x, d)]
            if version >= 2:
                r.candidates, r.localization_credit = _localization(fid, active, in_scope, ends)
            if naming:
                r.localized = True
                r.t_localize = _seconds(f.start, naming[0].t)
                if version < 2:
                    r.candidates, r.localization_credit = 1, 1.0
                repair = _repair(f, end) if r.localization_credit >= REPAIR_MIN_CREDIT else None
                if repair is not None:
                    r.repaired = True
                    r.t_repair = _seconds(f.start, repair.t)
                    r.repair_actions = list(repair.actions)
                    r.repair_step = _repair_step(repair.t, d.get("app"), actions, steps, step_times)
        r.points = (WEIGHTS["correlation"] * r.correlated
                    + WEIGHTS["localization"] * (r.localization_credit if r.correlated and r.localized else 0.0)
                    + WEIGHTS["repair"] * (r.correlated and r.localized and r.repaired))
        results[fid] = r

    # Claims.
    n_false = n_unmatched = 0
    for t, idx in claims:
        mapped = [g for g in sorted(findings[idx].majority) if g in results] if idx is not None else []
        if not mapped:
            n_unmatched += 1
            continue
        false = False
        for g in mapped:
            results[g].claimed = True
            f = in_scope[g]
            end_g = parse_iso(results[g].end)
            if f.start <= t < end_g and not _mitigated_at(f, t):
                results[g].false_claim = True
                false = True
        n_false += false

    # Collateral: allowed agent actions on an app with no fault active at that moment.
    windows: dict[str, list[tuple[datetime, datetime]]] = {}
    for fid, r in results.items():
        windows.setdefault(r.app, []).append((in_scope[fid].start, parse_iso(r.end)))
    collateral = sum(1 for t, app in actions
                     if app is not None and not any(s <= t < e for s, e in windows.get(app, [])))
    collateral_detail = _collateral(in_scope, ends, action_records, effects)

    ordered = sorted(results.values(), key=lambda r: (r.start, r.id))
    n = len(ordered)
    n_c = sum(r.correlated for r in ordered)
    n_l = sum(r.localized for r in ordered)
    n_r = sum(r.repaired for r in ordered)
    claimed_share = 100.0 * sum(r.claimed for r in ordered) / n if n else 0.0
    repaired_share = 100.0 * n_r / n if n else 0.0
    alert_owner = {a: owners for a, (_, owners) in attributed.items()}
    for a, fault_ids in fallback.items():
        alert_owner.setdefault(a, fault_ids)
    noise = sum(1 for owners in alert_owner.values() if not owners)
    total = len(alert_owner)
    return MarathonScore(
        score=sum(r.points for r in ordered) / n if n else 0.0,
        faults=ordered,
        run_start=iso(run_start) if run_start is not None else None,
        window_end=iso(window_end) if window_end is not None else None,
        complete=run_end is not None,
        scoring_version=version,
        notes=[] if version >= SCORING_VERSION else [
            f"scored by the version-{version} rules the bundle was sealed under (no localization "
            f"precision; repairs attributed as recorded); see SCORING.md"],
        correlated=n_c, localized=n_l, repaired=n_r,
        localization_credit=round(sum(r.localization_credit for r in ordered), 6),
        claims=len(claims), false_claims=n_false, unmatched_claims=n_unmatched,
        false_resolution_rate=(n_false / len(claims)) if claims else None,
        claimed_share=claimed_share, repaired_share=repaired_share,
        declared_done_gap=claimed_share - repaired_share,
        policy_denials=denials, collateral_actions=collateral, agent_actions=len(actions),
        collateral=collateral_detail,
        alerts={"total": total, "attributed": total - noise, "noise": noise,
                "noise_share": noise / total if total else 0.0},
        steps={"total": len(steps), **dict(sorted(outcomes.items()))},
        think_time=think_time, builds=builds,
        step_time={"mean_seconds": round(sum(c for c, _ in charged) / len(charged), 3),
                   "max_seconds": max(c for c, _ in charged),
                   "overruns": sum(1 for _, o in charged if o > 0)} if charged else {},
    )


def _repair(f: _Fault, end: datetime) -> Optional[_Mitigation]:
    """The transition credited as ``f``'s repair (R rule), or None."""
    before = [m for m in f.mitigations if m.t < end]
    trues = [i for i, m in enumerate(before) if m.mitigated]
    if not trues:
        return None
    i = trues[-1]
    m = before[i]
    if m.by != "agent":
        return None
    undone = next((x.t for x in before[i + 1:] if not x.mitigated), None)
    if undone is None or _seconds(m.t, undone) >= HOLD_SECONDS:
        return m
    return None


def _mitigated_at(f: _Fault, t: datetime) -> bool:
    state = False
    for m in f.mitigations:
        if m.t > t:
            break
        state = m.mitigated
    return state


def _collateral(faults: Mapping[str, _Fault], ends: Mapping[str, datetime],
                actions: Mapping[str, tuple[datetime, dict[str, Any]]],
                effects: list[tuple[datetime, dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """What the agent did outside every fault (SCORING.md §5, "Collateral"):

    * ``benign_reverts``: pipeline reverts of a change that introduced no fault;
    * ``healthy_restarts`` / ``healthy_scales``: kube actions that changed the pod template /
      the replicas or resources of a Deployment no active fault reaches (neither its component
      nor its blast radius);
    * ``cordons_without_node_fault``: cordons (or uncordons) of a node no active fault sits on.

    Active means inside the fault's window, plus the ten minutes its symptoms outlive it."""
    changes = {f.data["change"] for f in faults.values() if f.data.get("change")}
    grace = timedelta(seconds=HOLD_SECONDS)

    def active(t: datetime) -> list[_Fault]:
        return [f for fid, f in faults.items() if f.start <= t < ends[fid] + grace]

    def covers_service(t: datetime, ns: str, svc: str) -> bool:
        target = f"{ns}/{svc}"
        return any(target in (f.data.get("impact") or []) or f.data.get("component") == f"service:{target}"
                   or (not f.data.get("impact") and f.data.get("app") == ns) for f in active(t))

    out: dict[str, list[dict[str, Any]]] = {"benign_reverts": [], "healthy_restarts": [], "healthy_scales": [],
                                            "cordons_without_node_fault": []}
    for aid, (t, a) in sorted(actions.items(), key=lambda kv: (kv[1][0], kv[0])):
        if a.get("channel") == "pipeline" and a.get("verb") == "revert":
            change = a.get("target", "").rsplit("/", 1)[-1]
            if change and change not in changes:
                out["benign_reverts"].append({"t": iso(t), "action": aid, "app": a.get("app"), "change": change})
    seen: set[tuple[str, str, str]] = set()
    for t, e in effects:
        act = actions.get(e.get("action", ""))
        if act is None or act[1].get("channel") != "kube":
            continue  # pipeline deploys are judged by what they revert, not by what they roll
        kind, ns, name = (e.get("object", "").split("/") + ["", "", ""])[:3]
        key = (e["action"], e["object"], e.get("aspect", ""))
        if key in seen:
            continue
        seen.add(key)
        row = {"t": iso(t), "action": e["action"], "target": act[1].get("target"), "object": e["object"]}
        if kind in ("Deployment", "StatefulSet") and not covers_service(t, ns, name):
            if e.get("aspect") == "template":
                out["healthy_restarts"].append(row)
            elif e.get("aspect") in ("replicas", "resources"):
                out["healthy_scales"].append(row)
        elif kind == "Node" and not any(name in (f.data.get("nodes") or []) for f in active(t)):
            out["cordons_without_node_fault"].append(row)
    return out


def _repair_step(t_repair: datetime, app: Optional[str], actions: list[tuple[datetime, Optional[str]]],
                 steps: list[tuple[datetime, int]], step_times: list[datetime]) -> Optional[int]:
    """The agent step credited with a repair: the step during which the agent's last allowed
    action on the fault's app (or an app-less action) before the repair was made; failing
    that, the last step before the repair."""
    act = next((t for t, a in reversed(actions) if t <= t_repair and (a is None or a == app)), None)
    if act is not None:
        i = bisect.bisect_left(step_times, act)
        if i < len(steps):
            return steps[i][1]
    i = bisect.bisect_right(step_times, t_repair)
    return steps[i - 1][1] if i else None


def score_bundle(bundle: Bundle, partial: bool = False) -> MarathonScore:
    """Score an opened bundle. An unsealed (crashed) run needs ``partial=True``."""
    if not bundle.sealed and not partial:
        raise ValueError(f"{bundle.path}: the bundle is not sealed; score it with partial=True")
    return score_events(bundle.iter_events(SCORED_TYPES), attribution=ground_truth_attribution(bundle))


# --------------------------------------------------------------------------- presentation

def _dur(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _offset(t: str, origin: Optional[str]) -> str:
    if origin is None:
        return t
    s = int(_seconds(parse_iso(origin), parse_iso(t)))
    sign = "-" if s < 0 else "+"
    h, rem = divmod(abs(s), 3600)
    return f"{sign}{h}:{rem // 60:02d}:{rem % 60:02d}"


COLLATERAL_LABELS = {"benign_reverts": "benign changes reverted",
                     "healthy_restarts": "healthy workloads restarted",
                     "healthy_scales": "healthy workloads scaled or resized",
                     "cordons_without_node_fault": "nodes cordoned without a node fault"}


def fraction(credit: float) -> str:
    """A localization credit as people read it: ``1``, ``1/3``, ``0``."""
    if credit <= 0 or credit >= 1:
        return f"{credit:g}"
    k = round(1 / credit)
    return f"1/{k}" if abs(1 / k - credit) < 1e-9 else f"{credit:.2f}"


def weights_line() -> str:
    w = WEIGHTS
    return (f"weights: correlation {w['correlation']}, localization {w['localization']}, "
            f"repair {w['repair']}  (score_f = {w['correlation']}·C + {w['localization']}·C·credit_L + "
            f"{w['repair']}·C·L·R; Marathon-Score = mean over faults)")


def time_line(score: MarathonScore) -> str:
    """How time was charged: the think-time model, the steps' charged time, the build durations."""
    line = f"think time: {score.think_time}"
    st = score.step_time
    if st:
        line += (f" (steps took {_dur(st.get('mean_seconds'))} on average, at most {_dur(st.get('max_seconds'))}; "
                 f"{int(st.get('overruns', 0))} outlasted the cadence)")
    b = score.builds
    if b and b.get("seconds"):
        line += "; builds: " + ", ".join(f"{app} {_dur(sec)}" for app, sec in sorted(b["seconds"].items())) + \
            " per build (jittered)"
    else:
        line += "; builds: instant"
    return line


def format_table(score: MarathonScore) -> str:
    """A per-fault table, the totals, the side metrics and the weights."""
    head = ("fault", "kind", "app", "component / change", "window", "C", "L", "k", "R", "pts",
            "t_C", "t_L", "t_R", "step", "claim")
    rows = []
    for r in score.faults:
        where = r.component + (f" / change:{r.change}" if r.change else "")
        window = f"{_offset(r.start, score.run_start)}..{_offset(r.end, score.run_start)}"
        window += "*" if r.still_active else ""
        claim = "FALSE" if r.false_claim else ("yes" if r.claimed else "")
        rows.append((r.id, r.kind, r.app, where, window,
                     "x" if r.correlated else "-", fraction(r.localization_credit) if r.localized else "-",
                     str(r.candidates) if r.candidates else "", "x" if r.repaired else "-", f"{r.points:.1f}".removesuffix(".0"),
                     _dur(r.t_correlate), _dur(r.t_localize), _dur(r.t_repair),
                     "" if r.repair_step is None else str(r.repair_step), claim))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    numeric = {7, 9, 10, 11, 12, 13}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in numeric else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    out = [line(head), line(tuple("-" * w for w in widths))]
    out += [line(row) for row in rows]
    if not rows:
        out.append("(no faults in the scored window)")
    n = len(score.faults)
    out.append("")
    state = "" if score.complete else f"  [partial: scored up to {score.window_end}]"
    out.append(f"Marathon-Score: {score.score:.1f} / 100 over {n} faults "
               f"(correlated {score.correlated}, localized {score.localized} with credit "
               f"{score.localization_credit:.1f}, repaired {score.repaired})" + state)
    out.append(weights_line())
    out.append(f"scoring rules: version {score.scoring_version}" + (
        f" (localization credit 1/k for k candidates; repair needs credit >= {REPAIR_MIN_CREDIT:g} and a causal "
        f"link to an agent action)" if score.scoring_version >= 2 else ""))
    out += [f"note: {note}" for note in score.notes]
    if score.claims:
        rate = f"{100 * (score.false_resolution_rate or 0):.1f}%"
        out.append(f"false-resolution rate: {rate} ({score.false_claims} of {score.claims} claims; "
                   f"{score.unmatched_claims} unmatched)")
    else:
        out.append("false-resolution rate: n/a (no claims)")
    out.append(f"declared-done gap: {score.declared_done_gap:+.1f} points "
               f"(claimed resolved {score.claimed_share:.1f}% of faults, repaired {score.repaired_share:.1f}%)")
    out.append(f"policy denials: {score.policy_denials}; collateral actions: {score.collateral_actions} "
               f"of {score.agent_actions} allowed agent actions")
    if score.collateral:
        c = score.collateral
        out.append("collateral (not in the score): " + ", ".join(
            f"{len(c.get(key, []))} {label}" for key, label in COLLATERAL_LABELS.items()))
    a = score.alerts
    out.append(f"alerts: {a.get('total', 0)} ({a.get('attributed', 0)} attributed to faults, "
               f"noise {100 * a.get('noise_share', 0.0):.1f}%)")
    st = dict(score.steps)
    total = st.pop("total", 0)
    detail = ", ".join(f"{k} {v}" for k, v in st.items())
    out.append(f"agent steps: {total}" + (f" ({detail})" if detail else ""))
    out.append(time_line(score))
    out.append("window marked * = fault still active when scoring stopped; times are from fault start; "
               "L = localization credit, k = candidates named")
    return "\n".join(out)
