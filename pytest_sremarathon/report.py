"""``sremarathon report BUNDLE -o report.html``: one self-contained HTML page about a run.

The page is built from the bundle alone (the same records the scorer reads) and needs nothing
to be read: styles, the SVG timeline and a few lines of JavaScript are inline, nothing is
fetched. It shows

* the run (scenario, seed, agent, integrity of the bundle) and the Marathon-Score;
* the score breakdown: points per stage, the side metrics (false-resolution rate, declared-done
  gap, policy denials, collateral actions, alerts, agent steps) and the weights;
* a timeline: one lane per application (and one for cluster-wide faults) with every fault's
  active window as a bar coloured by how far the agent got, and its stage marks (C, L, R) where
  they were reached; the alert volume (fault-attributed and noise); the agent's actions
  (allowed and denied) and its "resolved" claims;
* how time was charged: the think-time model, the agent's steps as spans of the virtual time
  they took (an overrun marked), and the pipeline's builds as spans per app (building, then
  rolling out; the agent's own highlighted);
* per-fault details: kind, root cause, window, stages and times, claims, the alerts attributed
  to it and the agent's findings that carried them.

Every element the page is made of has an ``id`` or a ``data-*`` attribute, so tests (and
scripts) can check it.
"""

from __future__ import annotations

import argparse
import html
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Union

from . import __version__
from .bundle import Bundle, BundleError, ground_truth_attribution, open_bundle, verify
from .clock import parse_iso
from .scoring import COLLATERAL_LABELS, REPAIR_MIN_CREDIT, WEIGHTS, FaultResult, MarathonScore, fraction, score_bundle

__all__ = ["ReportData", "collect", "render", "write_report", "add_parser", "cmd_report"]

CLUSTER_LANE = "cluster"
ALERT_BIN_SECONDS = 600


# --------------------------------------------------------------------------- the data


@dataclass
class ActionMark:
    t: str
    verb: str
    target: str
    app: Optional[str]
    allowed: bool
    rule: Optional[str]
    status: int


@dataclass
class ClaimMark:
    t: str
    incident: str
    false: bool


@dataclass
class StepSpan:
    step: int
    started: str
    ended: str
    outcome: str
    virtual_seconds: float
    requests: Optional[int]
    overrun_seconds: float


@dataclass
class BuildSpan:
    id: str
    app: str
    actor: str
    action: Optional[str]
    queued: str
    started: Optional[str] = None  # building from
    rollout: Optional[str] = None  # deploying from
    ended: Optional[str] = None
    state: str = "queued"


@dataclass
class FaultDetail:
    result: FaultResult
    description: str = ""
    alerts: list[dict[str, Any]] = field(default_factory=list)  # attributed alerts
    findings: list[dict[str, Any]] = field(default_factory=list)  # findings carrying its alerts
    # (time, mitigated, by, [the agent actions it is attributed to, as "act-… verb target"], evidence)
    mitigations: list[tuple[str, bool, Optional[str], list[str], list[str]]] = field(default_factory=list)


@dataclass
class ReportData:
    path: str
    run: dict[str, Any]
    manifest: dict[str, Any]
    verified: bool
    verify_text: str
    sealed: bool
    score: MarathonScore
    faults: list[FaultDetail]
    lanes: list[str]
    alert_bins: list[tuple[int, int]]  # (attributed, noise) new alerts per bin
    actions: list[ActionMark]
    claims: list[ClaimMark]
    start: datetime
    end: datetime
    end_reason: str = ""
    steps: list[StepSpan] = field(default_factory=list)
    builds: list[BuildSpan] = field(default_factory=list)


def collect(path: Union[str, Path]) -> ReportData:
    """Read a bundle (sealed archive, or a run directory) into what the page shows."""
    bundle = open_bundle(path)
    result = verify(path)
    score = score_bundle(bundle, partial=not bundle.sealed)
    return _collect(bundle, score, result.ok, str(result), str(path))


def _collect(bundle: Bundle, score: MarathonScore, verified: bool, verify_text: str, path: str) -> ReportData:
    events = bundle.events
    run = next((e.data for e in events if e.type == "run.start"), {})
    end_reason = next((e.data.get("reason", "") for e in events if e.type == "run.end"), "")
    start_at = run.get("start") or (events[0].t if events else "2026-01-05T00:00:00Z")
    start = parse_iso(start_at)
    end = parse_iso(score.window_end or run.get("end") or (events[-1].t if events else start_at))
    if end <= start:
        end = parse_iso(run["end"]) if run.get("end") else start
    attribution: dict[str, list[str]] = dict(ground_truth_attribution(bundle) or {})
    for e in events:
        if e.type == "truth.alert":
            attribution[e.data["alert"]] = list(e.data.get("faults") or [])
    alerts: dict[str, dict[str, Any]] = {}
    fired_at: dict[str, str] = {}
    descriptions: dict[str, str] = {}
    mitigations: dict[str, list[tuple[str, bool, Optional[str], list[str], list[str]]]] = {}
    described: dict[str, str] = {}  # agent action id -> "act-… verb target"
    actions: list[ActionMark] = []
    claims: list[ClaimMark] = []
    findings_by_alert: dict[str, list[dict[str, Any]]] = {}
    latest_incident: dict[str, dict[str, Any]] = {}
    step_spans: list[StepSpan] = []
    builds: dict[str, BuildSpan] = {}
    for e in events:
        d = e.data
        if e.type == "pipeline.build":
            b = builds.setdefault(d["id"], BuildSpan(d["id"], d["app"], d["actor"], d.get("action"), e.t))
            b.action = d.get("action") or b.action
            b.state = d["state"]
            if d["state"] == "building":
                b.started = d.get("at") or e.t
            elif d["state"] == "deploying":
                b.rollout = e.t
            elif d["state"] in ("deployed", "failed", "superseded"):
                b.ended = e.t
        if e.type == "alert":
            a = d["alert"]
            alerts[a["id"]] = a
            if a.get("status") == "firing":
                fired_at.setdefault(a["id"], e.t)
        elif e.type == "truth.fault":
            descriptions[d["id"]] = d.get("description", "")
        elif e.type == "truth.mitigation":
            mitigations.setdefault(d["fault"], []).append((e.t, bool(d["mitigated"]), d.get("by"),
                                                           list(d.get("actions") or []), list(d.get("evidence") or [])))
        elif e.type == "action" and d.get("actor") == "agent":
            if d.get("id"):
                described[d["id"]] = f"{d['id']} {d.get('verb', '')} {d.get('target', '')}"
            actions.append(ActionMark(e.t, d.get("verb", ""), d.get("target", ""), d.get("app"),
                                      bool(d.get("allowed")), d.get("rule"), int(d.get("status") or 0)))
        elif e.type == "agent.step":
            if d.get("step"):
                step_spans.append(StepSpan(int(d["step"]), d.get("started") or e.t, e.t, str(d.get("outcome")),
                                           float(d.get("virtual_seconds") or 0.0), d.get("requests"),
                                           float(d.get("overrun_seconds") or 0.0)))
            report = d.get("report") or {}
            for fd in report.get("findings") or []:
                rec = {"t": e.t, "step": d.get("step"), "incident": fd.get("incident"),
                       "component": fd.get("component"), "cause": fd.get("cause"),
                       "alerts": list(fd.get("alerts") or [])}
                latest_incident[str(fd.get("incident"))] = rec
                for a in dict.fromkeys(rec["alerts"]):
                    findings_by_alert.setdefault(a, []).append(rec)
            for cl in report.get("claims") or []:
                claims.append(ClaimMark(e.t, str(cl.get("incident")), False))
    by_id = {f.id: f for f in score.faults}
    # A claim is false if it mapped to a fault flagged false_claim and was made inside its window
    # while unmitigated; mark claims whose incident's latest finding carries such a fault's alerts.
    for c in claims:
        latest = latest_incident.get(c.incident)
        if latest is None:
            continue
        owners = {f for a in latest["alerts"] for f in attribution.get(a, [])}
        for fid in owners:
            r = by_id.get(fid)
            if r is not None and r.false_claim and r.start <= c.t < r.end and not _mitigated_at(mitigations.get(fid, []), c.t):
                c.false = True
    for fid, transitions in mitigations.items():
        mitigations[fid] = [(t, m, by, [described.get(a, a) for a in acts], ev) for t, m, by, acts, ev in transitions]
    details = []
    for r in score.faults:
        fa = sorted((a for a, owners in attribution.items() if r.id in owners and a in alerts),
                    key=lambda a: (fired_at.get(a, ""), a))
        seen: set[tuple[Any, ...]] = set()
        carrying = []
        for a in fa:
            for rec in findings_by_alert.get(a, []):
                if not (r.start <= rec["t"] < r.end):
                    continue
                key = (rec["incident"], rec["component"], rec["cause"])
                if key not in seen:
                    seen.add(key)
                    carrying.append(rec)
        details.append(FaultDetail(result=r, description=descriptions.get(r.id, ""),
                                   alerts=[{**alerts[a], "fired": fired_at.get(a, alerts[a].get("starts_at", "")),
                                            "shared": len(attribution.get(a, [])) > 1} for a in fa],
                                   findings=carrying[:12], mitigations=mitigations.get(r.id, [])))
    apps = list(run.get("apps") or [])
    for r in score.faults:
        if r.app and r.app not in apps and r.app != CLUSTER_LANE:
            apps.append(r.app)
    lanes = apps + ([CLUSTER_LANE] if any(_lane(r, apps) == CLUSTER_LANE for r in score.faults) else [])
    n_bins = max(1, int((end - start).total_seconds() // ALERT_BIN_SECONDS) + 1)
    bins = [[0, 0] for _ in range(n_bins)]
    for a, t in fired_at.items():
        i = int((parse_iso(t) - start).total_seconds() // ALERT_BIN_SECONDS)
        if 0 <= i < n_bins:
            bins[i][0 if attribution.get(a) else 1] += 1
    return ReportData(path=path, run=run, manifest=bundle.manifest or {}, verified=verified, verify_text=verify_text,
                      sealed=bundle.sealed, score=score, faults=details, lanes=lanes,
                      alert_bins=[(x, y) for x, y in bins], actions=actions, claims=claims, start=start, end=end,
                      end_reason=end_reason, steps=step_spans, builds=list(builds.values()))


def _mitigated_at(transitions: list[tuple[str, bool, Optional[str], list[str], list[str]]], t: str) -> bool:
    state = False
    for mt, mitigated, *_ in transitions:
        if mt > t:
            break
        state = mitigated
    return state


def _lane(r: FaultResult, apps: list[str]) -> str:
    return r.app if r.app in apps else CLUSTER_LANE


# --------------------------------------------------------------------------- rendering

_CSS = """
:root { --bg:#fbfbfd; --fg:#1d2433; --muted:#5c667a; --line:#dfe3ec; --card:#fff;
        --none:#c9ced8; --c:#f2b84b; --l:#7cb8e4; --r:#3aa76d; --bad:#d64545; --act:#4063d8; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); }
header { padding: 20px 28px 12px; border-bottom: 1px solid var(--line); background: var(--card); }
h1 { margin: 0 0 4px; font-size: 22px; }
h2 { font-size: 17px; margin: 26px 0 10px; }
main { padding: 0 28px 40px; }
.meta { color: var(--muted); }
.meta code { color: var(--fg); }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; }
.ok { background: #e3f4ea; color: #1f6b43; } .warn { background: #fdecec; color: #9b2222; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 150px; }
.card .v { font-size: 22px; font-weight: 650; } .card .k { color: var(--muted); font-size: 12px; }
.card.big .v { font-size: 34px; }
.stagebar { display: flex; height: 14px; width: 420px; max-width: 100%; border-radius: 7px; overflow: hidden;
            background: #eef0f5; margin: 6px 0; }
.stagebar span { display: block; height: 100%; }
table { border-collapse: collapse; width: 100%; background: var(--card); }
th, td { border-bottom: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; position: sticky; top: 0; background: var(--card); }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.st { font-weight: 700; } .st.y { color: var(--r); } .st.n { color: #aab1bf; }
tr.fault:hover, tr.fault.hl { background: #f1f5ff; }
details { margin: 2px 0; } summary { cursor: pointer; color: var(--act); }
.small { font-size: 12px; color: var(--muted); }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
svg .lane-label { font-weight: 600; }
svg .axis { stroke: var(--line); }
svg rect.fault { stroke: #fff; stroke-width: 0.5; cursor: pointer; }
svg rect.fault.hl { stroke: var(--fg); stroke-width: 1.5; }
.legend span { display: inline-flex; align-items: center; gap: 4px; margin-right: 14px; font-size: 12px; }
.legend i { display: inline-block; width: 12px; height: 12px; border-radius: 2px; }
.filters { margin: 8px 0; } .filters label { margin-right: 12px; font-size: 13px; }
#js-errors { color: var(--bad); white-space: pre-wrap; }
"""

_JS = """
(function () {
  var errors = document.getElementById('js-errors');
  window.addEventListener('error', function (e) {
    errors.textContent += 'error: ' + e.message + '\\n';
    document.body.setAttribute('data-js-errors', 'yes');
  });
  function highlight(id, on) {
    document.querySelectorAll('[data-fault="' + id + '"]').forEach(function (el) {
      el.classList.toggle('hl', on);
    });
  }
  document.querySelectorAll('[data-fault]').forEach(function (el) {
    var id = el.getAttribute('data-fault');
    el.addEventListener('mouseenter', function () { highlight(id, true); });
    el.addEventListener('mouseleave', function () { highlight(id, false); });
    if (el.tagName.toLowerCase() === 'rect') {
      el.addEventListener('click', function () {
        var row = document.getElementById('fault-' + id);
        if (row) { row.scrollIntoView({block: 'center'}); var d = row.querySelector('details'); if (d) d.open = true; }
      });
    }
  });
  var filters = document.querySelectorAll('#fault-filters input');
  function applyFilters() {
    var show = {};
    filters.forEach(function (f) { show[f.value] = f.checked; });
    var shown = 0;
    document.querySelectorAll('#fault-table tbody tr.fault').forEach(function (tr) {
      var visible = show[tr.getAttribute('data-stage')] !== false;
      tr.style.display = visible ? '' : 'none';
      if (visible) { shown += 1; }
    });
    document.getElementById('fault-count').textContent = String(shown);
  }
  filters.forEach(function (f) { f.addEventListener('change', applyFilters); });
  applyFilters();
  document.body.setAttribute('data-ready', 'yes');
})();
"""

_STAGE_COLOURS = {"repaired": "var(--r)", "localized": "var(--l)", "correlated": "var(--c)", "none": "var(--none)"}


def _stage(r: FaultResult) -> str:
    return "repaired" if r.repaired else "localized" if r.localized else "correlated" if r.correlated else "none"


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _dur(seconds: Optional[float]) -> str:
    if seconds is None:
        return "–"
    s = int(round(seconds))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def _offset(t: str, start: datetime) -> str:
    s = int((parse_iso(t) - start).total_seconds())
    h, rem = divmod(abs(s), 3600)
    return f"{'-' if s < 0 else '+'}{h}:{rem // 60:02d}:{rem % 60:02d}"


def render(data: ReportData) -> str:
    """The page as one string of HTML."""
    run = data.run
    title = f"{run.get('scenario', 'marathon')} · seed {run.get('seed', '?')} · {run.get('agent', '?')}"
    integrity = ('<span class="badge ok" id="integrity" data-ok="yes">verified</span>' if data.verified else
                 '<span class="badge warn" id="integrity" data-ok="no">does not verify</span>')
    state = "sealed" if data.sealed else "unsealed (partial run)"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<meta name=\"generator\" content=\"pytest-sremarathon " + _e(__version__) + "\">",
        f"<title>Marathon report — {_e(title)}</title>",
        f"<style>{_CSS}</style></head>",
        '<body data-ready="no">',
        "<header>",
        f'<h1 id="title">Marathon report: {_e(title)}</h1>',
        f'<div class="meta">run <code id="run-id">{_e(data.manifest.get("run_id") or "")}</code> · '
        f'{state} {integrity} · backend {_e(run.get("backend", ""))} · '
        f'{_e(run.get("start", ""))} → {_e(run.get("end", ""))} (virtual)'
        + (f" · ended: {_e(data.end_reason)}" if data.end_reason else "") + "</div>",
        f'<div class="meta small">bundle <code>{_e(data.path)}</code> · scenario digest '
        f'<code>{_e(run.get("scenario_digest", ""))}</code></div>',
        "</header><main>",
        _score_section(data),
        _timeline_section(data),
        _faults_section(data),
        f'<h2>Integrity</h2><p class="small" id="verify-text">{_e(data.verify_text)}</p>',
        '<div id="js-errors"></div>',
        f'<p class="small">Generated by pytest-sremarathon {_e(__version__)} from the bundle alone; '
        "this page is self-contained.</p>",
        "</main>",
        f"<script>{_JS}</script>",
        "</body></html>",
    ]
    return "\n".join(parts)


def _score_section(data: ReportData) -> str:
    s = data.score
    n = len(s.faults) or 1
    w = s.weights or WEIGHTS
    pts = {"correlation": w["correlation"] * s.correlated / n,
           "localization": w["localization"] * s.localization_credit / n,
           "repair": w["repair"] * s.repaired / n}
    bar = "".join(f'<span style="width:{v:.3f}%;background:{c}" title="{k}: {v:.1f} points"></span>'
                  for (k, v), c in zip(pts.items(), ("var(--c)", "var(--l)", "var(--r)")))
    frr = "n/a" if s.false_resolution_rate is None else f"{100 * s.false_resolution_rate:.1f}%"
    steps = dict(s.steps)
    total_steps = steps.pop("total", 0)
    cards = [
        ("score", f"{s.score:.1f}", "Marathon-Score / 100", True),
        ("correlated", f"{s.correlated}/{len(s.faults)}", f"correlated (C) · {pts['correlation']:.1f} pts", False),
        ("localized", f"{s.localized}/{len(s.faults)}", f"localized (L), credit {s.localization_credit:.1f} · "
                                                        f"{pts['localization']:.1f} pts", False),
        ("repaired", f"{s.repaired}/{len(s.faults)}", f"repaired (R) · {pts['repair']:.1f} pts", False),
        ("gap", f"{s.declared_done_gap:+.1f}", f"declared-done gap (claimed {s.claimed_share:.0f}% − "
                                                f"repaired {s.repaired_share:.0f}%)", False),
        ("frr", frr, f"false-resolution rate ({s.false_claims} of {s.claims} claims; "
                     f"{s.unmatched_claims} unmatched)", False),
        ("denials", str(s.policy_denials), "policy denials", False),
        ("collateral", f"{s.collateral_actions}/{s.agent_actions}", "collateral / allowed agent actions", False),
        ("collateral-items", str(sum(len(v) for v in s.collateral.values())),
         "collateral: " + ", ".join(f"{len(s.collateral.get(k, []))} {label}" for k, label in COLLATERAL_LABELS.items()),
         False),
        ("alerts", str(s.alerts.get("total", 0)), f"alerts ({s.alerts.get('attributed', 0)} attributed, "
                                                  f"noise {100 * s.alerts.get('noise_share', 0.0):.0f}%)", False),
        ("steps", str(total_steps), "agent steps (" + ", ".join(f"{k} {v}" for k, v in steps.items()) + ")", False),
        ("think-time", s.think_time, "think time" + (
            f" (steps took {_dur(s.step_time.get('mean_seconds'))} on average, at most "
            f"{_dur(s.step_time.get('max_seconds'))}; {int(s.step_time.get('overruns', 0))} outlasted the cadence)"
            if s.step_time else ""), False),
        ("builds", "instant" if not (s.builds and s.builds.get("seconds")) else
         ", ".join(f"{a} {_dur(x)}" for a, x in sorted(s.builds["seconds"].items())),
         "build time per app (each build jitters around it)" if s.builds else "builds: deployed at once", False),
    ]
    html_cards = "".join(
        f'<div class="card{" big" if big else ""}" id="metric-{key}" data-value="{_e(value)}">'
        f'<div class="v">{_e(value)}</div><div class="k">{_e(label)}</div></div>'
        for key, value, label, big in cards)
    formula = (f"score<sub>f</sub> = {w['correlation']}·C + {w['localization']}·C·credit<sub>L</sub> + "
               f"{w['repair']}·C·L·R; Marathon-Score = mean over faults")
    rules = (f"scoring rules version {s.scoring_version}" + (
        f": localization credit 1/k for k candidates named; a repair needs credit ≥ {REPAIR_MIN_CREDIT:g} and "
        "a causal link from an agent action" if s.scoring_version >= 2 else "") + "".join(f"; {n}" for n in s.notes))
    partial = "" if s.complete else f'<p class="small">Partial: scored up to {_e(s.window_end)}.</p>'
    return (f'<section id="score"><h2>Score</h2><div class="cards">{html_cards}</div>'
            f'<div class="stagebar" id="stage-bar" title="points by stage">{bar}</div>'
            f'<p class="small" id="weights">weights: correlation {w["correlation"]}, localization '
            f'{w["localization"]}, repair {w["repair"]} — {formula}. Side metrics are reported, never '
            f'folded into the score (see SCORING.md).</p><p class="small" id="scoring-rules" '
            f'data-version="{s.scoring_version}">{_e(rules)}</p>{partial}{_collateral_section(s)}</section>')


def _collateral_section(s: MarathonScore) -> str:
    """What the agent disturbed outside every fault, item by item (never in the score)."""
    parts = []
    for key, label in COLLATERAL_LABELS.items():
        items = s.collateral.get(key, [])
        rows = "".join(f"<li>{_e(x.get('t', ''))}: {_e(x.get('action', ''))} "
                       f"{_e(x.get('change') and 'change:' + x['change'] or x.get('object') or x.get('target') or '')}"
                       f"</li>" for x in items[:50])
        more = f"<li>… and {len(items) - 50} more</li>" if len(items) > 50 else ""
        parts.append(f'<details id="collateral-{key.replace("_", "-")}" data-count="{len(items)}"><summary>'
                     f'{len(items)} {_e(label)}</summary><ul>{rows or "<li>none</li>"}{more}</ul></details>')
    return f'<div id="collateral"><h3>Collateral</h3>{"".join(parts)}</div>'



def _pack(faults: list[FaultDetail]) -> dict[str, int]:
    """Sub-row of every fault inside its lane, so that overlapping windows do not hide each other."""
    rows: dict[str, int] = {}
    ends: list[str] = []
    for f in sorted(faults, key=lambda f: (f.result.start, f.result.id)):
        for i, end in enumerate(ends):
            if end <= f.result.start:
                ends[i] = f.result.end
                rows[f.result.id] = i
                break
        else:
            ends.append(f.result.end)
            rows[f.result.id] = len(ends) - 1
    return rows


def _timeline_section(data: ReportData) -> str:
    span = max((data.end - data.start).total_seconds(), 1.0)
    left, width = 120, 1080
    row_h, lane_gap = 16, 10

    def x(t: str) -> float:
        return left + width * min(max((parse_iso(t) - data.start).total_seconds() / span, 0.0), 1.0)

    out: list[str] = []
    y = 24
    # hour ticks
    hours = int(span // 3600)
    step = 1 if hours <= 16 else 2 if hours <= 32 else 6
    ticks = []
    for h in range(0, hours + 1, step):
        tx = left + width * (h * 3600 / span)
        ticks.append(f'<line class="axis" x1="{tx:.1f}" y1="14" x2="{tx:.1f}" y2="%BOTTOM%"/>'
                     f'<text x="{tx:.1f}" y="11" text-anchor="middle">+{h}h</text>')
    for seg in data.run.get("segments") or []:
        sx = x(seg["start"])
        ticks.append(f'<line x1="{sx:.1f}" y1="14" x2="{sx:.1f}" y2="%BOTTOM%" stroke="#b9c0cf" '
                     f'stroke-dasharray="2,3"><title>{_e(seg["name"])}</title></line>')
    # fault lanes
    by_lane: dict[str, list[FaultDetail]] = {lane: [] for lane in data.lanes}
    for f in data.faults:
        by_lane.setdefault(_lane(f.result, data.lanes), []).append(f)
    for lane in data.lanes:
        faults = by_lane.get(lane, [])
        rows = _pack(faults)
        n_rows = max(rows.values(), default=0) + 1
        lane_h = n_rows * row_h
        out.append(f'<g class="lane" id="lane-{_e(lane)}" data-lane="{_e(lane)}">')
        out.append(f'<rect x="{left}" y="{y}" width="{width}" height="{lane_h}" fill="#f4f6fa"/>')
        out.append(f'<text class="lane-label" x="{left - 8}" y="{y + lane_h / 2 + 4:.1f}" text-anchor="end">'
                   f'{_e(lane)}</text>')
        for f in faults:
            r = f.result
            fy = y + rows[r.id] * row_h + 2
            x0, x1 = x(r.start), x(r.end)
            stage = _stage(r)
            tip = (f"{r.id} {r.kind} — {r.component}" + (f" (change:{r.change})" if r.change else "") +
                   f"\n{_offset(r.start, data.start)} … {_offset(r.end, data.start)}" +
                   f"\nC {'yes' if r.correlated else 'no'} · L {'yes' if r.localized else 'no'} · "
                   f"R {'yes' if r.repaired else 'no'} · {r.points:g} pts")
            out.append(f'<rect class="fault" data-fault="{_e(r.id)}" data-stage="{stage}" x="{x0:.1f}" '
                       f'y="{fy}" width="{max(x1 - x0, 2):.1f}" height="{row_h - 4}" rx="2" '
                       f'fill="{_STAGE_COLOURS[stage]}"><title>{_e(tip)}</title></rect>')
            if x1 - x0 > 26:
                out.append(f'<text x="{x0 + 3:.1f}" y="{fy + row_h - 7}" style="font-size:9px" '
                           f'pointer-events="none">{_e(r.id)}</text>')
            for label, secs in (("C", r.t_correlate), ("L", r.t_localize), ("R", r.t_repair)):
                if secs is None:
                    continue
                mx = x0 + width * secs / span
                out.append(f'<g class="stage-mark" data-fault="{_e(r.id)}" data-mark="{label}">'
                           f'<line x1="{mx:.1f}" y1="{fy - 1}" x2="{mx:.1f}" y2="{fy + row_h - 3}" '
                           f'stroke="#1d2433" stroke-width="1.2"/>'
                           f'<text x="{mx + 1.5:.1f}" y="{fy + 6}" style="font-size:8px;font-weight:700">{label}'
                           f'</text><title>{_e(r.id)}: {label} after {_dur(secs)}</title></g>')
        out.append("</g>")
        y += lane_h + lane_gap
    # the agent's steps, as the virtual time each took (frozen: a mark at its time)
    out.append(f'<g id="agent-steps"><text class="lane-label" x="{left - 8}" y="{y + 11}" text-anchor="end">'
               f'steps</text><rect x="{left}" y="{y}" width="{width}" height="14" fill="#f4f6fa"/>')
    for st in data.steps:
        sx0, sx1 = x(st.started), x(st.ended)
        tip = (f"step {st.step} ({st.outcome}): {st.started} → {st.ended}, {_dur(st.virtual_seconds)} virtual"
               + (f", {st.requests} request(s)" if st.requests is not None else "")
               + (f"; overran the cadence by {_dur(st.overrun_seconds)}" if st.overrun_seconds else ""))
        colour = "var(--bad)" if st.overrun_seconds else ("#8a94a8" if st.outcome == "ok" else "#d98b2b")
        out.append(f'<rect class="step-span" data-step="{st.step}" data-seconds="{st.virtual_seconds:g}" '
                   f'data-overrun="{st.overrun_seconds:g}" x="{sx0:.1f}" y="{y + 2}" width="{max(sx1 - sx0, 1.2):.1f}" '
                   f'height="10" fill="{colour}"><title>{_e(tip)}</title></rect>')
    out.append("</g>")
    y += 14 + lane_gap
    # the pipeline's builds, one row per app: building (light), then rolling out (dark)
    build_apps = sorted({b.app for b in data.builds})
    if build_apps:
        bh = len(build_apps) * 12
        out.append(f'<g id="builds"><rect x="{left}" y="{y}" width="{width}" height="{bh}" fill="#f4f6fa"/>')
        for i, app in enumerate(build_apps):
            by = y + i * 12
            out.append(f'<text class="lane-label" x="{left - 8}" y="{by + 10}" text-anchor="end">'
                       f'builds {_e(app)}</text>')
            for b in (b for b in data.builds if b.app == app):
                agent = b.actor == "agent"
                end = b.ended or data.run.get("end") or b.queued
                parts = [("building", b.started, b.rollout or end), ("deploying", b.rollout, end)]
                for phase, t0, t1 in parts:
                    if not t0 or not t1:
                        continue
                    bx0, bx1 = x(t0), x(t1)
                    colour = ("#3d7be0" if agent else "#8a94a8") if phase == "building" else \
                        ("#1f4f99" if agent else "#5b6376")
                    tip = (f"{b.id} ({b.actor}{' ' + b.action if b.action else ''}) {phase} {t0} → {t1}; "
                           f"{b.state}")
                    out.append(f'<rect class="build-span" data-build="{_e(b.id)}" data-actor="{_e(b.actor)}" '
                               f'data-phase="{phase}" data-state="{_e(b.state)}" x="{bx0:.1f}" y="{by + 2}" '
                               f'width="{max(bx1 - bx0, 1.0):.1f}" height="8" fill="{colour}">'
                               f'<title>{_e(tip)}</title></rect>')
        out.append("</g>")
        y += bh + lane_gap
    # alert volume
    vol_h = 46
    peak = max((a + b for a, b in data.alert_bins), default=0) or 1
    bw = width * 600 / span
    out.append(f'<g id="alert-volume"><text class="lane-label" x="{left - 8}" y="{y + vol_h / 2 + 4}" '
               f'text-anchor="end">alerts</text>')
    out.append(f'<rect x="{left}" y="{y}" width="{width}" height="{vol_h}" fill="#f4f6fa"/>')
    for i, (attributed, noise) in enumerate(data.alert_bins):
        if not attributed and not noise:
            continue
        bx = left + i * bw
        h_attr = vol_h * attributed / peak
        h_noise = vol_h * noise / peak
        out.append(f'<rect class="alert-bin" data-attributed="{attributed}" data-noise="{noise}" '
                   f'x="{bx:.1f}" y="{y + vol_h - h_attr - h_noise:.1f}" width="{max(bw - 1, 1):.1f}" '
                   f'height="{h_noise:.1f}" fill="#b9c0cf"><title>{noise} noise alert(s)</title></rect>')
        out.append(f'<rect class="alert-bin-attr" x="{bx:.1f}" y="{y + vol_h - h_attr:.1f}" '
                   f'width="{max(bw - 1, 1):.1f}" height="{h_attr:.1f}" fill="var(--bad)">'
                   f'<title>{attributed} fault alert(s)</title></rect>')
    out.append("</g>")
    y += vol_h + lane_gap
    # actions and claims
    act_h = 30
    out.append(f'<g id="agent-actions"><text class="lane-label" x="{left - 8}" y="{y + 12}" text-anchor="end">'
               f'actions</text><text class="lane-label" x="{left - 8}" y="{y + 26}" text-anchor="end">claims</text>')
    out.append(f'<rect x="{left}" y="{y}" width="{width}" height="{act_h}" fill="#f4f6fa"/>')
    for a in data.actions:
        ax = x(a.t)
        colour = "var(--act)" if a.allowed else "var(--bad)"
        tip = f"{a.t} {a.verb} {a.target} — " + ("allowed" if a.allowed else f"DENIED by {a.rule}") + f" ({a.status})"
        if a.allowed:
            out.append(f'<line class="action" data-allowed="yes" x1="{ax:.1f}" y1="{y + 3}" x2="{ax:.1f}" '
                       f'y2="{y + 15}" stroke="{colour}" stroke-width="1.5"><title>{_e(tip)}</title></line>')
        else:
            out.append(f'<path class="action" data-allowed="no" d="M{ax - 4:.1f},{y + 3} l8,8 m0,-8 l-8,8" '
                       f'stroke="{colour}" stroke-width="2"><title>{_e(tip)}</title></path>')
    for c in data.claims:
        cx = x(c.t)
        colour = "var(--bad)" if c.false else "var(--r)"
        out.append(f'<circle class="claim" data-false="{"yes" if c.false else "no"}" cx="{cx:.1f}" cy="{y + 23}" '
                   f'r="3" fill="{colour}"><title>{_e(c.t)} claimed {_e(c.incident)} resolved'
                   f'{" (FALSE: the fault was active and unmitigated)" if c.false else ""}</title></circle>')
    out.append("</g>")
    y += act_h + 6
    bottom = y
    svg = (f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {left + width + 20} {bottom}" '
           f'width="100%" role="img" aria-label="run timeline">'
           + "".join(t.replace("%BOTTOM%", str(bottom - 4)) for t in ticks) + "".join(out) + "</svg>")
    legend = ('<div class="legend" id="timeline-legend">'
              '<span><i style="background:var(--r)"></i>repaired (C+L+R)</span>'
              '<span><i style="background:var(--l)"></i>localized (C+L)</span>'
              '<span><i style="background:var(--c)"></i>correlated (C)</span>'
              '<span><i style="background:var(--none)"></i>missed</span>'
              '<span><i style="background:var(--bad)"></i>fault alerts</span>'
              '<span><i style="background:#b9c0cf"></i>noise alerts</span>'
              '<span><i style="background:var(--act)"></i>allowed action (× denied)</span>'
              '<span><i style="background:var(--r);border-radius:6px"></i>claim (red: false)</span>'
              '<span><i style="background:#8a94a8"></i>agent step (red: outlasted the cadence)</span>'
              '<span><i style="background:#3d7be0"></i>agent build (dark: rolling out)</span>'
              "</div>")
    return (f'<section id="timeline-section"><h2>Timeline</h2>{legend}{svg}'
            f'<p class="small">Bars are faults\' active windows (hover for details, click to open the fault '
            f'below); the marks C, L and R show when each stage was reached. Alerts are new firings per '
            f'{ALERT_BIN_SECONDS // 60} virtual minutes.</p></section>')


def _faults_section(data: ReportData) -> str:
    head = ("fault", "kind", "app", "root cause", "window", "C", "L", "R", "pts", "t C", "t L", "t R", "claim", "")
    rows = []
    counts = Counter(_stage(f.result) for f in data.faults)
    for f in data.faults:
        r = f.result
        stage = _stage(r)
        cause = _e(r.component) + (f"<br><code>change:{_e(r.change)}</code>" if r.change else "")
        window = f"{_offset(r.start, data.start)} … {_offset(r.end, data.start)}" + (" *" if r.still_active else "")
        claim = "FALSE" if r.false_claim else ("yes" if r.claimed else "")

        def mark(ok: bool) -> str:
            return f'<span class="st {"y" if ok else "n"}">{"✓" if ok else "·"}</span>'

        alerts = "".join(
            f"<li>{_e(a['id'])} {_e(a.get('name'))} {_e(a.get('labels', {}).get('service') or a.get('labels', {}).get('node') or '')}"
            f" at {_e(_offset(a['fired'], data.start))}{' (shared with another fault)' if a['shared'] else ''}</li>"
            for a in f.alerts) or "<li>none: no alert was attributed to this fault</li>"
        findings = "".join(
            f"<li>step {_e(x['step'])} ({_e(_offset(x['t'], data.start))}): incident <code>{_e(x['incident'])}</code>"
            f" → {_e(x['component'] or '–')}{', ' + _e(x['cause']) if x['cause'] else ''}</li>"
            for x in f.findings) or "<li>none</li>"
        mits = "".join(f"<li>{_e(_offset(t, data.start))}: {'mitigated' if m else 'no longer mitigated'}"
                       f"{' by ' + _e(by) if by else ''}"
                       + (f" — attributed to <code>{'</code>, <code>'.join(_e(a) for a in acts)}</code>"
                          f" (set {_e(', '.join(ev))})" if acts else "") + "</li>"
                       for t, m, by, acts, ev in f.mitigations) or "<li>never mitigated</li>"
        more = (f"<details><summary>details</summary><p>{_e(f.description)}</p>"
                f"<div class=\"small\">attributed alerts</div><ul>{alerts}</ul>"
                f"<div class=\"small\">findings carrying its alerts while it was active</div><ul>{findings}</ul>"
                f"<div class=\"small\">mitigation</div><ul>{mits}</ul></details>")
        rows.append(
            f'<tr class="fault" id="fault-{_e(r.id)}" data-fault="{_e(r.id)}" data-stage="{stage}" '
            f'data-points="{r.points:g}"><td>{_e(r.id)}</td><td>{_e(r.kind)}</td><td>{_e(r.app)}</td>'
            f"<td>{cause}</td><td>{_e(window)}</td><td>{mark(r.correlated)}</td>"
            f'<td data-credit="{r.localization_credit:g}" data-candidates="{r.candidates}">{mark(r.localized)}'
            f'{" " + fraction(r.localization_credit) + " of " + str(r.candidates) if r.localized and r.candidates > 1 else ""}</td>'
            f'<td>{mark(r.repaired)}</td><td class="n">{round(r.points, 1):g}</td><td class="n">{_dur(r.t_correlate)}</td>'
            f'<td class="n">{_dur(r.t_localize)}</td><td class="n">{_dur(r.t_repair)}</td><td>{claim}</td>'
            f"<td>{more}</td></tr>")
    filters = "".join(
        f'<label><input type="checkbox" value="{k}" checked> {label} ({counts.get(k, 0)})</label>'
        for k, label in (("repaired", "repaired"), ("localized", "localized"), ("correlated", "correlated"),
                         ("none", "missed")))
    table = (f'<table id="fault-table"><thead><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr></thead>'
             f'<tbody>{"".join(rows) or "<tr><td colspan=14>no faults in the scored window</td></tr>"}</tbody></table>')
    return (f'<section id="faults"><h2>Faults (<span id="fault-count">{len(data.faults)}</span> shown of '
            f'{len(data.faults)})</h2><div class="filters" id="fault-filters">{filters}</div>{table}'
            f'<p class="small">Times are from the fault\'s start; a window marked * was still open when '
            f'scoring stopped.</p></section>')


# --------------------------------------------------------------------------- entry points


def write_report(bundle: Union[str, Path], out: Union[str, Path]) -> Path:
    """Render the report of ``bundle`` into ``out``; returns the written path."""
    out = Path(out)
    page = render(collect(bundle))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _default_out(bundle: Path) -> Path:
    name = bundle.name
    for suffix in (".tar.gz", ".tgz"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return Path(name + ".html")


def add_parser(subparsers: Any) -> None:
    """Register ``report`` on the ``sremarathon`` sub-commands."""
    p = subparsers.add_parser(
        "report", help="write a self-contained HTML report of a run bundle",
        description="Render one self-contained HTML page (timeline, score breakdown, per-fault details) "
                    "from a run bundle alone. The bundle is verified and the result shown on the page.")
    p.add_argument("bundle", metavar="BUNDLE", type=Path, help="<run>.tar.gz or a run directory")
    p.add_argument("-o", "--output", type=Path, metavar="FILE",
                   help="where to write the page (default: <run>.html in the current directory)")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    out = args.output or _default_out(args.bundle)
    try:
        path = write_report(args.bundle, out)
    except (BundleError, ValueError) as exc:
        print(f"sremarathon report: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


def main(argv: Optional[list[str]] = None) -> int:  # ``python -m pytest_sremarathon.report``
    parser = argparse.ArgumentParser(prog="sremarathon-report")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(["report", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
