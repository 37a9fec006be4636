"""The floor of the scoreboard: agents that repair nothing.

``NoopAgent`` says nothing at all; ``ClaimEverything`` claims every alert's incident resolved
the moment it fires, which makes the declared-done gap visible.
"""

from __future__ import annotations

from pytest_sremarathon.agent.protocol import Claim, Environment, Finding, Observation, Report

from .alerts import by_start, latest_alerts


class NoopAgent:
    """Does nothing and says nothing: the score every other agent must beat."""

    def setup(self, env: Environment) -> None:
        return None

    def step(self, obs: Observation) -> Report:
        return Report()


class ClaimEverything:
    """Claims every incident resolved the moment it appears, and does nothing else.

    Every new firing alert becomes its own incident (``alert:<id>``, a finding listing that one
    alert) and is claimed resolved in the same report. No component, no cause, no action: its
    Marathon-Score is what correlating single alerts is worth, while its *claims* cover nearly
    every fault — the difference is the declared-done gap the score reports next to itself.
    """

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def setup(self, env: Environment) -> None:
        return None

    def step(self, obs: Observation) -> Report:
        findings: list[Finding] = []
        claims: list[Claim] = []
        for alert in by_start(latest_alerts(obs)):
            if alert.id in self.seen:
                continue  # (an alert that fired and resolved between two steps counts too)
            self.seen.add(alert.id)
            key = f"alert:{alert.id}"
            findings.append(Finding(incident=key, alerts=[alert.id], confidence=0.1))
            claims.append(Claim(incident=key))
        notes = f"claimed {len(claims)} incident(s) resolved; nothing was done" if claims else ""
        return Report(findings=findings, claims=claims, notes=notes)
