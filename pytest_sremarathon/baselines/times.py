"""Time as the baselines keep it: UTC, and whole seconds in their journals."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional


def utc(t: datetime) -> datetime:
    """``t`` with a time zone; a naive time is taken to be UTC."""
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def iso(t: datetime) -> str:
    """``2026-01-05T03:00:00Z``: UTC, whole seconds."""
    return utc(t).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Optional[str]) -> Optional[datetime]:
    """An ISO 8601 time (``Z`` or an offset) as an aware datetime; ``None`` for nothing or garbage."""
    if not value:
        return None
    try:
        return utc(datetime.fromisoformat(str(value).replace("Z", "+00:00")))
    except ValueError:
        return None


def whole_seconds(t: datetime) -> datetime:
    """``t`` as a journal stores it (``parse_time(iso(t))``).

    The agents remember times truncated to the second, so that a restarted process, which reads
    them back from the journal, reasons with exactly the times the old one had.
    """
    return utc(t).astimezone(timezone.utc).replace(microsecond=0)


def time_or_none(value: object) -> Optional[datetime]:
    """A journal field that holds a time or nothing."""
    return parse_time(value) if isinstance(value, str) else None


def iso_or_none(t: Optional[datetime]) -> Optional[str]:
    return None if t is None else iso(t)
