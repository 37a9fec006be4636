"""How long builds take, and the record of one build (issue 14).

A build's duration is drawn per app once per run from a lognormal in ln-minutes (the default
scenario fits CircleCI's State of Software Delivery figures: half of 11 M workflows finished in
under 4 minutes, three quarters under 11, 95% under 35), clipped to ``[low, high]``; every build
of the app then takes that duration times a small lognormal jitter, clipped again. Everything
is drawn from streams seeded by the run's seed and the app, in build order, so the same run
draws the same durations.

A :class:`Build` moves ``queued → building → deploying → deployed`` (or ``failed``, or
``superseded``: a queued build of the orchestrator's overtaken by a later one of the same app,
whose commit contains it, or a rollout replaced by the next deploy before it completed).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Optional

from ..clock import iso

Actor = Literal["agent", "orchestrator"]  # who asked: the agent, or the marathon itself
State = Literal["queued", "building", "deploying", "deployed", "failed", "superseded"]
ACTIVE: tuple[str, ...] = ("queued", "building", "deploying")


@dataclass
class Build:
    id: str
    app: str
    commit: str
    ref: str
    actor: Actor
    queued_at: datetime
    action: Optional[str] = None  # the agent's Action.id that asked for it
    state: State = "queued"
    started_at: Optional[datetime] = None
    finish_at: Optional[datetime] = None  # when the running build will be done (not shown)
    finished_at: Optional[datetime] = None
    rollout_started_at: Optional[datetime] = None
    completed_at: Optional[datetime] = None
    error: Optional[str] = None
    workloads: list[str] = field(default_factory=list)  # Deployments the deploy changed
    superseded_by: Optional[str] = None

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def public(self) -> dict[str, Any]:
        """What ``pipeline.status`` shows (never the planned finish)."""
        out: dict[str, Any] = {"id": self.id, "commit": self.commit[:12], "ref": self.ref, "actor": self.actor,
                               "state": self.state, "queued_at": iso(self.queued_at)}
        for key in ("started_at", "finished_at", "rollout_started_at", "completed_at"):
            value = getattr(self, key)
            if value is not None:
                out[key] = iso(value)
        if self.error:
            out["error"] = self.error
        if self.superseded_by:
            out["superseded_by"] = self.superseded_by
        if self.workloads:
            out["rolling_out"] = list(self.workloads)
        return out


class BuildTimes:
    """Build durations for a run (see the module docstring)."""

    def __init__(self, seed: int, apps: list[str], *, mu: float, sigma: float, low: float, high: float,
                 jitter: float) -> None:
        self.low, self.high, self.jitter = float(low), float(high), float(jitter)
        self.base: dict[str, float] = {}
        self._rng: dict[str, random.Random] = {}
        for app in sorted(apps):
            rng = random.Random(f"build:{seed}:{app}")
            self.base[app] = self._clip(60.0 * math.exp(rng.gauss(mu, sigma)))
            self._rng[app] = rng

    def _clip(self, seconds: float) -> float:
        return float(round(min(max(seconds, self.low), self.high)))

    def duration(self, app: str) -> timedelta:
        """The next build of ``app``: its app's duration with this build's jitter."""
        rng = self._rng.get(app)
        if rng is None:
            rng = self._rng[app] = random.Random(f"build:extra:{app}")
            self.base[app] = self._clip(240.0)
        return timedelta(seconds=self._clip(self.base[app] * math.exp(rng.gauss(0.0, self.jitter))))
