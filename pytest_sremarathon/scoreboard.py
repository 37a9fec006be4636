"""The scoreboard: what the session's marathons scored, built on the controller from test
reports alone (``report.sremarathon``), never from a worker's marathons, so that ``pytest -n``
prints the same summary, gates the same way and writes the same baseline as a plain run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import pytest


def report_outcome(report: pytest.TestReport) -> str:
    """The outcome a segment counts as: ``xfailed``/``xpassed`` for an expected failure."""
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return report.outcome


@dataclass
class MarathonRow:
    """One marathon of the session (a scenario file and a seed), as its reports told it."""

    id: str
    run: str
    segments_total: int = 0
    bundle: str = ""
    scenario_digest: str = ""
    agent: str = ""
    final: Optional[dict[str, Any]] = None
    last_score: Optional[float] = None
    outcomes: dict[str, str] = field(default_factory=dict)  # segment -> outcome
    faults: dict[str, dict[str, Any]] = field(default_factory=dict)  # fault id -> row (+ segment, verdict)

    @property
    def score(self) -> Optional[float]:
        return self.final["score"] if self.final else self.last_score

    @property
    def reason(self) -> str:
        return self.final.get("reason", "completed") if self.final else "not sealed"

    @property
    def complete(self) -> bool:
        return self.reason == "completed"


@dataclass
class Scoreboard:
    """The session's marathons by id; fed one report payload at a time (:meth:`add`)."""

    rows: dict[str, MarathonRow] = field(default_factory=dict)

    def add(self, data: dict[str, Any], outcome: str) -> None:
        row = self.rows.get(data["marathon"])
        if row is None:
            row = self.rows[data["marathon"]] = MarathonRow(data["marathon"], data["run"])
        row.bundle = data.get("bundle") or row.bundle
        row.scenario_digest = data.get("scenario_digest") or row.scenario_digest
        row.agent = data.get("agent") or row.agent
        if data.get("final"):
            row.final = data["final"]
        segment = data.get("segment")
        if segment:
            row.segments_total = data.get("segments") or row.segments_total
            row.outcomes[segment] = outcome
            if data.get("score_so_far") is not None:
                row.last_score = data["score_so_far"]
            for f in data.get("faults") or []:
                row.faults[f["id"]] = {**f, "segment": segment}
        else:  # a sealed run's result: every fault, for what no segment item reported
            for f in data.get("faults") or []:
                row.faults.setdefault(f["id"], f)

    def table(self) -> list[str]:
        """The terminal summary's table, one line per marathon (sorted by id)."""
        head = ("marathon", "score", "segments", "faults", "C", "L", "R", "false-claims", "done-gap", "bundle")
        lines = []
        for key in sorted(self.rows):
            r = self.rows[key]
            f = r.final
            faults = list(r.faults.values())
            c, l_, rr = (f["correlated"], f["localized"], f["repaired"]) if f else (
                sum(x["correlated"] for x in faults), sum(x["localized"] for x in faults),
                sum(x["repaired"] for x in faults))
            n = f["faults"] if f else len(faults)
            fc = f.get("false_claims", 0) if f else sum(x["false_claim"] for x in faults)
            gap = f"{f['declared_done_gap']:+.1f}" if f else "n/a"
            score = f"{r.score:.1f}" if r.score is not None else "-"
            if not r.complete:
                score += f" ({r.reason})"
            ok = sum(o in ("passed", "xfailed") for o in r.outcomes.values())
            segs = f"{ok}/{r.segments_total or len(r.outcomes)} ok" if r.outcomes else "-"
            lines.append((r.id, score, segs, str(n), str(c), str(l_), str(rr), str(fc), gap, r.bundle))
        widths = [max(len(h), *(len(x[i]) for x in lines)) for i, h in enumerate(head)]
        right = {1, 3, 4, 5, 6, 7, 8}

        def fmt(cells: tuple[str, ...]) -> str:
            return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))

        return [fmt(head).rstrip()] + [fmt(x).rstrip() for x in lines]

    def baseline_lines(self, path: str) -> list[str]:
        """Per marathon, how its faults compare with the baseline file at ``path``."""
        out = []
        for key in sorted(self.rows):
            r = self.rows[key]
            verdicts: dict[str, list[str]] = {}
            for f in r.faults.values():
                verdicts.setdefault(f.get("verdict") or "", []).append(f["id"])
            parts = []
            for verdict, label in (("expected", "expected failure(s) (xfail)"), ("fixed", "improvement(s) (XPASS)"),
                                   ("regression", "regression(s)"), ("worse", "got worse"),
                                   ("new", "new failing fault(s)")):
                ids = sorted(verdicts.get(verdict, []))
                if ids:
                    parts.append(f"{len(ids)} {label} [{', '.join(ids)}]")
            judged = any(f.get("verdict") for f in r.faults.values())
            state = "; ".join(parts) if parts else "as in the baseline" if judged else "no segment judged"
            out.append(f"baseline {path}: {r.run}: {state}")
        return out
