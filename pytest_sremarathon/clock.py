"""Virtual time: the marathon's clock, advanced only by the marathon loop."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

EPOCH = datetime(2026, 1, 5, 0, 0, tzinfo=timezone.utc)  # a Monday, 00:00 UTC


@dataclass
class VirtualClock:
    now: datetime = EPOCH

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now = self.now + timedelta(seconds=seconds)
        return self.now


def iso(t: datetime) -> str:
    """Second-precision UTC ISO-8601, the only time spelling in records."""
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
