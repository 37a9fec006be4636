"""Silences, as Alertmanager keeps them: created and updated through ``POST /api/v2/silences``,
expired through ``DELETE /api/v2/silence/<id>``, active between ``startsAt`` and ``endsAt``.

The rules (and their error strings) follow Alertmanager's ``silence`` package and v2 handlers:
a silence must have a matcher that does not match the empty string; a POST with the id of a
live silence updates it in place when only what Alertmanager lets change changed (the end of an
active one, the times of a pending one), and otherwise replaces it with a new id; expired
silences stay listed for the retention period. Ids are UUIDs drawn from the caller's
``random.Random``, so a run's silence ids are deterministic.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Optional

from .matchers import EQUAL, NOT_EQUAL, NOT_REGEX, REGEX, Matcher, MatcherError, labels_match, valid_label_name
from .model import format_time, parse_time

PENDING, ACTIVE, EXPIRED = "pending", "active", "expired"
_STATE_ORDER = {ACTIVE: 1, PENDING: 2, EXPIRED: 3}


class ApiError(Exception):
    """A response other than 200: ``payload`` is the body Alertmanager sends (a JSON string for
    its own errors, ``{"code", "message"}`` for go-openapi's validation errors, None for none)."""

    def __init__(self, status: int, payload: Any) -> None:
        super().__init__(f"{status}: {payload}")
        self.status = status
        self.payload = payload


def _openapi_error(code: int, message: str) -> ApiError:
    """go-openapi's validation errors: codes of 600 and up are served as 422."""
    return ApiError(422 if code >= 600 else code, {"code": code, "message": message})


@dataclass(frozen=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: datetime
    ends_at: datetime
    updated_at: datetime
    created_by: str
    comment: str

    def state(self, now: datetime) -> str:
        if now < self.starts_at:
            return PENDING
        if now < self.ends_at:
            return ACTIVE
        return EXPIRED

    def mutes(self, labels: Mapping[str, str], now: datetime) -> bool:
        return self.state(now) == ACTIVE and labels_match(self.matchers, labels)

    def to_json(self, now: datetime) -> dict[str, Any]:
        """A ``gettableSilence``."""
        return {
            "id": self.id,
            "status": {"state": self.state(now)},
            "updatedAt": format_time(self.updated_at),
            "comment": self.comment,
            "createdBy": self.created_by,
            "endsAt": format_time(self.ends_at),
            "matchers": [{"isEqual": m.is_equal, "isRegex": m.is_regex, "name": m.name, "value": m.value}
                         for m in self.matchers],
            "startsAt": format_time(self.starts_at),
        }


@dataclass(frozen=True)
class PostedSilence:
    """A ``postableSilence`` that passed go-openapi's schema validation."""

    id: str
    matchers: tuple[tuple[str, str, bool, bool], ...]  # (name, value, isRegex, isEqual)
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str


def parse_postable(body: bytes) -> tuple[PostedSilence, Any]:
    """The POSTed silence and its parsed JSON, or the ApiError go-openapi answers."""
    if not body.strip():
        raise _openapi_error(602, "silence in body is required")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise ApiError(400, {"code": 400, "message": f'parsing silence body from "" failed, because {exc}'}) from None
    if not isinstance(data, dict):
        raise ApiError(400, {"code": 400, "message": 'parsing silence body from "" failed, because json: cannot '
                                                     f"unmarshal {type(data).__name__} into Go value of type "
                                                     "models.PostableSilence"})

    def bad_type(name: str, kind: str) -> ApiError:
        return ApiError(400, {"code": 400, "message": 'parsing silence body from "" failed, because json: cannot '
                                                      f"unmarshal into Go struct field {name} of type {kind}"})

    # go-swagger validates the properties in name order and go-openapi serves the first error
    for name in ("comment", "createdBy", "endsAt", "matchers", "startsAt"):
        if data.get(name) is None:
            raise _openapi_error(602, f"{name} in body is required")
    for name in ("comment", "createdBy", "endsAt", "startsAt"):
        if not isinstance(data[name], str):
            raise bad_type(f"PostableSilence.{name}", "string")
    times = {}
    for name in ("startsAt", "endsAt"):
        try:
            times[name] = parse_time(data[name])
        except ValueError:
            raise ApiError(400, {"code": 400, "message": 'parsing silence body from "" failed, because parsing '
                                                         f'time "{data[name]}" as "2006-01-02T15:04:05Z07:00": '
                                                         "cannot parse"}) from None
    if not isinstance(data["matchers"], list):
        raise bad_type("PostableSilence.matchers", "models.Matchers")
    if not data["matchers"]:
        raise _openapi_error(612, "matchers in body should have at least 1 items")
    matchers = []
    for i, m in enumerate(data["matchers"]):
        if not isinstance(m, dict):
            raise bad_type("PostableSilence.matchers", "models.Matcher")
        for name in ("isRegex", "name", "value"):
            if m.get(name) is None:
                raise _openapi_error(602, f"matchers.{i}.{name} in body is required")
        if not isinstance(m["name"], str) or not isinstance(m["value"], str):
            raise bad_type("Matcher.name", "string")
        if not isinstance(m["isRegex"], bool) or not isinstance(m.get("isEqual", True), bool):
            raise bad_type("Matcher.isRegex", "bool")
        matchers.append((m["name"], m["value"], m["isRegex"], m.get("isEqual", True)))
    sid = data.get("id") or ""
    if not isinstance(sid, str):
        raise bad_type("PostableSilence.id", "string")
    return PostedSilence(sid, tuple(matchers), times["startsAt"], times["endsAt"], data["createdBy"],
                         data["comment"]), data


def _matchers(posted: PostedSilence) -> tuple[Matcher, ...]:
    """Alertmanager's ``validateSilence`` of the matchers (wrapped as ``invalid silence: …``)."""
    out = []
    for i, (name, value, is_regex, is_equal) in enumerate(posted.matchers):
        if not valid_label_name(name):
            raise ApiError(400, f"invalid silence: invalid label matcher {i}: invalid label name {json.dumps(name)}")
        op = (REGEX if is_equal else NOT_REGEX) if is_regex else (EQUAL if is_equal else NOT_EQUAL)
        try:
            out.append(Matcher.make(name, op, value))
        except MatcherError as exc:
            raise ApiError(400, f"invalid silence: invalid label matcher {i}: invalid regular expression "
                                f"{json.dumps(value)}: {exc}") from None
    if all(m.matches("") for m in out):
        raise ApiError(400, "invalid silence: at least one matcher must not match the empty string")
    return tuple(out)


class SilenceStore:
    """The silences of one Alertmanager. Thread-safe: the API's requests may come from several
    server threads."""

    def __init__(self, rng: random.Random, *, max_silences: int = 1000,
                 retention: timedelta = timedelta(hours=120)) -> None:
        self._rng = rng
        self._max = max_silences
        self._retention = retention
        self._by_id: dict[str, Silence] = {}
        self._lock = threading.Lock()

    def _new_id(self) -> str:
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _gc(self, now: datetime) -> None:
        for sid, s in list(self._by_id.items()):
            if s.ends_at + self._retention < now:
                del self._by_id[sid]

    def get(self, sid: str, now: datetime) -> Optional[Silence]:
        with self._lock:
            self._gc(now)
            return self._by_id.get(sid)

    def all(self, now: datetime) -> list[Silence]:
        """Alertmanager's order: active (ending soonest first), pending (starting soonest
        first), expired (most recently ended first)."""
        with self._lock:
            self._gc(now)
            silences = list(self._by_id.values())

        def key(s: Silence) -> tuple[int, float, str]:
            state = s.state(now)
            t = s.starts_at.timestamp() if state == PENDING else s.ends_at.timestamp()
            return _STATE_ORDER[state], -t if state == EXPIRED else t, s.id

        return sorted(silences, key=key)

    def mutes(self, labels: Mapping[str, str], now: datetime) -> list[str]:
        """Ids of the active silences that silence an alert with these labels."""
        with self._lock:
            return sorted(s.id for s in self._by_id.values() if s.mutes(labels, now))

    def set(self, posted: PostedSilence, now: datetime) -> str:
        """Create, update or replace (Alertmanager's ``Silences.Set`` through the v2 handler)."""
        if posted.starts_at >= posted.ends_at:
            raise ApiError(400, "Failed to create silence: start time must be before end time")
        if posted.ends_at < now:
            raise ApiError(400, "Failed to create silence: end time can't be in the past")
        matchers = _matchers(posted)
        with self._lock:
            self._gc(now)
            prev = self._by_id.get(posted.id) if posted.id else None
            if posted.id and prev is None:
                raise ApiError(404, "silence not found")
            if prev is not None and self._can_update(prev, matchers, posted, now):
                self._by_id[prev.id] = replace(prev, starts_at=posted.starts_at, ends_at=posted.ends_at,
                                               updated_at=now, created_by=posted.created_by,
                                               comment=posted.comment)
                return prev.id
            live = sum(1 for s in self._by_id.values() if s.state(now) != EXPIRED)
            if live >= self._max:
                raise ApiError(400, f"exceeded maximum number of silences: {live} (limit: {self._max})")
            if prev is not None and prev.state(now) != EXPIRED:
                self._by_id[prev.id] = self._expired(prev, now)
            sid = self._new_id()
            self._by_id[sid] = Silence(sid, matchers, max(posted.starts_at, now), posted.ends_at, now,
                                       posted.created_by, posted.comment)
            return sid

    @staticmethod
    def _can_update(prev: Silence, matchers: tuple[Matcher, ...], posted: PostedSilence, now: datetime) -> bool:
        if prev.matchers != matchers:
            return False
        state = prev.state(now)
        if state == ACTIVE:
            return posted.starts_at == prev.starts_at and posted.ends_at >= now
        if state == PENDING:
            return posted.starts_at >= now
        return False

    @staticmethod
    def _expired(s: Silence, now: datetime) -> Silence:
        if s.state(now) == PENDING:  # both ends to now: it moves to expired without ever being active
            return replace(s, starts_at=now, ends_at=now, updated_at=now)
        return replace(s, ends_at=now, updated_at=now)

    def expire(self, sid: str, now: datetime) -> None:
        with self._lock:
            self._gc(now)
            s = self._by_id.get(sid)
            if s is None:
                raise ApiError(404, None)
            if s.state(now) == EXPIRED:
                raise ApiError(500, f"silence {sid} already expired")
            self._by_id[sid] = self._expired(s, now)


def silence_matches_filter(s: Silence, matchers: list[Matcher]) -> bool:
    """``CheckSilenceMatchesFilterLabels``: every filter matcher is one of the silence's own
    (same name, operator and value)."""
    own = {(m.name, m.op, m.value) for m in s.matchers}
    return all((m.name, m.op, m.value) in own for m in matchers)
