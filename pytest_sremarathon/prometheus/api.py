"""Prometheus's HTTP API (``/api/v1/...``) as a pure request handler.

``PrometheusAPI.handle(method, path, query_params, form_body)`` answers a ``Response``
(status, JSON-able body) and knows nothing of sockets: the twin mounts it behind its own
loopback server, the tests behind ``http.server``. Everything time-dependent reads the
caller's clock (virtual time), so answers are deterministic.

The envelope, parameter names, error types and status codes are Prometheus's
(docs: querying/api): ``{"status": "success", "data": ..., "warnings": [...], "infos": [...]}``
or ``{"status": "error", "errorType": "bad_data", "error": "..."}`` with 400 for bad_data,
422 for execution errors, 404 for unknown endpoints, 405 for a method an endpoint refuses.
Targets, rules and alerts come from the caller (``TargetSource``, ``RuleSource``): the scrape
loop and the alert rule engine live elsewhere.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol
from urllib.parse import parse_qs

import promql_parser as pp

from .promql import Engine, compile_selector, parse
from .tsdb import TSDB, Labels, Matcher, to_ms, valid_label_name
from .values import (
    BadData,
    Matrix,
    PromQLError,
    Scalar,
    String,
    Value,
    Vector,
    format_time,
    format_value,
    format_value_exp,
)

JSON = dict[str, Any]
FormBody = bytes | str | Mapping[str, Sequence[str]] | None

# Prometheus's own bounds for an absent start/end (Go's time.Unix range it accepts).
MIN_TIME_MS = -9_223_309_901_257_974
MAX_TIME_MS = 9_223_309_901_257_974


# --- what the caller provides ------------------------------------------------------------

@dataclass
class Target:
    """A scrape target as ``/api/v1/targets`` shows it; times are seconds (virtual)."""

    labels: dict[str, str]
    scrape_pool: str
    scrape_url: str
    health: str = "up"  # up, down, unknown
    last_error: str = ""
    last_scrape: float | None = None
    last_scrape_duration: float = 0.0
    scrape_interval: str = "30s"
    scrape_timeout: str = "10s"
    discovered_labels: dict[str, str] | None = None
    global_url: str | None = None
    dropped: bool = False


@dataclass
class Alert:
    """One alert instance of an alerting rule. ``active_at`` in seconds (virtual)."""

    labels: dict[str, str]
    annotations: dict[str, str] = field(default_factory=dict)
    state: str = "firing"  # pending, firing
    active_at: float | None = None
    value: float = 1.0
    keep_firing_since: float | None = None


@dataclass
class Rule:
    """An alerting (or recording) rule as ``/api/v1/rules`` shows it."""

    name: str
    query: str
    duration: float = 0.0  # the rule's `for`, seconds
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    state: str = "inactive"  # inactive, pending, firing
    alerts: list[Alert] = field(default_factory=list)
    type: str = "alerting"  # alerting, recording
    health: str = "ok"  # ok, err, unknown
    last_error: str = ""
    keep_firing_for: float = 0.0
    evaluation_time: float = 0.0
    last_evaluation: float | None = None


@dataclass
class RuleGroup:
    name: str
    file: str
    rules: list[Rule] = field(default_factory=list)
    interval: float = 30.0
    limit: int = 0
    evaluation_time: float = 0.0
    last_evaluation: float | None = None


class RuleSource(Protocol):
    def rule_groups(self) -> Sequence[RuleGroup]: ...


class TargetSource(Protocol):
    def targets(self) -> Sequence[Target]: ...


@dataclass
class StaticRules:
    groups: list[RuleGroup] = field(default_factory=list)

    def rule_groups(self) -> Sequence[RuleGroup]:
        return self.groups


@dataclass
class StaticTargets:
    items: list[Target] = field(default_factory=list)

    def targets(self) -> Sequence[Target]:
        return self.items


@dataclass
class BuildInfo:
    version: str = "3.0.0"  # the semantics followed (left-open ranges, 3.x error texts)
    revision: str = "pytest-sremarathon"
    branch: str = "HEAD"
    build_user: str = "pytest-sremarathon"
    build_date: str = "20260105-00:00:00"
    go_version: str = "n/a (Python)"


# --- responses ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Response:
    status: int
    body: JSON | str
    content_type: str = "application/json"

    def __iter__(self) -> Any:  # so `status, body = api.handle(...)` reads naturally
        return iter((self.status, self.body))

    def encode(self) -> bytes:
        if isinstance(self.body, str):
            return self.body.encode()
        return json.dumps(self.body, separators=(",", ":")).encode()


class ApiError(Exception):
    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message = status, error_type, message


def _bad(message: str) -> ApiError:
    return ApiError(400, "bad_data", message)


def _invalid_param(name: str, err: str) -> ApiError:
    return _bad(f'invalid parameter "{name}": {err}')


def error_response(status: int, error_type: str, message: str) -> Response:
    return Response(status, {"status": "error", "errorType": error_type, "error": message})


# --- parameters --------------------------------------------------------------------------

class Params:
    """Form values as Go's ``Request.Form``: the POST body's first, then the URL's."""

    def __init__(self, query: Mapping[str, Sequence[str]], body: FormBody) -> None:
        merged: dict[str, list[str]] = {}
        if body is not None:
            if isinstance(body, (bytes, str)):
                text = body.decode() if isinstance(body, bytes) else body
                parsed: Mapping[str, Sequence[str]] = parse_qs(text, keep_blank_values=True)
            else:
                parsed = body
            for k, vs in parsed.items():
                merged.setdefault(k, []).extend(_as_list(vs))
        for k, vs in query.items():
            merged.setdefault(k, []).extend(_as_list(vs))
        self._values = merged

    def get(self, name: str) -> str | None:
        vs = self._values.get(name)
        return vs[0] if vs else None

    def getlist(self, name: str) -> list[str]:
        return list(self._values.get(name, []))


def _as_list(vs: Sequence[str] | str) -> list[str]:
    # A caller's {"query": "up"} means one value, not the letters of it.
    return [vs] if isinstance(vs, str) else list(vs)


_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?"
                      r"([Zz]|[+-]\d{2}:\d{2})$")


def parse_time(s: str) -> float:
    """A unix timestamp (float seconds) or RFC3339, as Prometheus's time parameters."""
    try:
        v = float(s)
    except ValueError:
        pass
    else:
        if math.isfinite(v):
            return round(v, 3)
        raise ValueError(f'cannot parse "{s}" to a valid timestamp')
    m = _RFC3339.match(s)
    if m is None:
        raise ValueError(f'cannot parse "{s}" to a valid timestamp')
    y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
    frac = float(m.group(7)) if m.group(7) else 0.0
    tz = m.group(8)
    offset = timedelta(0)
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        offset = sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6]))
    try:
        dt = datetime(y, mo, d, h, mi, sec, tzinfo=timezone(offset))
    except ValueError:
        raise ValueError(f'cannot parse "{s}" to a valid timestamp') from None
    return round(dt.timestamp() + frac, 3)


def parse_duration(s: str) -> float:
    """Float seconds or a Prometheus duration (``30s``, ``1h30m``)."""
    try:
        v = float(s)
    except ValueError:
        pass
    else:
        if not math.isfinite(v) or abs(v) > 9.2e9:
            raise ValueError(f'cannot parse "{s}" to a valid duration. It overflows int64')
        return v
    try:
        return pp.parse_duration(s).total_seconds()
    except (ValueError, OverflowError):
        raise ValueError(f'cannot parse "{s}" to a valid duration') from None


def rfc3339(seconds: float | None) -> str:
    if seconds is None:
        return "0001-01-01T00:00:00Z"
    dt = datetime.fromtimestamp(seconds, timezone.utc)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _labels_json(labels: Labels) -> dict[str, str]:
    return dict(labels)


def value_json(value: Value, t_ms: int) -> JSON:
    """``data`` of a query answer: ``resultType`` and ``result`` in Prometheus's shapes."""
    ts = format_time(t_ms)
    if isinstance(value, Scalar):
        return {"resultType": "scalar", "result": [ts, format_value(value.value)]}
    if isinstance(value, String):
        return {"resultType": "string", "result": [ts, value.value]}
    if isinstance(value, Vector):
        return {"resultType": "vector",
                "result": [{"metric": _labels_json(s.labels), "value": [ts, format_value(s.value)]}
                           for s in value.samples]}
    return {"resultType": "matrix",
            "result": [{"metric": _labels_json(r.labels),
                        "values": [[format_time(t), format_value(v)]
                                   for t, v in zip(r.times, r.values)]}
                       for r in value.series]}


def alert_json(a: Alert, rule: Rule | None = None) -> JSON:
    labels = dict(a.labels)
    if rule is not None and "alertname" not in labels:
        labels["alertname"] = rule.name
    out: JSON = {"labels": labels, "annotations": dict(a.annotations), "state": a.state,
                 "activeAt": rfc3339(a.active_at), "value": format_value_exp(a.value)}
    if a.keep_firing_since is not None:
        out["keepFiringSince"] = rfc3339(a.keep_firing_since)
    return out


def rule_json(r: Rule, with_alerts: bool = True) -> JSON:
    common: JSON = {"name": r.name, "query": r.query, "labels": dict(r.labels),
                    "health": r.health, "lastError": r.last_error,
                    "evaluationTime": r.evaluation_time,
                    "lastEvaluation": rfc3339(r.last_evaluation)}
    if r.type == "recording":
        return {**common, "type": "recording"}
    return {"state": r.state, **common, "duration": r.duration,
            "keepFiringFor": r.keep_firing_for, "annotations": dict(r.annotations),
            "alerts": [alert_json(a, r) for a in r.alerts] if with_alerts else [],
            "type": "alerting"}


# --- the handler -------------------------------------------------------------------------

_GET = frozenset({"GET"})
_GET_POST = frozenset({"GET", "POST"})
_LABEL_VALUES = re.compile(r"^/api/v1/label/([^/]+)/values$")


class PrometheusAPI:
    """The API over one TSDB. ``now`` is the caller's clock in unix seconds (the twin's
    virtual time; default: the newest sample's time, so a query without ``time`` sees the
    latest scrape)."""

    def __init__(self, db: TSDB, now: Callable[[], float] | None = None,
                 engine: Engine | None = None, targets: TargetSource | None = None,
                 rules: RuleSource | None = None, build_info: BuildInfo | None = None,
                 alertmanagers: Sequence[str] = (), start_time: float | None = None) -> None:
        self.db = db
        self.engine = engine or Engine(db)
        self.now = now or (lambda: (db.head_ms or 0) / 1000.0)
        self.targets = targets or StaticTargets()
        self.rules = rules or StaticRules()
        self.build_info = build_info or BuildInfo()
        self.alertmanagers = list(alertmanagers)
        self.start_time = start_time
        self._routes: dict[str, tuple[frozenset[str], Callable[[Params], JSON]]] = {
            "/api/v1/query": (_GET_POST, self._query),
            "/api/v1/query_range": (_GET_POST, self._query_range),
            "/api/v1/series": (_GET_POST, self._series),
            "/api/v1/labels": (_GET_POST, self._labels),
            "/api/v1/metadata": (_GET, self._metadata),
            "/api/v1/targets": (_GET, self._targets),
            "/api/v1/targets/metadata": (_GET, self._targets_metadata),
            "/api/v1/rules": (_GET, self._rules),
            "/api/v1/alerts": (_GET, self._alerts),
            "/api/v1/alertmanagers": (_GET, self._alertmanagers),
            "/api/v1/query_exemplars": (_GET_POST, self._exemplars),
            "/api/v1/format_query": (_GET_POST, self._format_query),
            "/api/v1/status/buildinfo": (_GET, self._buildinfo),
            "/api/v1/status/runtimeinfo": (_GET, self._runtimeinfo),
            "/api/v1/status/flags": (_GET, self._flags),
        }

    def handle(self, method: str, path: str, query_params: Mapping[str, Sequence[str]],
               form_body: FormBody = None) -> Response:
        method = method.upper()
        path = path.split("?", 1)[0]
        if len(path) > 1:
            path = path.rstrip("/")
        if method == "HEAD":
            method = "GET"
        plain = {"/": "Prometheus (pytest-sremarathon)\n",
                 "/-/healthy": "Prometheus Server is Healthy.\n",
                 "/-/ready": "Prometheus Server is Ready.\n"}
        if path in plain:
            return Response(200, plain[path], "text/plain; charset=utf-8")
        route = self._routes.get(path)
        label_match = _LABEL_VALUES.match(path)
        if route is None and label_match is not None:
            name = label_match.group(1)
            route = (_GET, lambda p: self._label_values(name, p))
        if route is None:
            return error_response(404, "not_found", f"unknown API endpoint {path}")
        methods, fn = route
        if method not in methods:
            return error_response(405, "bad_data",
                                  f"method {method} not allowed for {path}")
        try:
            params = Params(query_params, form_body if method == "POST" else None)
            data = fn(params)
        except ApiError as e:
            return error_response(e.status, e.error_type, e.message)
        except PromQLError as e:
            return error_response(e.status, e.error_type, str(e))
        except Exception as e:  # a bug here must not take the server thread down
            return error_response(500, "internal", f"{type(e).__name__}: {e}")
        return Response(200, data)

    # -- helpers -----------------------------------------------------------------------------

    def _time(self, p: Params, name: str, default: float | None) -> float | None:
        raw = p.get(name)
        if raw is None or raw == "":
            return default  # as Prometheus's parseTimeParam: empty means the default
        try:
            return parse_time(raw)
        except ValueError as e:
            raise _invalid_param(name, str(e)) from None

    def _limit(self, p: Params) -> int | None:
        raw = p.get("limit")
        if raw is None or raw == "":
            return None
        try:
            n = int(raw)
        except ValueError:
            raise _invalid_param("limit", f'cannot parse "{raw}" to a valid limit') from None
        if n < 0:
            raise _invalid_param("limit", "limit must be non-negative")
        return n or None

    def _matchers(self, p: Params, required: bool) -> list[Sequence[Matcher]] | None:
        raw = p.getlist("match[]")
        if not raw:
            if required:
                raise _bad("no match[] parameter provided")
            return None
        sets: list[Sequence[Matcher]] = []
        for s in raw:
            try:
                expr = pp.parse(s)
            except ValueError as e:
                raise _invalid_param("match[]", f"parse error: {e}") from None
            if not isinstance(expr, pp.VectorSelector):
                raise _invalid_param("match[]", f"{s!r} is not a series selector")
            try:
                sets.append(compile_selector(expr, None).matchers)
            except PromQLError as e:
                raise _invalid_param("match[]", str(e)) from None
        return sets

    def _range(self, p: Params) -> tuple[int | None, int | None]:
        start = self._time(p, "start", None)
        end = self._time(p, "end", None)
        return (None if start is None else to_ms(start), None if end is None else to_ms(end))

    @staticmethod
    def _envelope(data: Any, warnings: Sequence[str] = (), infos: Sequence[str] = ()) -> JSON:
        out: JSON = {"status": "success", "data": data}
        if warnings:
            out["warnings"] = list(warnings)
        if infos:
            out["infos"] = list(infos)
        return out

    def _lookback(self, p: Params) -> float | None:
        raw = p.get("lookback_delta")
        if not raw:
            return None
        try:
            v = parse_duration(raw)
        except ValueError as e:
            raise _invalid_param("lookback_delta", str(e)) from None
        if v <= 0:
            raise _invalid_param("lookback_delta", "lookback delta must be positive")
        return v

    def _compile(self, p: Params) -> Any:
        try:
            return parse(p.get("query") or "")
        except PromQLError as e:
            raise _invalid_param("query", str(e)) from None

    @staticmethod
    def _truncate(value: Value, limit: int | None, warnings: list[str]) -> Value:
        if limit is None:
            return value
        if isinstance(value, Vector) and len(value.samples) > limit:
            warnings.append("results truncated due to limit")
            return Vector(value.samples[:limit])
        if isinstance(value, Matrix) and len(value.series) > limit:
            warnings.append("results truncated due to limit")
            return Matrix(value.series[:limit], value.lo, value.hi)
        return value

    # -- endpoints ---------------------------------------------------------------------------

    def _query(self, p: Params) -> JSON:
        t = self._time(p, "time", self.now())
        assert t is not None
        limit, lookback = self._limit(p), self._lookback(p)
        node = self._compile(p)
        res = self.engine.instant(node, t, lookback)
        warnings = list(res.notes.warnings)
        value = self._truncate(res.value, limit, warnings)
        return self._envelope(value_json(value, to_ms(t)), warnings, res.notes.infos)

    def _query_range(self, p: Params) -> JSON:
        start = self._time(p, "start", None)
        end = self._time(p, "end", None)
        if start is None:
            raise _invalid_param("start", 'cannot parse "" to a valid timestamp')
        if end is None:
            raise _invalid_param("end", 'cannot parse "" to a valid timestamp')
        raw_step = p.get("step") or ""
        try:
            step = parse_duration(raw_step)
        except ValueError as e:
            raise _invalid_param("step", str(e)) from None
        limit, lookback = self._limit(p), self._lookback(p)
        node = self._compile(p)
        res = self.engine.range(node, start, end, step, lookback)
        warnings = list(res.notes.warnings)
        value = self._truncate(res.value, limit, warnings)
        return self._envelope(value_json(value, to_ms(end)), warnings, res.notes.infos)

    def _series(self, p: Params) -> JSON:
        sets = self._matchers(p, required=True)
        start, end = self._range(p)
        limit = self._limit(p)
        found = self.db.series_in_range(sets, start, end)
        warnings: list[str] = []
        if limit is not None and len(found) > limit:
            found = found[:limit]
            warnings.append("results truncated due to limit")
        return self._envelope([_labels_json(s.labels) for s in found], warnings)

    def _labels(self, p: Params) -> JSON:
        sets = self._matchers(p, required=False)
        start, end = self._range(p)
        names = self.db.label_names(sets, start, end)
        return self._cut(names, self._limit(p))

    def _label_values(self, name: str, p: Params) -> JSON:
        if not valid_label_name(name):
            raise _bad(f'invalid label name: "{name}"')
        sets = self._matchers(p, required=False)
        start, end = self._range(p)
        values = self.db.label_values(name, sets, start, end)
        return self._cut(values, self._limit(p))

    def _cut(self, items: list[str], limit: int | None) -> JSON:
        if limit is not None and len(items) > limit:
            return self._envelope(items[:limit], ["results truncated due to limit"])
        return self._envelope(items)

    def _metadata(self, p: Params) -> JSON:
        metric = p.get("metric")
        limit = self._int_param(p, "limit")
        per_metric = self._int_param(p, "limit_per_metric")
        out: dict[str, list[JSON]] = {}
        for name in sorted(self.db.metadata):
            if metric and name != metric:
                continue
            if limit is not None and len(out) >= limit:
                break
            md = self.db.metadata[name]
            entries = [{"type": md.type, "help": md.help, "unit": md.unit}]
            out[name] = entries[:per_metric] if per_metric is not None else entries
        return self._envelope(out)

    def _int_param(self, p: Params, name: str) -> int | None:
        raw = p.get(name)
        if raw is None or raw == "":
            return None
        try:
            n = int(raw)
        except ValueError:
            raise _invalid_param(name, f'cannot parse "{raw}" to a valid integer') from None
        return None if n < 0 else n  # Prometheus reads a negative limit as "no limit"

    def _targets(self, p: Params) -> JSON:
        state = (p.get("state") or "any").lower()
        if state not in ("active", "dropped", "any"):
            state = "any"  # Prometheus answers both for a value it does not know
        pool = p.get("scrapePool")
        active: list[JSON] = []
        dropped: list[JSON] = []
        counts: dict[str, int] = {}
        for t in self.targets.targets():
            if pool and t.scrape_pool != pool:
                continue
            discovered = dict(t.discovered_labels if t.discovered_labels is not None
                              else t.labels)
            if t.dropped:
                counts[t.scrape_pool] = counts.get(t.scrape_pool, 0) + 1
                dropped.append({"discoveredLabels": discovered, "scrapePool": t.scrape_pool})
                continue
            active.append({
                "discoveredLabels": discovered, "labels": dict(t.labels),
                "scrapePool": t.scrape_pool, "scrapeUrl": t.scrape_url,
                "globalUrl": t.global_url or t.scrape_url, "lastError": t.last_error,
                "lastScrape": rfc3339(t.last_scrape),
                "lastScrapeDuration": t.last_scrape_duration, "health": t.health,
                "scrapeInterval": t.scrape_interval, "scrapeTimeout": t.scrape_timeout,
            })
        data: JSON = {"activeTargets": active if state != "dropped" else [],
                      "droppedTargets": dropped if state != "active" else []}
        data["droppedTargetCounts"] = counts
        return self._envelope(data)

    def _targets_metadata(self, p: Params) -> JSON:
        """Metadata of the metrics each target exposes: a metric belongs to a target when
        one of its series carries the target's job and instance (the labels a scrape adds)."""
        raw = p.get("match_target")
        selector: Sequence[Matcher] = ()
        if raw:
            sets = self._matchers(Params({"match[]": [raw]}, None), required=True)
            assert sets is not None
            selector = sets[0]
        metric = p.get("metric")
        limit = self._int_param(p, "limit")
        out: list[JSON] = []
        for t in self.targets.targets():
            if t.dropped or not all(m.matches(t.labels.get(m.name, "")) for m in selector):
                continue
            keys = {k: v for k, v in t.labels.items() if k in ("job", "instance")} or t.labels
            names = self.db.label_values(
                "__name__", [[Matcher.of(k, "=", v) for k, v in sorted(keys.items())]])
            for name in names:
                md = self.db.metadata.get(name)
                if md is None or metric and name != metric:
                    continue
                if limit is not None and len(out) >= limit:
                    return self._envelope(out)
                out.append({"target": dict(t.labels), "metric": name, "type": md.type,
                            "help": md.help, "unit": md.unit})
        return self._envelope(out)

    def _rules(self, p: Params) -> JSON:
        typ = p.get("type") or ""
        if typ not in ("", "alert", "record"):
            raise _invalid_param("type", f'not supported value "{typ}"')
        names, groups_f, files = (set(p.getlist(k)) for k in
                                  ("rule_name[]", "rule_group[]", "file[]"))
        exclude_alerts = (p.get("exclude_alerts") or "").lower() == "true"
        sets = self._matchers(p, required=False)
        filtered = bool(typ or names or groups_f or files or sets)
        groups = []
        for g in self.rules.rule_groups():
            if groups_f and g.name not in groups_f or files and g.file not in files:
                continue
            rules = []
            for r in g.rules:
                if typ == "alert" and r.type != "alerting" or typ == "record" and \
                        r.type != "recording":
                    continue
                if names and r.name not in names:
                    continue
                if sets is not None and not _labels_match(r.labels, sets):
                    continue
                rules.append(rule_json(r, not exclude_alerts))
            if filtered and not rules:
                continue
            groups.append({"name": g.name, "file": g.file, "rules": rules,
                           "interval": g.interval, "limit": g.limit,
                           "evaluationTime": g.evaluation_time,
                           "lastEvaluation": rfc3339(g.last_evaluation)})
        return self._envelope({"groups": groups})

    def _alerts(self, p: Params) -> JSON:
        alerts = [alert_json(a, r) for g in self.rules.rule_groups() for r in g.rules
                  if r.type == "alerting" for a in r.alerts]
        return self._envelope({"alerts": alerts})

    def _alertmanagers(self, p: Params) -> JSON:
        return self._envelope({"activeAlertmanagers": [{"url": u} for u in self.alertmanagers],
                               "droppedAlertmanagers": []})

    def _exemplars(self, p: Params) -> JSON:
        self._compile(p)  # a bad query is still a bad_data error; there are no exemplars
        return self._envelope([])

    def _format_query(self, p: Params) -> JSON:
        query = p.get("query") or ""
        try:
            return self._envelope(pp.parse(query).prettify())
        except ValueError as e:
            raise _invalid_param("query", f"parse error: {e}") from None

    def _buildinfo(self, p: Params) -> JSON:
        b = self.build_info
        return self._envelope({"version": b.version, "revision": b.revision,
                               "branch": b.branch, "buildUser": b.build_user,
                               "buildDate": b.build_date, "goVersion": b.go_version})

    def _runtimeinfo(self, p: Params) -> JSON:
        return self._envelope({
            "startTime": rfc3339(self.start_time),
            "CWD": "/prometheus", "reloadConfigSuccess": True,
            "lastConfigTime": rfc3339(None), "corruptionCount": 0, "goroutineCount": 0,
            "GOMAXPROCS": 1, "GOMEMLIMIT": 0, "GOGC": "", "GODEBUG": "",
            "storageRetention": pp.display_duration(
                timedelta(milliseconds=self.db.retention_ms)),
        })

    def _flags(self, p: Params) -> JSON:
        return self._envelope({
            "storage.tsdb.retention.time": pp.display_duration(
                timedelta(milliseconds=self.db.retention_ms)),
            "query.lookback-delta": pp.display_duration(
                timedelta(milliseconds=self.engine.lookback_ms)),
            "query.max-samples": str(self.engine.max_samples),
        })


def _labels_match(labels: Mapping[str, str], sets: Sequence[Sequence[Matcher]]) -> bool:
    return any(all(m.matches(labels.get(m.name, "")) for m in ms) for ms in sets)


__all__ = [
    "Alert",
    "BadData",
    "BuildInfo",
    "PrometheusAPI",
    "Response",
    "Rule",
    "RuleGroup",
    "RuleSource",
    "StaticRules",
    "StaticTargets",
    "Target",
    "TargetSource",
    "parse_duration",
    "parse_time",
]
