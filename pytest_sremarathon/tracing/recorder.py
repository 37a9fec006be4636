"""Spans of the sampled requests, recorded while the traffic engine runs the apps' handlers.

The recorder sits on the hottest path of a run (every ``ctx.call`` of every sampled request), so
its storage is shaped by that, not by the query side:

* one call per span, made when the span ends (``ActiveTrace.span``), which extends its trace's
  flat list by seven atomic values: no object with an ``__init__``, no second call at the
  span's start, no per-span id drawn from a random stream;
* nothing stored holds a reference to a container object (a process is an int, an error a
  tuple of strings), so the cyclic garbage collector does not walk the stored spans again and
  again: with a ``Process`` object in each span tuple, the collector's passes over the growing
  store cost three times the recording itself;
* spans arrive in *post-order* (a callee ends before its caller). Each carries its depth in the
  call tree and its start as an offset from its parent's start; the tree and the absolute times
  are rebuilt when a query reads the trace (:func:`resolve`), which is rare next to recording;
* span ids are derived from the trace id and the span's position (a bijective mix): unique
  within the trace and deterministic. Trace ids come from the ``random.Random`` the caller gives
  (a stream of its own, seeded by the run);
* a pod's process (service, namespace, pod, node) is interned once.

The traffic engine serves one sampled request at a time, so at most one trace is open; it is
stored when the next request begins (queries see it before that too), and the oldest traces are
dropped once ``max_traces`` are kept.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

# Span kinds (OpenTelemetry's SpanKind, as Jaeger shows it in the ``span.kind`` tag).
SERVER = "server"
CLIENT = "client"

INGRESS = "ingress"  # the process of spans recorded for the load balancer (``workload=None``)
DEFAULT_MAX_TRACES = 20_000

_MASK64 = (1 << 64) - 1


class Workload(Protocol):
    """What the recorder reads of the pod that served a span (the kubelet's ``Container`` has
    these attributes)."""

    @property
    def pod_uid(self) -> str: ...

    @property
    def pod_name(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def service(self) -> str: ...

    @property
    def node(self) -> str: ...


@dataclass(frozen=True)
class Process:
    """The emitter of a span, as Jaeger's ``processes`` map shows it: a service and the
    resource attributes of the pod it ran in."""

    service: str  # the Jaeger service name, e.g. "cart.shop"
    namespace: str = ""
    pod: str = ""
    node: str = ""


def default_service_name(namespace: str, service: str) -> str:
    """``cart.shop``: the three apps share service names (``frontend``, ``user``, …), and
    Jaeger's service list would merge them under a bare ``service.name``; the Service's DNS
    short name keeps them apart and reads as the Service an agent can ``kubectl get``."""
    return f"{service}.{namespace}" if namespace else service


# A stored span is STRIDE consecutive items of its trace's ``raw`` list:
#   depth, process index, operation, at_ms, duration_ms, status_code, extra
# ``extra``: None (success), (message, exception type, stacktrace) for a failed server span,
# (message, called service) for a client span.
STRIDE = 7


@dataclass(frozen=True)
class RawSpan:
    """One stored span, decoded (the query side's view of the flat list)."""

    position: int
    depth: int
    process: int
    operation: str
    at_ms: float
    duration_ms: float
    status_code: int
    extra: Optional[tuple[str, ...]]

    @property
    def kind(self) -> str:
        return raw_kind(self.extra)


def raw_spans(raw: list[Any]) -> Iterator[RawSpan]:
    for pos, i in enumerate(range(0, len(raw) - STRIDE + 1, STRIDE)):
        yield RawSpan(pos, *raw[i:i + STRIDE])


def raw_kind(extra: Optional[tuple[str, ...]]) -> str:
    """The kind of a stored span, from its ``extra`` item."""
    return CLIENT if extra is not None and len(extra) == 2 else SERVER


def is_error(status_code: int, kind: str) -> bool:
    """OpenTelemetry's HTTP rule: a server span is an error on a 5xx; a client span here always
    is (it stands for a call that reached no pod)."""
    return status_code >= 500 or kind == CLIENT


@dataclass(frozen=True)
class Span:
    """One span, resolved: what a query sees."""

    trace_id: int
    span_id: int
    parent_span_id: Optional[int]
    process: Process
    operation: str  # the endpoint (``place_order``)
    start_us: int  # virtual time, microseconds since the epoch
    duration_us: int
    status_code: int  # the HTTP status the span's server (or, for a client span, its callee) answered
    error: bool
    message: str = ""  # the exception message on errors
    exception_type: str = ""
    stacktrace: str = ""
    kind: str = SERVER
    peer_service: str = ""  # client spans: the service that was called

    @property
    def service(self) -> str:
        return self.process.service

    @property
    def end_us(self) -> int:
        return self.start_us + self.duration_us


class ActiveTrace:
    """One sampled request being recorded; ``span`` is the call the traffic engine makes."""

    __slots__ = ("trace_id", "start_us", "raw", "_ids", "_recorder")

    def __init__(self, recorder: TraceRecorder, trace_id: int, start_us: int) -> None:
        self.trace_id = trace_id
        self.start_us = start_us
        self.raw: list[Any] = []
        self._ids = recorder._process_ids  # bound here: one attribute hop less per span
        self._recorder = recorder

    def span(self, depth: int, workload: Optional[Workload], operation: str, at_ms: float,
             duration_ms: float, status_code: int = 200, error: Optional[str] = None,
             exception_type: str = "", stacktrace: str = "") -> None:
        """Record a server span that has ended.

        ``depth``: 1 for the entry service's span, one more per ``ctx.call`` level (0 is the
        load balancer's span, ``workload=None``). ``at_ms``: when the span started, after its
        parent's start. ``error``: the exception message when the request failed.
        """
        proc: Optional[int]
        if workload is None:
            proc = self._recorder._ingress()
        else:
            proc = self._ids.get(workload.pod_uid)
            if proc is None:
                proc = self._recorder._process(workload)
        self.raw.extend((depth, proc, operation, at_ms, duration_ms, status_code,
                         None if error is None else (error, exception_type, stacktrace)))

    def client_error(self, depth: int, caller: Optional[Workload], namespace: str, service: str, operation: str,
                     at_ms: float, duration_ms: float, status_code: int, error: str) -> None:
        """Record a call that never reached a pod of ``namespace/service`` (no endpoints,
        connection refused, a node down, a partition, DNS): the caller's client span is the only
        trace of it, as with OpenTelemetry's HTTP client instrumentation. ``depth`` is the depth
        the callee's server span would have had."""
        rec = self._recorder
        if caller is None:
            proc = rec._ingress()
        else:
            found = self._ids.get(caller.pod_uid)
            proc = found if found is not None else rec._process(caller)
        self.raw.extend((depth, proc, operation, at_ms, duration_ms, status_code,
                         (error, rec.service_name(namespace, service))))


@dataclass
class TraceRecorder:
    """Bounded store of traces; ``begin_trace`` per sampled request.

    ``rng`` draws the trace ids (and the sampling decision when ``sample < 1``): give it a
    stream of its own, seeded by the run, never the traffic's — drawing from the traffic's
    stream would change the simulation whenever tracing is switched on or off.
    """

    rng: random.Random
    max_traces: int = DEFAULT_MAX_TRACES
    sample: float = 1.0  # share of sampled requests traced (head sampling, deterministic via rng)
    service_name: Callable[[str, str], str] = default_service_name
    ingress_service: str = INGRESS
    _traces: deque[ActiveTrace] = field(default_factory=deque, init=False, repr=False)
    _by_id: dict[int, ActiveTrace] = field(default_factory=dict, init=False, repr=False)
    _process_ids: dict[str, int] = field(default_factory=dict, init=False, repr=False)  # pod uid -> index
    _process_list: list[Process] = field(default_factory=list, init=False, repr=False)
    _open: Optional[ActiveTrace] = field(default=None, init=False, repr=False)
    _ingress_seen: bool = field(default=False, init=False, repr=False)
    commits: int = field(default=0, init=False)  # traces ever stored: a cheap change counter for caches

    def __post_init__(self) -> None:
        if self.max_traces < 1:
            raise ValueError("max_traces must be at least 1")
        if not 0.0 <= self.sample <= 1.0:
            raise ValueError("sample must be within [0, 1]")
        self._process_list.append(Process(self.ingress_service))  # index 0: the load balancer

    # -- recording ------------------------------------------------------------------------
    def begin_trace(self, start_us: int) -> Optional[ActiveTrace]:
        """A sampled request enters at ``start_us`` (virtual µs); None when head sampling
        leaves it out (then the caller records nothing for it).

        The previous request's trace is stored now, if it has spans: the engine serves one
        request at a time, so it is complete, and a request that reached no pod (its entry
        Service had no endpoints) leaves nothing to evict a real trace for.
        """
        prev = self._open
        if prev is not None and prev.raw:
            self._commit(prev)
        if self.sample < 1.0 and self.rng.random() >= self.sample:
            self._open = None
            return None
        trace = ActiveTrace(self, self.rng.getrandbits(128) or 1, start_us)
        self._open = trace
        return trace

    def flush(self) -> None:
        """Store the open trace now (the end of a run; tests)."""
        prev, self._open = self._open, None
        if prev is not None and prev.raw:
            self._commit(prev)

    def _process(self, w: Workload) -> int:
        index = len(self._process_list)
        self._process_list.append(Process(self.service_name(w.namespace, w.service), w.namespace, w.pod_name,
                                          w.node))
        self._process_ids[w.pod_uid] = index
        return index

    def _ingress(self) -> int:
        self._ingress_seen = True
        return 0

    def _commit(self, trace: ActiveTrace) -> None:
        traces = self._traces
        if len(traces) >= self.max_traces:
            old = traces.popleft()
            if self._by_id.get(old.trace_id) is old:
                del self._by_id[old.trace_id]
        traces.append(trace)
        self._by_id[trace.trace_id] = trace
        self.commits += 1

    # -- reading (the query side; snapshots, so a query never sees a list change under it) -----
    def traces(self) -> list[ActiveTrace]:
        """Stored traces, oldest first, and the open one if it has spans (queries run between
        ticks, when the last request of a tick has been served)."""
        out = list(self._traces)
        open_trace = self._open
        if open_trace is not None and open_trace.raw:
            out.append(open_trace)
        return out

    def get(self, trace_id: int) -> Optional[ActiveTrace]:
        found = self._by_id.get(trace_id)
        open_trace = self._open
        if found is None and open_trace is not None and open_trace.trace_id == trace_id and open_trace.raw:
            return open_trace
        return found

    def version(self) -> tuple[int, int]:
        """Changes whenever a query could see something new (for the query side's caches)."""
        open_trace = self._open
        return self.commits, len(open_trace.raw) if open_trace is not None else -1

    def process(self, index: int) -> Process:
        return self._process_list[index]

    def processes(self) -> list[Process]:
        """Every process seen (kept after its traces are dropped, as Jaeger keeps services)."""
        procs = self._process_list[:]
        return procs if self._ingress_seen else procs[1:]

    def process_table(self) -> list[Process]:
        """Processes by the index stored spans hold."""
        return self._process_list[:]

    def __len__(self) -> int:
        return len(self._traces)


# -- ids ------------------------------------------------------------------------------------
def _mix64(x: int) -> int:
    """splitmix64's finaliser: a bijection on 64-bit ints, so distinct positions in a trace get
    distinct span ids."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK64
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK64
    return x ^ (x >> 31)


def span_id(trace_id: int, position: int) -> int:
    return _mix64(((trace_id & _MASK64) + position + 1) & _MASK64) or 1


def format_trace_id(trace_id: int) -> str:
    """Jaeger's rendering: 32 hex digits, or 16 when the high half is zero."""
    high = trace_id >> 64
    return f"{high:016x}{trace_id & _MASK64:016x}" if high else f"{trace_id:016x}"


def format_span_id(sid: int) -> str:
    return f"{sid:016x}"


# -- resolution -----------------------------------------------------------------------------
def resolve(recorder: TraceRecorder, trace: ActiveTrace) -> list[Span]:
    """The trace's spans in start order (a parent before its children), with parents, ids and
    absolute start times rebuilt from the post-order records."""
    raw = list(raw_spans(trace.raw[:]))  # a snapshot: the open trace may still be growing
    n = len(raw)
    parent: list[int] = [-1] * n
    waiting: list[int] = []  # ended spans whose parent has not ended yet
    for i in range(n):
        depth = raw[i].depth
        while waiting and raw[waiting[-1]].depth > depth:
            parent[waiting.pop()] = i
        waiting.append(i)
    children: list[list[int]] = [[] for _ in range(n)]
    roots: list[int] = []
    for i in range(n):
        (children[parent[i]] if parent[i] >= 0 else roots).append(i)
    tid = trace.trace_id
    out: list[Span] = []
    # pre-order walk: starts are offsets from the parent's start; children in the order they ran
    # (integer µs: a float of epoch milliseconds would lose the microseconds)
    stack: list[tuple[int, int, Optional[int]]] = [(i, trace.start_us, None) for i in reversed(roots)]
    while stack:
        i, base_us, parent_sid = stack.pop()
        r = raw[i]
        start_us = base_us + round(r.at_ms * 1000)
        sid = span_id(tid, i)
        out.append(_span(recorder, r, tid, sid, parent_sid, start_us))
        for c in reversed(children[i]):
            stack.append((c, start_us, sid))
    return out


def _span(recorder: TraceRecorder, r: RawSpan, trace_id: int, sid: int, parent_sid: Optional[int],
          start_us: int) -> Span:
    kind, extra = r.kind, r.extra
    server_extra = extra if extra is not None and kind == SERVER else None
    return Span(trace_id=trace_id, span_id=sid, parent_span_id=parent_sid, process=recorder.process(r.process),
                operation=r.operation, start_us=start_us, duration_us=duration_us(r.duration_ms),
                status_code=r.status_code, error=is_error(r.status_code, kind),
                message=extra[0] if extra is not None else "",
                exception_type=server_extra[1] if server_extra is not None else "",
                stacktrace=server_extra[2] if server_extra is not None else "",
                kind=kind, peer_service=extra[1] if extra is not None and kind == CLIENT else "")


def duration_us(duration_ms: float) -> int:
    return max(0, round(duration_ms * 1000))


def edges(trace: ActiveTrace) -> list[tuple[int, int]]:
    """(parent process, child process) of every span with a parent, from the stored spans (the
    reconstruction of :func:`resolve`, on the flat list, without building spans)."""
    raw = trace.raw[:]
    out = []
    waiting: list[int] = []  # positions in raw of ended spans whose parent has not ended yet
    for i in range(0, len(raw) - STRIDE + 1, STRIDE):
        depth = raw[i]
        while waiting and raw[waiting[-1]] > depth:
            out.append((raw[i + 1], raw[waiting.pop() + 1]))
        waiting.append(i)
    return out
