"""Standard cron schedules as a CronJob's ``spec.schedule`` takes them (the robfig/cron
``ParseStandard`` grammar the real controller uses): five fields — minute, hour, day of month,
month, day of week — each ``*``, a value, a range ``a-b``, a list ``a,b``, a step ``*/n`` or
``a-b/n``, month and weekday names; the descriptors ``@yearly`` … ``@hourly``; and the
time zone (``spec.timeZone``, an IANA name) the schedule is read in."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Optional
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 6))
_NAMES = {3: {m: i + 1 for i, m in enumerate(("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct",
                                               "nov", "dec"))},
          4: {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}}
_DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}
#: How far ahead a schedule is searched (a 30 February never comes).
_HORIZON = timedelta(days=366 * 5)


class CronError(ValueError):
    """An unparseable schedule, with robfig/cron's wording."""


@dataclass(frozen=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool  # day of month was "*" (cron ORs the two day fields unless one is "*")
    any_weekday: bool

    def _day_ok(self, t: datetime) -> bool:
        dom, dow = t.day in self.days, (t.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow

    def next_after(self, t: datetime, tz: tzinfo = timezone.utc) -> Optional[datetime]:
        """The first scheduled time strictly after ``t`` (UTC), read in ``tz``; None within the horizon."""
        local = t.astimezone(tz).replace(second=0, microsecond=0) + timedelta(minutes=1)
        end = local + _HORIZON
        while local < end:
            if local.month not in self.months:
                local = (local.replace(day=1, hour=0, minute=0) + timedelta(days=32)).replace(day=1)
                continue
            if not self._day_ok(local):
                local = local.replace(hour=0, minute=0) + timedelta(days=1)
                continue
            if local.hour not in self.hours:
                local = local.replace(minute=0) + timedelta(hours=1)
                continue
            if local.minute not in self.minutes:
                local += timedelta(minutes=1)
                continue
            return local.astimezone(timezone.utc)
        return None

    def last_at_or_before(self, start: datetime, now: datetime, tz: tzinfo = timezone.utc,
                          limit: int = 100) -> tuple[Optional[datetime], int]:
        """The latest scheduled time in (start, now] and how many there were (counted up to
        ``limit``, past which the real controller gives up counting missed starts)."""
        found, count, t = None, 0, start
        while count <= limit:
            nxt = self.next_after(t, tz)
            if nxt is None or nxt > now:
                break
            found, count, t = nxt, count + 1, nxt
        return found, count


def _value(text: str, index: int) -> int:
    names = _NAMES.get(index, {})
    low = text.lower()
    if low in names:
        return names[low]
    if not text.isdigit():
        raise CronError(f'failed to parse int from {text}: strconv.Atoi: parsing "{text}": invalid syntax')
    return int(text)


def _field(text: str, index: int) -> tuple[frozenset[int], bool]:
    name, lo, hi = _FIELDS[index]
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"failed to parse int from {step_text}: strconv.Atoi: parsing \"{step_text}\": "
                                "invalid syntax")
            step = int(step_text)
        if rng in ("*", "?"):
            first, last = lo, hi
        elif "-" in rng:
            a, _, b = rng.partition("-")
            first, last = _value(a, index), _value(b, index)
        else:
            first = _value(rng, index)
            last = hi if step_text else first
        if index == 4 and last == 7:  # Sunday may be written 7
            last = 7
        if first < lo or last > (7 if index == 4 else hi):
            raise CronError(f"end of range ({last}) above maximum ({hi}): {part}" if last > hi
                            else f"beginning of range ({first}) below minimum ({lo}): {part}")
        if first > last:
            raise CronError(f"beginning of range ({first}) beyond end of range ({last}): {part}")
        out.update(v % 7 if index == 4 else v for v in range(first, last + 1, step))
    return frozenset(out), text in ("*", "?")


@functools.lru_cache(maxsize=256)
def parse_schedule(text: str) -> Schedule:
    spec = text.strip()
    if spec.startswith(("TZ=", "CRON_TZ=")):
        raise CronError("cannot use TZ or CRON_TZ in schedule, use timeZone field instead")
    if spec.startswith("@"):
        if spec not in _DESCRIPTORS:
            raise CronError(f"unrecognized descriptor: {spec}")
        spec = _DESCRIPTORS[spec]
    parts = spec.split()
    if len(parts) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(parts)}: {text}")
    fields = [_field(p, i) for i, p in enumerate(parts)]
    return Schedule(fields[0][0], fields[1][0], fields[2][0], fields[3][0], fields[4][0], fields[2][1], fields[4][1])


@functools.lru_cache(maxsize=64)
def zone(name: Optional[str]) -> Optional[tzinfo]:
    """The time zone of ``spec.timeZone`` (UTC when unset); None if unknown."""
    if not name:
        return timezone.utc
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None
