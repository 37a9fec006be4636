"""The thresholds HeuristicSRE judges by (a subclass may set its own ``TUNING``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Tuning:
    error_ratio: float = 0.04
    """A service is failing when at least this share of its requests fail…"""
    latency_factor: float = 1.8
    """… or its p99 latency is this many times its healthy baseline (and 8 ms more)."""
    saturated: float = 0.7
    """CPU per ready pod, as a share of the pod's limit, at which a deployment runs hot."""
    verify_after: timedelta = timedelta(minutes=15)
    """A repair that has not helped by then was the wrong one (the next suspect is tried)."""
    max_reverts: int = 3
    """Reverts per incident within an hour."""
    healthy_steps_to_claim: int = 2
    """Steps a repaired failure must stay gone before the incident is claimed resolved."""
    absent_steps_to_close: int = 3
    """Steps an incident nothing was done for must stay undiagnosed before it is closed."""
    log_window: int = 600
    """Seconds of pod logs read per failing service."""
    change_horizon: timedelta = timedelta(hours=8)
    """Changes shipped longer than this before the symptoms are no suspects."""
