"""What an agent submits through ``report_finding`` and ``claim_resolved`` during a step.

The host opens a step (:meth:`StepSubmissions.begin`) before the agent runs and closes it
(:meth:`StepSubmissions.end`) when the step ends: what was submitted in between is the step's
:class:`Report` (merged with whatever the agent returned itself, :func:`merge`). Outside a step
nothing is taken, so a late call from an agent that overran cannot land in the next step.
"""

from __future__ import annotations

import threading
from typing import Optional

from ..agent.protocol import Claim, Finding, ObservationWire, Report


class NoStep(Exception):
    """A submission arrived while no step runs."""


class StepSubmissions:
    """The open step's submissions; thread-safe (tool calls run on the server's threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._step: Optional[int] = None
        self._obs: Optional[ObservationWire] = None
        self._findings: dict[str, Finding] = {}
        self._claims: dict[str, Claim] = {}

    @property
    def observation(self) -> Optional[ObservationWire]:
        """The observation of the open step, or of the last one (tools read alerts from it)."""
        return self._obs

    @property
    def step(self) -> Optional[int]:
        return self._step

    def begin(self, step: int, obs: ObservationWire) -> None:
        with self._lock:
            self._step, self._obs = step, obs
            self._findings, self._claims = {}, {}

    def end(self) -> Report:
        """Close the step and hand over what it submitted (findings in submission order; a
        finding submitted again for the same incident replaces the earlier one)."""
        with self._lock:
            report = Report(findings=list(self._findings.values()), claims=list(self._claims.values()))
            self._step, self._findings, self._claims = None, {}, {}
            return report

    def finding(self, finding: Finding) -> int:
        with self._lock:
            if self._step is None:
                raise NoStep("no step is running: findings are taken while the agent's step runs")
            self._findings.pop(finding.incident, None)
            self._findings[finding.incident] = finding
            return self._step

    def claim(self, incident: str) -> int:
        with self._lock:
            if self._step is None:
                raise NoStep("no step is running: claims are taken while the agent's step runs")
            self._claims[incident] = Claim(incident=incident)
            return self._step


def merge(returned: Optional[Report], submitted: Report) -> Report:
    """The step's report: what the agent returned, then what it submitted through the tools
    (a submitted finding replaces a returned one of the same incident; claims once each)."""
    if returned is None:
        return submitted
    if not submitted.findings and not submitted.claims:
        return returned
    replaced = {f.incident for f in submitted.findings}
    order = [f for f in returned.findings if f.incident not in replaced] + list(submitted.findings)
    claims = list({c.incident: c for c in [*returned.claims, *submitted.claims]}.values())
    return Report(findings=order, claims=claims, notes=returned.notes)
