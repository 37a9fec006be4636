"""Alertmanager's API v2 (``/api/v2/...`` on port 9093) over the caller's alerts.

A pure handler, ``AlertmanagerAPI.handle(method, path, query, body, actor) -> (status, body)``,
independent of any server: the caller serves it behind its own authentication and writes
``body`` as JSON (None: no body). Shapes follow Alertmanager 0.28's OpenAPI spec
(``api/v2/openapi.yaml``): ``gettableAlert`` with ``status.{state,silencedBy,inhibitedBy,
mutedBy}``, ``alertGroup``, ``alertmanagerStatus``, ``gettableSilence``; errors as it sends them
(its own as a JSON string, go-openapi's as ``{"code", "message"}``).

The alerts are the caller's, read on every request (``alerts()``); silences are this API's.
Creating, updating or expiring a silence is first put to the caller's ``decide`` callback (the
policy point): a denial answers 403 with the verdict's message, and ``record`` hears of every
decided request with the status it got, so the caller can record the action.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional, Protocol
from urllib.parse import unquote

from .matchers import Matcher, MatcherError, filter_matches, parse_filter
from .model import ACTIVE, SUPPRESSED, UNPROCESSED, AlertmanagerConfig, AmAlert, MatchedRoute, format_time
from .silences import ApiError, SilenceStore, parse_postable, silence_matches_filter

Query = dict[str, list[str]]
Response = tuple[int, Any]

_TRUE = {"true", "1", "yes", "ok", "y", "on", "selected", "checked", "t", "enabled"}  # go-openapi's swag.ConvertBool
_UUID = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}\Z")


@dataclass(frozen=True)
class VersionInfo:
    """What ``/api/v2/status`` reports; the version is the API level this handler follows."""

    version: str = "0.28.1"
    revision: str = "sremarathon-twin"
    branch: str = "HEAD"
    build_user: str = "sremarathon"
    build_date: str = ""
    go_version: str = "go1.23.7"


@dataclass(frozen=True)
class SilenceRequest:
    """A silence change put to the policy point.

    ``verb``: ``create`` (POST without an id), ``update`` (POST with one) or ``delete``.
    ``body``: the POSTed JSON; for ``delete``, the silence as GET shows it (None if unknown).
    """

    verb: str
    actor: str
    silence_id: Optional[str] = None
    body: Any = None


class Verdict(Protocol):
    """The policy's answer (``policy.Decision`` fits as it is)."""

    @property
    def allowed(self) -> bool: ...

    @property
    def message(self) -> str: ...


@dataclass(frozen=True)
class Allow:
    allowed: bool = True
    message: str = ""


def _allow_all(_req: SilenceRequest) -> Verdict:
    return Allow()


@dataclass
class AlertmanagerAPI:
    """``alerts``: the current alerts (called per request). ``now``: the virtual clock. ``rng``:
    the stream silence ids are drawn from (its own, seeded by the run)."""

    alerts: Callable[[], Iterable[AmAlert]]
    now: Callable[[], datetime]
    rng: random.Random
    config: AlertmanagerConfig = field(default_factory=AlertmanagerConfig)
    decide: Callable[[SilenceRequest], Verdict] = _allow_all
    record: Optional[Callable[[SilenceRequest, Verdict, int], None]] = None
    started_at: Optional[datetime] = None
    version: VersionInfo = field(default_factory=VersionInfo)
    silences: SilenceStore = field(init=False)

    def __post_init__(self) -> None:
        self.silences = SilenceStore(self.rng)
        self._routes = self.config.compiled()
        if self.started_at is None:
            self.started_at = self.now()

    # -- dispatch -----------------------------------------------------------------------------
    def handle(self, method: str, path: str, query: Optional[Query] = None, body: bytes = b"",
               actor: str = "agent") -> Response:
        query = query or {}
        method = method.upper()
        path = path.split("?", 1)[0]
        routes: dict[str, Callable[[], Response]]
        if path == "/api/v2/status":
            routes = {"GET": self._status}
        elif path == "/api/v2/receivers":
            routes = {"GET": self._receivers}
        elif path == "/api/v2/alerts":
            routes = {"GET": lambda: self._alerts(query)}
        elif path == "/api/v2/alerts/groups":
            routes = {"GET": lambda: self._groups(query)}
        elif path == "/api/v2/silences":
            routes = {"GET": lambda: self._list_silences(query), "POST": lambda: self._post_silence(body, actor)}
        elif path.startswith("/api/v2/silence/") and path.count("/") == 4:
            sid = unquote(path.rsplit("/", 1)[1])
            routes = {"GET": lambda: self._get_silence(sid), "DELETE": lambda: self._delete_silence(sid, actor)}
        else:
            return 404, {"code": 404, "message": f"path {path} was not found"}
        handler = routes.get("GET" if method == "HEAD" else method)
        if handler is None:
            return 405, {"code": 405, "message": f"method {method} is not allowed, but [{','.join(sorted(routes))}] are"}
        try:
            return handler()
        except ApiError as exc:
            return exc.status, exc.payload

    # -- general ------------------------------------------------------------------------------
    def _status(self) -> Response:
        v = self.version
        assert self.started_at is not None
        return 200, {
            "cluster": {"peers": [], "status": "disabled"},
            "config": {"original": self.config.yaml_text()},
            "uptime": format_time(self.started_at),
            "versionInfo": {"branch": v.branch, "buildDate": v.build_date, "buildUser": v.build_user,
                            "goVersion": v.go_version, "revision": v.revision, "version": v.version},
        }

    def _receivers(self) -> Response:
        return 200, [{"name": r} for r in self.config.receivers]

    # -- alerts -------------------------------------------------------------------------------
    def _filters(self, query: Query) -> tuple[list[Matcher], Optional[re.Pattern[str]]]:
        try:
            matchers = parse_filter(query.get("filter", []))
        except MatcherError as exc:
            raise ApiError(400, str(exc)) from None
        receiver = query.get("receiver", [""])[0]
        if not receiver:
            return matchers, None
        try:
            return matchers, re.compile(f"^(?:{receiver})$")
        except re.error as exc:
            raise ApiError(400, f"failed to parse receiver param: error parsing regexp: {exc}") from None

    @staticmethod
    def _flag(query: Query, name: str) -> bool:
        value = query.get(name, [""])[0]
        return value.lower() in _TRUE if value else True  # absent or empty: the default, true

    def _visible(self, query: Query, matchers: list[Matcher],
                 now: datetime) -> list[tuple[AmAlert, list[str], list[MatchedRoute]]]:
        """Alertmanager's ``alertFilter``: not resolved, the state flags, the filter. Each alert
        comes with the silences muting it and the routes it lands on."""
        active, silenced = self._flag(query, "active"), self._flag(query, "silenced")
        inhibited, unprocessed = self._flag(query, "inhibited"), self._flag(query, "unprocessed")
        out = []
        for alert in self.alerts():
            if alert.ends_at is not None and alert.ends_at < now:
                continue
            silenced_by = sorted(set(alert.silenced_by) | set(self.silences.mutes(alert.labels, now)))
            state = SUPPRESSED if silenced_by or alert.inhibited_by else alert.state
            if (not active and state == ACTIVE) or (not unprocessed and state == UNPROCESSED):
                continue
            if (not silenced and silenced_by) or (not inhibited and alert.inhibited_by):
                continue
            if not filter_matches(matchers, alert.labels):
                continue
            out.append((alert, silenced_by, self._routes.match(alert.labels)))
        return out

    def _alert_json(self, alert: AmAlert, silenced_by: list[str], receivers: Iterable[str],
                    now: datetime) -> dict[str, Any]:
        """A ``gettableAlert``."""
        ends_at = alert.ends_at if alert.ends_at is not None else now + self.config.resolve_timeout
        state = SUPPRESSED if silenced_by or alert.inhibited_by else alert.state
        out = {
            "annotations": dict(alert.annotations),
            "endsAt": format_time(ends_at),
            "fingerprint": alert.id,
            "receivers": [{"name": r} for r in receivers],
            "startsAt": format_time(alert.starts_at),
            "status": {"inhibitedBy": list(alert.inhibited_by), "mutedBy": [], "silencedBy": silenced_by,
                       "state": state},
            "updatedAt": format_time(alert.updated_at or now),
        }
        if alert.generator_url:
            out["generatorURL"] = alert.generator_url
        out["labels"] = dict(alert.labels)
        return out

    def _alerts(self, query: Query) -> Response:
        matchers, receiver = self._filters(query)
        now = self.now()
        out = []
        for alert, silenced_by, routes in self._visible(query, matchers, now):
            receivers = list(alert.receivers) or [r.receiver for r in routes]
            if receiver is not None and not any(receiver.match(r) for r in receivers):
                continue
            out.append(self._alert_json(alert, silenced_by, receivers, now))
        out.sort(key=lambda a: a["fingerprint"])
        return 200, out

    def _groups(self, query: Query) -> Response:
        matchers, receiver = self._filters(query)
        now = self.now()
        groups: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[MatchedRoute, list[tuple[AmAlert, list[str]]]]] = {}
        receivers_of: dict[str, list[str]] = {}
        for alert, silenced_by, routes in self._visible(query, matchers, now):
            receivers_of[alert.id] = [r.receiver for r in routes]
            for route in routes:
                if receiver is not None and not receiver.match(route.receiver):
                    continue
                key = (route.route_id, tuple(sorted(route.group_labels(alert.labels).items())))
                groups.setdefault(key, (route, []))[1].append((alert, silenced_by))
        out = []
        for (_, labels), (route, members) in groups.items():
            members.sort(key=functools.cmp_to_key(_member_cmp))
            out.append({"alerts": [self._alert_json(a, s, list(a.receivers) or receivers_of[a.id], now)
                                   for a, s in members],
                        "labels": dict(labels), "receiver": {"name": route.receiver}})
        out.sort(key=functools.cmp_to_key(_group_cmp))
        return 200, out

    # -- silences -----------------------------------------------------------------------------
    def _list_silences(self, query: Query) -> Response:
        try:
            matchers = parse_filter(query.get("filter", []))
        except MatcherError as exc:
            raise ApiError(400, str(exc)) from None
        now = self.now()
        return 200, [s.to_json(now) for s in self.silences.all(now) if silence_matches_filter(s, matchers)]

    def _check_id(self, sid: str) -> None:
        if not _UUID.match(sid):
            raise ApiError(422, {"code": 601, "message": f'silenceID in path must be of type uuid: "{sid}"'})

    def _get_silence(self, sid: str) -> Response:
        self._check_id(sid)
        now = self.now()
        s = self.silences.get(sid, now)
        if s is None:
            return 404, None
        return 200, s.to_json(now)

    def _decided(self, req: SilenceRequest, action: Callable[[], Response]) -> Response:
        verdict = self.decide(req)
        if not verdict.allowed:
            status, payload = 403, verdict.message or "forbidden"
        else:
            try:
                status, payload = action()
            except ApiError as exc:
                status, payload = exc.status, exc.payload
        if self.record is not None:
            self.record(req, verdict, status)
        return status, payload

    def _post_silence(self, body: bytes, actor: str) -> Response:
        posted, data = parse_postable(body)  # malformed requests are answered before the policy
        req = SilenceRequest("update" if posted.id else "create", actor, posted.id or None, data)

        def create() -> Response:
            return 200, {"silenceID": self.silences.set(posted, self.now())}

        return self._decided(req, create)

    def _delete_silence(self, sid: str, actor: str) -> Response:
        self._check_id(sid)
        now = self.now()
        current = self.silences.get(sid, now)
        req = SilenceRequest("delete", actor, sid, current.to_json(now) if current is not None else None)

        def expire() -> Response:
            self.silences.expire(sid, self.now())
            return 200, None

        return self._decided(req, expire)


# -- Alertmanager's orderings ----------------------------------------------------------------
def _labels_before(a: Mapping[str, str], b: Mapping[str, str]) -> int:
    """Prometheus's ``LabelSet.Before`` as a comparison (-1, 0, 1)."""
    if len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    for name in sorted(set(a) | set(b)):
        if name not in a:
            return -1
        if name not in b:
            return 1
        if a[name] != b[name]:
            return -1 if a[name] < b[name] else 1
    return 0


def _alert_cmp(a: Mapping[str, str], b: Mapping[str, str]) -> int:
    """``types.AlertSlice``: by ``job``, then ``instance``, then the label sets."""
    for key in ("job", "instance"):
        if key not in a and key not in b:
            continue
        if key not in a:
            return 1
        if key not in b:
            return -1
        if a[key] != b[key]:
            return -1 if a[key] < b[key] else 1
    return _labels_before(a, b)


def _member_cmp(a: tuple[AmAlert, list[str]], b: tuple[AmAlert, list[str]]) -> int:
    return _alert_cmp(a[0].labels, b[0].labels)


def _group_cmp(a: dict[str, Any], b: dict[str, Any]) -> int:
    """``dispatch.AlertGroups``: by labels, then receiver."""
    c = _labels_before(a["labels"], b["labels"])
    if c:
        return c
    ra, rb = a["receiver"]["name"], b["receiver"]["name"]
    return -1 if ra < rb else 1 if ra > rb else 0
