"""The Jaeger query service's HTTP API (``/api/...`` on port 16686) over a :class:`TraceRecorder`.

A pure handler, ``JaegerQuery.handle(method, path, query) -> (status, body)``, independent of any
server: the caller serves it (behind its own authentication) and writes ``body`` as JSON. What a
client sees follows jaeger-query v1: the ``structuredResponse`` envelope ``{"data", "total",
"limit", "offset", "errors"}`` (``total`` is filled by the services and operations endpoints
only, as there), the UI JSON model of traces (``traceID``/``spans``/``processes``, spans with
``references``, µs ``startTime``/``duration``, typed ``tags``, ``logs``, ``processID``), and
its error strings (``parameter 'service' is required``, ``trace not found``, ``unable to parse
param 'minDuration': time: unknown unit "x" in duration "5x"``, …) with their status codes.

Search follows Jaeger's in-memory store: a trace matches when one of its spans has the service,
the operation, a duration within [minDuration, maxDuration], a start within [start, end] and
every queried tag (among the span's tags, its process's tags and its log fields, compared as
strings); the newest ``limit`` matching traces are returned, newest first.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any, Optional
from urllib.parse import unquote

from .recorder import (
    CLIENT,
    STRIDE,
    ActiveTrace,
    Process,
    Span,
    TraceRecorder,
    duration_us,
    edges,
    format_span_id,
    format_trace_id,
    is_error,
    raw_kind,
    resolve,
)

Query = dict[str, list[str]]
Response = tuple[int, Any]

DEFAULT_LIMIT = 100  # jaeger-query's defaultQueryLimit
DEFAULT_TRACE_LOOKBACK_US = 2 * 24 * 3600 * 10**6  # defaultTraceQueryLookbackDuration: 2 days
DEFAULT_DEPENDENCY_LOOKBACK_MS = 24 * 3600 * 1000  # defaultDependencyLookbackDuration: 24 h
# A span starts after its trace and well within this of it (the ingress gives up after 10 s):
# lets a time-bounded search skip whole traces without rebuilding them.
_SPAN_SLACK_US = 10 * 60 * 10**6


class ParamError(Exception):
    """A request Jaeger answers with 400 and this message."""


# -- Go's time.ParseDuration, whose syntax (and error text) minDuration/maxDuration use ---------
_UNITS_NS = {"ns": 1, "us": 10**3, "\u00b5s": 10**3, "\u03bcs": 10**3, "ms": 10**6, "s": 10**9,
             "m": 60 * 10**9, "h": 3600 * 10**9}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def go_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_go_duration(text: str, extra_units: Optional[dict[str, int]] = None) -> int:
    """Nanoseconds of a Go duration string (``1.5s``, ``300ms``, ``1h30m``, ``-2us``)."""
    units = _UNITS_NS if not extra_units else {**_UNITS_NS, **extra_units}
    s = text
    sign = 1
    if s[:1] in ("-", "+"):
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if s == "0":
        return 0
    if not s:
        raise ValueError(f"time: invalid duration {go_quote(text)}")
    total = 0.0
    pos = 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        assert m is not None  # every group may be empty, so the pattern always matches
        whole, frac, unit = m.group(1), m.group(2), m.group(3)
        if not whole and not frac:
            raise ValueError(f"time: invalid duration {go_quote(text)}")
        if not unit:
            raise ValueError(f"time: missing unit in duration {go_quote(text)}")
        if unit not in units:
            raise ValueError(f"time: unknown unit {go_quote(unit)} in duration {go_quote(text)}")
        total += float(f"{whole or '0'}.{frac or '0'}") * units[unit]
        pos = m.end()
    return sign * round(total)


def _first(query: Query, name: str) -> str:
    """Go's ``FormValue``: the first value, "" when absent."""
    values = query.get(name)
    return values[0] if values else ""


def _go_parse_int(text: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"strconv.ParseInt: parsing {go_quote(text)}: value out of range")
    return value


def parse_trace_id(text: str) -> int:
    """Jaeger's ``TraceIDFromString``: up to 32 hex digits (fewer are zero-padded)."""
    if len(text) > 32:
        raise ValueError(f"TraceID cannot be longer than 32 hex characters: {text}")
    parts = [text[:-16], text[-16:]] if len(text) > 16 else [text]
    for part in parts:
        if not re.fullmatch(r"[0-9a-fA-F]+", part):
            raise ValueError(f"strconv.ParseUint: parsing {go_quote(part)}: invalid syntax")
    return int(text, 16)


# -- JSON rendering (Jaeger's UI model) ---------------------------------------------------------
def _kv(key: str, value: Any) -> dict[str, Any]:
    kind = "bool" if isinstance(value, bool) else "int64" if isinstance(value, int) else \
        "float64" if isinstance(value, float) else "string"
    return {"key": key, "type": kind, "value": value}


@functools.lru_cache(maxsize=4096)
def _process_items(p: Process) -> tuple[tuple[str, str], ...]:
    """OpenTelemetry's Kubernetes resource attributes, as Jaeger shows a process's tags."""
    items = []
    if p.namespace:
        items.append(("k8s.namespace.name", p.namespace))
    if p.pod:
        items += [("k8s.pod.name", p.pod), ("host.name", p.pod)]
    if p.node:
        items.append(("k8s.node.name", p.node))
    return tuple(items)


def _tag_items(kind: str, operation: str, status: int, error: bool, message: str,
               peer: str) -> list[tuple[str, Any]]:
    """Tags as an OpenTelemetry-instrumented HTTP service's spans carry them through Jaeger (one
    definition for what is served and what a tag search matches)."""
    items: list[tuple[str, Any]] = [("span.kind", kind), ("http.method", "POST")]
    if kind == CLIENT:
        items += [("peer.service", peer), ("http.url", f"http://{peer}/{operation}")]
    else:
        items.append(("http.route", f"/{operation}"))
    items.append(("http.status_code", status))
    if error:
        items += [("error", True), ("otel.status_code", "ERROR")]
        if message:
            items.append(("otel.status_description", message))
    return items


def _log_items(error: bool, message: str, exception_type: str, stacktrace: str) -> list[tuple[str, str]]:
    """OpenTelemetry's exception event (``record_exception``), logged at the span's end."""
    if not error or not message:
        return []
    items = [("event", "exception")]
    if exception_type:
        items.append(("exception.type", exception_type))
    items.append(("exception.message", message))
    if stacktrace:
        items.append(("exception.stacktrace", stacktrace))
    return items


def span_tags(s: Span) -> list[dict[str, Any]]:
    return [_kv(k, v) for k, v in _tag_items(s.kind, s.operation, s.status_code, s.error, s.message, s.peer_service)]


def span_logs(s: Span) -> list[dict[str, Any]]:
    fields = _log_items(s.error, s.message, s.exception_type, s.stacktrace)
    return [{"timestamp": s.end_us, "fields": [_kv(k, v) for k, v in fields]}] if fields else []


def trace_json(trace_id: int, spans: list[Span]) -> dict[str, Any]:
    tid = format_trace_id(trace_id)
    pids: dict[Process, str] = {}
    out = []
    for s in spans:
        pid = pids.setdefault(s.process, f"p{len(pids) + 1}")
        refs = [] if s.parent_span_id is None else \
            [{"refType": "CHILD_OF", "traceID": tid, "spanID": format_span_id(s.parent_span_id)}]
        out.append({"traceID": tid, "spanID": format_span_id(s.span_id), "operationName": s.operation,
                    "references": refs, "startTime": s.start_us, "duration": s.duration_us,
                    "tags": span_tags(s), "logs": span_logs(s), "processID": pid, "warnings": None})
    processes = {pid: {"serviceName": p.service, "tags": [_kv(k, v) for k, v in _process_items(p)]}
                 for p, pid in pids.items()}
    return {"traceID": tid, "spans": out, "processes": processes, "warnings": None}


def _tag_string(value: Any) -> str:
    """Jaeger's ``KeyValue.AsString``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _flat_tags(process: Process, kind: str, operation: str, status: int, error: bool, message: str, peer: str,
               exception_type: str, stacktrace: str) -> set[tuple[str, str]]:
    """What Jaeger's store matches a tag query against: the span's tags, its process's tags and
    its logs' fields, as strings."""
    flat = {(k, _tag_string(v)) for k, v in _tag_items(kind, operation, status, error, message, peer)}
    flat.update(_process_items(process))
    flat.update(_log_items(error, message, exception_type, stacktrace))
    return flat


def envelope(data: Any, *, total: int = 0, errors: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    return {"data": data, "total": total, "limit": 0, "offset": 0, "errors": errors}


def error_response(status: int, message: str) -> Response:
    return status, envelope(None, errors=[{"code": status, "msg": message}])


class JaegerQuery:
    """``handle`` answers one request; ``now_us`` is the virtual clock (µs since the epoch),
    which the defaults of ``end``/``endTs`` and the lookbacks are taken from."""

    def __init__(self, recorder: TraceRecorder, now_us: Callable[[], int]) -> None:
        self.recorder = recorder
        self.now_us = now_us
        self._ops_cache: tuple[tuple[int, int], dict[str, set[tuple[str, str]]]] = ((-1, -1), {})

    def handle(self, method: str, path: str, query: Optional[Query] = None) -> Response:
        query = query or {}
        path = path.split("?", 1)[0]
        parts = path.split("/")
        if len(parts) < 3 or parts[0] != "" or parts[1] != "api":
            return error_response(404, "404 page not found")
        route = parts[2:]
        try:
            if route == ["services"]:
                handler: Callable[[], Response] = self._services
            elif len(route) == 3 and route[0] == "services" and route[2] == "operations" and route[1]:
                service = unquote(route[1])
                handler = functools.partial(self._operations_legacy, service)
            elif route == ["operations"]:
                handler = functools.partial(self._operations, query)
            elif route == ["traces"]:
                handler = functools.partial(self._search, query)
            elif len(route) == 2 and route[0] == "traces" and route[1]:
                trace_id = unquote(route[1])
                handler = functools.partial(self._trace, trace_id)
            elif route == ["dependencies"]:
                handler = functools.partial(self._dependencies, query)
            else:
                return error_response(404, "404 page not found")
            if method.upper() not in ("GET", "HEAD"):
                return error_response(405, f"method {method.upper()} not allowed")
            return handler()
        except ParamError as exc:
            return error_response(400, str(exc))

    # -- services and operations --------------------------------------------------------------
    def _services(self) -> Response:
        names = sorted({p.service for p in self.recorder.processes()})
        return 200, envelope(names, total=len(names))

    def _operations_by_service(self) -> dict[str, set[tuple[str, str]]]:
        version = self.recorder.version()
        if self._ops_cache[0] != version:
            seen: set[tuple[int, str, str]] = set()  # (process, operation, kind)
            for t in self.recorder.traces():
                raw = t.raw[:]
                for i in range(0, len(raw) - STRIDE + 1, STRIDE):
                    seen.add((raw[i + 1], raw[i + 2], raw_kind(raw[i + 6])))
            ops: dict[str, set[tuple[str, str]]] = {}
            for proc, op, kind in seen:
                ops.setdefault(self.recorder.process(proc).service, set()).add((op, kind))
            self._ops_cache = (version, ops)
        return self._ops_cache[1]

    def _operations_legacy(self, service: str) -> Response:
        names = sorted({name for name, _ in self._operations_by_service().get(service, ())})
        return 200, envelope(names, total=len(names))

    def _operations(self, query: Query) -> Response:
        service = _first(query, "service")
        if not service:
            raise ParamError("parameter 'service' is required")
        kind = _first(query, "spanKind")
        ops = sorted(op for op in self._operations_by_service().get(service, ()) if not kind or op[1] == kind)
        data = [{"name": name, "spanKind": k} for name, k in ops]
        return 200, envelope(data, total=len(data))

    # -- traces --------------------------------------------------------------------------------
    def _time_param(self, query: Query, name: str, scale: int, default: int) -> int:
        text = _first(query, name)
        if not text:
            return default
        try:
            return _go_parse_int(text) * scale
        except ValueError as exc:
            raise ParamError(f"unable to parse param '{name}': {exc}") from None

    def _duration_param(self, query: Query, name: str) -> int:
        """µs of minDuration/maxDuration (0: not given)."""
        text = _first(query, name)
        if not text:
            return 0
        try:
            return parse_go_duration(text) // 1000
        except ValueError as exc:
            raise ParamError(f"unable to parse param '{name}': {exc}") from None

    def _search(self, query: Query) -> Response:
        now = self.now_us()
        end = self._time_param(query, "end", 1, now)
        lookback = _first(query, "lookback")
        default_start = now - DEFAULT_TRACE_LOOKBACK_US
        if lookback and lookback != "custom":
            # jaeger-query ignores lookback (its UI turns it into start); honoured here when
            # start is absent, for clients that send only lookback
            try:
                default_start = end - parse_go_duration(lookback, {"d": 24 * 3600 * 10**9,
                                                                   "w": 7 * 24 * 3600 * 10**9}) // 1000
            except ValueError as exc:
                raise ParamError(f"unable to parse param 'lookback': {exc}") from None
        start = self._time_param(query, "start", 1, default_start)
        tags = self._tags(query)
        limit_text = _first(query, "limit")
        try:
            limit = _go_parse_int(limit_text) if limit_text else DEFAULT_LIMIT
        except ValueError as exc:
            raise ParamError(str(exc)) from None
        min_us = self._duration_param(query, "minDuration")
        max_us = self._duration_param(query, "maxDuration")
        trace_ids = []
        for text in query.get("traceID", []):
            try:
                trace_ids.append((text, parse_trace_id(text)))
            except ValueError as exc:
                raise ParamError(f"cannot parse traceID param: {exc}") from None
        service = _first(query, "service")
        if not trace_ids and not service:
            raise ParamError("parameter 'service' is required")
        if min_us and max_us and max_us < min_us:
            raise ParamError("'maxDuration' should be greater than 'minDuration'")
        if trace_ids:
            return self._by_ids(trace_ids)
        operation = _first(query, "operation")
        procs = {i for i, p in enumerate(self.recorder.process_table()) if p.service == service}
        found: list[dict[str, Any]] = []
        for t in reversed(self.recorder.traces()):  # newest first
            if t.start_us > end or t.start_us < start - _SPAN_SLACK_US:
                continue
            if not self._candidate(t, procs, operation, min_us, max_us, tags):
                continue
            spans = resolve(self.recorder, t)
            # a trace well inside the window has all its spans inside; one near an edge is checked
            inside = start < t.start_us and t.start_us + _SPAN_SLACK_US < end
            if inside or any(self._span_matches(s, service, operation, min_us, max_us, start, end, tags)
                             for s in spans):
                found.append(trace_json(t.trace_id, spans))
                if 0 < limit <= len(found):
                    break
        return 200, envelope(found)

    def _tags(self, query: Query) -> dict[str, str]:
        tags: dict[str, str] = {}
        for tag in query.get("tag", []):
            key, sep, value = tag.partition(":")
            if not sep:
                raise ParamError(f"malformed 'tag' parameter, expecting key:value, received: {tag}")
            tags[key] = value
        for text in query.get("tags", []):
            try:
                parsed = json.loads(text)
            except ValueError as exc:
                raise ParamError(f"malformed 'tags' parameter, cannot unmarshal JSON: {exc}") from None
            if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
                raise ParamError("malformed 'tags' parameter, cannot unmarshal JSON: "
                                 "json: cannot unmarshal into Go value of type map[string]string")
            tags.update(parsed)
        return tags

    def _candidate(self, t: ActiveTrace, procs: set[int], operation: str, min_us: int, max_us: int,
                   tags: dict[str, str]) -> bool:
        """Has the trace a span of the service matching everything but the time window? Read on
        the stored spans, before the trace is rebuilt."""
        raw = t.raw[:]
        for i in range(0, len(raw) - STRIDE + 1, STRIDE):
            if raw[i + 1] not in procs or (operation and raw[i + 2] != operation):
                continue
            dur = duration_us(raw[i + 4])
            if (min_us and dur < min_us) or (max_us and dur > max_us):
                continue
            if tags and not _raw_tags_match(self.recorder, raw, i, tags):
                continue
            return True
        return False

    @staticmethod
    def _span_matches(s: Span, service: str, operation: str, min_us: int, max_us: int, start: int, end: int,
                      tags: dict[str, str]) -> bool:
        if s.process.service != service or (operation and s.operation != operation):
            return False
        if (min_us and s.duration_us < min_us) or (max_us and s.duration_us > max_us):
            return False
        if s.start_us < start or s.start_us > end:
            return False
        if tags:
            flat = _flat_tags(s.process, s.kind, s.operation, s.status_code, s.error, s.message, s.peer_service,
                              s.exception_type, s.stacktrace)
            return all((k, v) in flat for k, v in tags.items())
        return True

    def _by_ids(self, trace_ids: list[tuple[str, int]]) -> Response:
        data, errors = [], []
        for text, tid in trace_ids:
            t = self.recorder.get(tid)
            if t is None:
                errors.append({"msg": "trace not found", "traceID": text})
            else:
                data.append(trace_json(t.trace_id, resolve(self.recorder, t)))
        return 200, envelope(data, errors=errors or None)

    def _trace(self, text: str) -> Response:
        try:
            tid = parse_trace_id(text)
        except ValueError as exc:
            return error_response(400, str(exc))
        t = self.recorder.get(tid)
        if t is None:
            return error_response(404, "trace not found")
        return 200, envelope([trace_json(t.trace_id, resolve(self.recorder, t))])

    # -- dependencies ----------------------------------------------------------------------------
    def _within(self, t: ActiveTrace, start_us: int, end_us: int) -> bool:
        """Jaeger's ``traceIsBetweenStartAndEnd``: a span started within (start, end). Spans start
        at or after their request and within the slack of it, so only traces near an edge of the
        window are rebuilt to find out."""
        if t.start_us >= end_us or t.start_us + _SPAN_SLACK_US <= start_us:
            return False
        if start_us < t.start_us and t.start_us + _SPAN_SLACK_US < end_us:
            return True
        return any(start_us < s.start_us < end_us for s in resolve(self.recorder, t))

    def _dependencies(self, query: Query) -> Response:
        now_ms = self.now_us() // 1000
        end_ms = self._time_param(query, "endTs", 1, now_ms)
        lookback_ms = self._time_param(query, "lookback", 1, DEFAULT_DEPENDENCY_LOOKBACK_MS)
        start_us, end_us = (end_ms - lookback_ms) * 1000, end_ms * 1000
        service = _first(query, "service")
        counts: dict[tuple[str, str], int] = {}
        for t in self.recorder.traces():
            if not self._within(t, start_us, end_us):
                continue
            for parent, child in edges(t):
                pair = (self.recorder.process(parent).service, self.recorder.process(child).service)
                if pair[0] != pair[1]:
                    counts[pair] = counts.get(pair, 0) + 1
        data = [{"parent": p, "child": c, "callCount": n} for (p, c), n in sorted(counts.items())
                if not service or service in (p, c)]
        return 200, envelope(data)


def _raw_tags_match(recorder: TraceRecorder, raw: list[Any], i: int, tags: dict[str, str]) -> bool:
    """The tag test of a search on a stored span (``raw[i:i + STRIDE]``), without building it."""
    status, extra = raw[i + 5], raw[i + 6]
    kind = raw_kind(extra)
    message = extra[0] if extra is not None else ""
    server = extra is not None and kind != CLIENT
    flat = _flat_tags(recorder.process(raw[i + 1]), kind, raw[i + 2], status, is_error(status, kind),
                      message, extra[1] if extra is not None and kind == CLIENT else "",
                      extra[1] if server else "", extra[2] if server else "")
    return all((k, v) in flat for k, v in tags.items())
