"""What the Alertmanager API serves: the alerts the caller gives it, and the routing that names
their receivers and groups them.

The alerts stay the caller's (the alert engine's): :class:`AmAlert` is how the caller hands one
over, :func:`from_record` builds it from an alert-engine record (the agent protocol's ``Alert``
fits the :class:`AlertRecord` protocol as it is). Silences are the API's own (silences.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Optional, Protocol

from .matchers import Matcher, labels_match, parse_matchers

ACTIVE, SUPPRESSED, UNPROCESSED = "active", "suppressed", "unprocessed"

# Prometheus's label-set fingerprint: FNV-1a 64 over the sorted names and values, each followed
# by the 0xff separator byte (model.LabelSet.Fingerprint), so fingerprints match a real setup's.
_FNV_OFFSET, _FNV_PRIME, _MASK64 = 14695981039346656037, 1099511628211, (1 << 64) - 1


def fingerprint(labels: Mapping[str, str]) -> str:
    h = _FNV_OFFSET
    for name in sorted(labels):
        for part in (name, labels[name]):
            for byte in part.encode():
                h = ((h ^ byte) * _FNV_PRIME) & _MASK64
            h = ((h ^ 0xFF) * _FNV_PRIME) & _MASK64
    return f"{h:016x}"


def format_time(t: datetime) -> str:
    """go-openapi's ``strfmt.DateTime``: RFC 3339 with milliseconds, ``Z`` for UTC."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def parse_time(text: str) -> datetime:
    t = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    return t if t.tzinfo is not None else t.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class AmAlert:
    """One alert as the caller hands it to the API.

    ``ends_at`` None: firing with no end announced; served with ``endsAt`` = now + the
    resolve timeout, as Alertmanager stamps alerts that come without one. An alert whose
    ``ends_at`` has passed is resolved and not served. ``state``, ``inhibited_by``: the
    caller's (this API has no inhibition rules); ``silenced_by`` adds to what the API's own
    silences mute. ``receivers`` empty: the configured route decides.
    """

    labels: Mapping[str, str]
    starts_at: datetime
    annotations: Mapping[str, str] = field(default_factory=dict)
    ends_at: Optional[datetime] = None
    updated_at: Optional[datetime] = None
    generator_url: str = ""
    fingerprint: str = ""
    state: str = ACTIVE
    silenced_by: tuple[str, ...] = ()
    inhibited_by: tuple[str, ...] = ()
    receivers: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.fingerprint or fingerprint(self.labels)


class AlertRecord(Protocol):
    """An alert of the alert engine (``agent.protocol.Alert`` has these fields)."""

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def annotations(self) -> Mapping[str, str]: ...

    @property
    def starts_at(self) -> datetime: ...

    @property
    def ends_at(self) -> Optional[datetime]: ...


def from_record(record: AlertRecord, generator_url: str = "") -> AmAlert:
    return AmAlert(labels=dict(record.labels), annotations=dict(record.annotations), starts_at=record.starts_at,
                   ends_at=record.ends_at, generator_url=generator_url)


@dataclass(frozen=True)
class Route:
    """A node of Alertmanager's routing tree. ``None`` inherits the parent's value; the root
    must set ``receiver``. ``group_by=("...",)`` groups by every label."""

    receiver: Optional[str] = None
    group_by: Optional[tuple[str, ...]] = None
    matchers: tuple[str, ...] = ()  # Alertmanager matcher strings, e.g. 'severity="critical"'
    continue_: bool = False
    routes: tuple[Route, ...] = ()
    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"

    def to_yaml(self, root: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.receiver is not None:
            out["receiver"] = self.receiver
        if self.group_by is not None:
            out["group_by"] = list(self.group_by)
        if self.matchers:
            out["matchers"] = list(self.matchers)
        if self.continue_:
            out["continue"] = True
        if self.routes:
            out["routes"] = [r.to_yaml() for r in self.routes]
        if root:
            out.update(group_wait=self.group_wait, group_interval=self.group_interval,
                       repeat_interval=self.repeat_interval)
        return out


@dataclass(frozen=True)
class MatchedRoute:
    """A route an alert lands on, with what it inherited resolved."""

    receiver: str
    group_by: tuple[str, ...]
    route_id: str  # position in the tree ("0.1"): keeps groups of two routes with one receiver apart

    def group_labels(self, labels: Mapping[str, str]) -> dict[str, str]:
        if self.group_by == ("...",):
            return dict(labels)
        return {k: labels[k] for k in self.group_by if k in labels}


@dataclass(frozen=True)
class _CompiledRoute:
    matched: MatchedRoute
    matchers: tuple[Matcher, ...]
    continue_: bool
    children: tuple[_CompiledRoute, ...]

    def match(self, labels: Mapping[str, str]) -> list[MatchedRoute]:
        """Alertmanager's ``Route.Match``: the deepest matching routes, depth first; a child
        without ``continue`` stops its siblings."""
        if not labels_match(self.matchers, labels):
            return []
        out: list[MatchedRoute] = []
        for child in self.children:
            found = child.match(labels)
            out.extend(found)
            if found and not child.continue_:
                break
        return out or [self.matched]


def _compile(route: Route, receiver: Optional[str], group_by: tuple[str, ...], route_id: str) -> _CompiledRoute:
    receiver = route.receiver if route.receiver is not None else receiver
    if receiver is None:
        raise ValueError("the root route must name a receiver")
    group_by = route.group_by if route.group_by is not None else group_by
    matchers = tuple(m for text in route.matchers for m in parse_matchers(text))
    children = tuple(_compile(c, receiver, group_by, f"{route_id}.{i}") for i, c in enumerate(route.routes))
    return _CompiledRoute(MatchedRoute(receiver, group_by, route_id), matchers, route.continue_, children)


@dataclass(frozen=True)
class AlertmanagerConfig:
    """The configuration ``/api/v2/status`` shows and the routing follows. ``original``, when
    given, is served as it is (a real configuration file's text)."""

    route: Route = field(default_factory=lambda: Route(receiver="default", group_by=("alertname", "namespace")))
    receivers: tuple[str, ...] = ("default",)
    resolve_timeout: timedelta = timedelta(minutes=5)
    original: str = ""

    def compiled(self) -> _CompiledRoute:
        return _compile(self.route, None, (), "0")

    def yaml_text(self) -> str:
        if self.original:
            return self.original
        seconds = int(self.resolve_timeout.total_seconds())
        timeout = f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"
        data = {
            "global": {"resolve_timeout": timeout, "http_config": {"follow_redirects": True, "enable_http2": True},
                       "smtp_hello": "localhost", "smtp_require_tls": True},
            "route": self.route.to_yaml(root=True),
            "receivers": [{"name": r} for r in self.receivers],
            "templates": [],
        }
        return "".join(_yaml(data, 0))


_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/]*\Z")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return "'" + text.replace("'", "''") + "'"


def _yaml(value: Any, indent: int) -> list[str]:
    """Block-style YAML of dicts, lists and scalars, in the layout Alertmanager prints its
    configuration (lists not indented under their key)."""
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:\n")
                lines.extend(_yaml(item, indent + 2 if isinstance(item, dict) else indent))
            else:
                empty = "{}" if isinstance(item, dict) else "[]" if isinstance(item, list) else _scalar(item)
                lines.append(f"{pad}{key}: {empty}\n")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                first, *rest = _yaml(item, indent + 2)
                lines.append(f"{pad}- {first.lstrip()}")
                lines.extend(rest)
            else:
                lines.append(f"{pad}- {_scalar(item)}\n")
    return lines
