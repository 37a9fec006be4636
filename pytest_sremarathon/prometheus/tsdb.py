"""An in-memory time-series store shaped like Prometheus's head block.

A series is a frozen label set (``__name__`` included) with samples appended in time order.
Timestamps are kept as integer milliseconds, as Prometheus keeps them, so that window
boundaries (``(t - range, t]``) are exact integer comparisons rather than float guesses.

Memory. The twin scrapes at a fixed interval, so most series are perfectly regular: sample
``i`` is at ``t0 + i * step``. Such a series stores only its values (one ``array('d')``, 8
bytes a sample) and derives its timestamps; the first off-grid append (a missed scrape, a
jittered time) materialises an explicit ``array('q')`` of timestamps for that series alone
(16 bytes a sample from then on). Measured with ``tracemalloc``
(``_bytes_per_sample`` in tests/prometheus/test_prom_tsdb.py: six labels a series, a unique
pod name each): 2,000 regular series x 1,440 samples (12 h at 30 s) cost 9.8 bytes a sample
all included (8 for the value, ~0.5 of array growth slack, ~1.9 kB a series of labels,
index and objects spread over its samples); off-grid series cost 18.4 bytes a sample.

Scrapes. A scraper that appends the same series every scrape (one target's) can keep them in
a :class:`Block`: a scrape is then one extend of the block's ``array('d')`` of rows, and the
rows are moved into their series (one strided slice each, on the series' grid) when the store
is next read — the twin's scrape appends thousands of series a tick and is read at the
agent's pace.

Retention. Samples older than ``head - retention`` are never returned, and are dropped from
memory in sweeps (every ``retention / 16`` of data time), which also forget series left with
no sample. ``max_series`` bounds the cardinality: a new series past it is refused.
"""

from __future__ import annotations

import math
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache

# A label set: (name, value) pairs sorted by name, no empty values. Tuples are hashable and
# compare the way Prometheus orders label sets (pairwise, name then value).
Labels = tuple[tuple[str, str], ...]
LabelsLike = Labels | Mapping[str, str]

METRIC_NAME = "__name__"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


def make_labels(labels: LabelsLike) -> Labels:
    """Normalise to the canonical sorted tuple; an empty value means "no such label"
    (Prometheus treats the two the same everywhere)."""
    items = labels.items() if isinstance(labels, Mapping) else labels
    return tuple(sorted((str(k), str(v)) for k, v in items if v != ""))


def label_get(labels: Labels, name: str) -> str:
    for k, v in labels:
        if k == name:
            return v
    return ""


def labels_dict(labels: Labels) -> dict[str, str]:
    return dict(labels)


def valid_label_name(name: str) -> bool:
    return bool(_LABEL_NAME.match(name))


def valid_metric_name(name: str) -> bool:
    return bool(_METRIC_NAME.match(name))


def labels_str(labels: Labels) -> str:
    """``name{a="b", ...}`` as Prometheus prints a series in error messages."""
    name = label_get(labels, METRIC_NAME)
    rest = ", ".join(f'{k}="{v}"' for k, v in labels if k != METRIC_NAME)
    return f"{name}{{{rest}}}"


def to_ms(seconds: float) -> int:
    """Seconds (float) to Prometheus's integer milliseconds, rounding to the nearest ms."""
    return round(seconds * 1000.0)


# --- matchers -------------------------------------------------------------------------------

class MatchOp(Enum):
    EQ = "="
    NEQ = "!="
    RE = "=~"
    NRE = "!~"


# RE2 (which Prometheus uses) spells POSIX classes inside brackets; Python's re does not know
# them, so they are rewritten to their ASCII ranges before compiling.
_POSIX_CLASSES = {
    "[:alnum:]": "0-9A-Za-z", "[:alpha:]": "A-Za-z", "[:ascii:]": "\\x00-\\x7F",
    "[:blank:]": "\\t ", "[:cntrl:]": "\\x00-\\x1F\\x7F", "[:digit:]": "0-9",
    "[:graph:]": "!-~", "[:lower:]": "a-z", "[:print:]": " -~",
    "[:punct:]": "!-/:-@\\[-`{-~", "[:space:]": "\\t\\n\\v\\f\\r ", "[:upper:]": "A-Z",
    "[:word:]": "0-9A-Za-z_", "[:xdigit:]": "0-9A-Fa-f",
}


@lru_cache(maxsize=4096)
def compile_anchored(pattern: str) -> re.Pattern[str]:
    """Compile a label regex the way Prometheus does: fully anchored, ``.`` matching newlines
    (``^(?s:pattern)$``). Raises ``re.error`` on a pattern Python cannot compile."""
    for posix, ranges in _POSIX_CLASSES.items():
        pattern = pattern.replace(posix, ranges)
    return re.compile(f"(?s:{pattern})")


@dataclass(frozen=True)
class Matcher:
    """One label matcher. A missing label matches as the empty string, as in Prometheus."""

    name: str
    op: MatchOp
    value: str
    regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, name: str, op: MatchOp | str, value: str) -> Matcher:
        mop = op if isinstance(op, MatchOp) else MatchOp(op)
        rx = compile_anchored(value) if mop in (MatchOp.RE, MatchOp.NRE) else None
        return cls(name, mop, value, rx)

    def matches(self, value: str) -> bool:
        if self.op is MatchOp.EQ:
            return value == self.value
        if self.op is MatchOp.NEQ:
            return value != self.value
        assert self.regex is not None
        hit = self.regex.fullmatch(value) is not None
        return hit if self.op is MatchOp.RE else not hit

    def __str__(self) -> str:
        return f'{self.name}{self.op.value}"{self.value}"'


# --- series ---------------------------------------------------------------------------------

class OutOfOrderSample(ValueError):
    pass


class SeriesLimitExceeded(RuntimeError):
    pass


class Series:
    """One series' samples. ``times`` is None while the series is regular (see module doc)."""

    __slots__ = ("id", "label_map", "labels", "step", "t0", "times", "values")

    def __init__(self, sid: int, labels: Labels) -> None:
        self.id = sid
        self.labels = labels
        self.label_map = dict(labels)  # matcher evaluation without a scan of the tuple
        self.values: array[float] = array("d")
        self.times: array[int] | None = None
        self.t0 = 0
        self.step = 0  # 0 until the second sample fixes the grid

    def __len__(self) -> int:
        return len(self.values)

    def time(self, i: int) -> int:
        if self.times is not None:
            return self.times[i]
        return self.t0 + i * self.step

    @property
    def last_time(self) -> int:
        return self.time(len(self.values) - 1)

    def index_after(self, t: int) -> int:
        """Index of the first sample strictly after ``t`` (so ``(lo, hi]`` is
        ``[index_after(lo), index_after(hi))``)."""
        n = len(self.values)
        if self.times is not None:
            return bisect_right(self.times, t)
        if n == 0 or t < self.t0:
            return 0
        if self.step == 0:
            return 1  # one sample at t0 <= t
        return min(n, (t - self.t0) // self.step + 1)

    def window(self, lo: int, hi: int) -> tuple[list[int], list[float]]:
        """Times and values of the samples in ``(lo, hi]``."""
        i, j = self.index_after(lo), self.index_after(hi)
        if i >= j:
            return [], []
        if self.times is not None:
            ts = list(self.times[i:j])
        else:
            ts = list(range(self.t0 + i * self.step, self.t0 + j * self.step, self.step)) \
                if self.step else [self.t0]
        return ts, list(self.values[i:j])

    def append(self, t: int, v: float) -> bool:
        """Append one sample; False for an exact duplicate of the newest (ignored, as
        Prometheus ignores a re-scrape), ``OutOfOrderSample`` for anything older."""
        vals = self.values
        n = len(vals)
        times = self.times
        if times is None:
            if n >= 2:
                expected = self.t0 + n * self.step
                if t != expected:  # the hot path (on the grid) skips all of this
                    if t <= expected - self.step:
                        return self._refuse(t, v)
                    # Off the grid: from here on this series keeps explicit timestamps.
                    times = self.times = array("q", range(self.t0, expected, self.step))
                    times.append(t)
            elif n == 1:
                if t <= self.t0:
                    return self._refuse(t, v)
                self.step = t - self.t0
            else:
                self.t0 = t
        else:
            if t <= times[-1]:
                return self._refuse(t, v)
            times.append(t)
        vals.append(v)
        return True

    def _refuse(self, t: int, v: float) -> bool:
        last = self.values[-1]
        if t == self.last_time and (last == v or math.isnan(v) and math.isnan(last)):
            return False
        raise OutOfOrderSample(f"out of order sample for {labels_str(self.labels)}")

    def drop_before(self, cutoff: int) -> None:
        """Forget samples older than ``cutoff``."""
        k = self.index_after(cutoff - 1)
        if k == 0:
            return
        del self.values[:k]
        if self.times is not None:
            del self.times[:k]
        else:
            self.t0 += k * self.step


@dataclass(frozen=True)
class MetricMetadata:
    type: str = "unknown"  # counter, gauge, histogram, summary, info, stateset, unknown
    help: str = ""
    unit: str = ""


class Block:
    """Series a scraper appends together at every scrape (one target's), kept as rows — one
    ``array('d')`` extend a scrape instead of one append a series — and moved into the series
    when the store is next read (every read method flushes first). A scrape whose set of
    series differs from the block's starts a new segment of rows (a target that gains a series,
    a pod whose state series changed); the segments move in order."""

    __slots__ = ("db", "refs", "times", "rows", "done", "_source", "_width")

    def __init__(self, db: TSDB) -> None:
        self.db = db
        self.refs: list[int] = []
        self.times: list[int] = []
        self.rows: array[float] = array("d")
        self.done: list[tuple[list[int], list[int], array[float]]] = []  # earlier segments
        self._source: object = None  # the caller's refs list the rows were appended with …
        self._width = 0  # … and its length then (a list that only grows is unchanged at the same length)

    def append(self, t: float, refs: Sequence[int], values: Sequence[float]) -> None:
        """One scrape: ``values[i]`` of series ``refs[i]`` at ``t`` seconds."""
        tm = round(t * 1000.0)
        times = self.times
        if not times or tm <= times[-1] or not (refs is self._source and len(refs) == self._width
                                                 or refs == self.refs):
            self.db._start_block(self, tm, refs)
            times = self.times
        times.append(tm)
        self.rows.extend(values)
        db = self.db
        if db.head_ms is None or tm > db.head_ms:
            db.head_ms = tm
            db._maybe_sweep()
        elif tm < db._oldest_ms:
            db._oldest_ms = tm


class TSDB:
    """The store. Not thread-safe: the twin appends and queries under its world lock."""

    def __init__(self, retention: float = 24 * 3600.0, max_series: int | None = None) -> None:
        if retention <= 0:
            raise ValueError("retention must be positive")
        self.retention_ms = to_ms(retention)
        self.max_series = max_series
        self._series: dict[int, Series] = {}
        self._by_labels: dict[Labels, int] = {}
        # Postings: label name -> value -> ids, as Prometheus's inverted index.
        self._postings: dict[str, dict[str, set[int]]] = {}
        self._next_id = 1
        self.head_ms: int | None = None  # newest timestamp appended
        # No sample is older than this (the first time appended, the earliest since, or the
        # last sweep's cutoff): while retention reaches back past it a sweep has nothing to
        # drop, and is skipped (it would move every block's rows into their series to find out).
        self._oldest_ms = 0
        self._next_sweep: int | None = None
        self.metadata: dict[str, MetricMetadata] = {}
        # Labels of series forgotten by retention, by id: an appender holding an old ref
        # (a pod silent longer than retention that comes back) gets its series back.
        self._forgotten: dict[int, Labels] = {}
        self._pending: dict[int, Block] = {}  # blocks holding rows not yet in their series
        #: Called before each read (not before a sweep): a scraper that records lazily moves
        #: what it holds into its blocks then.
        self.before_read: Callable[[], None] | None = None
        self._reading = False

    # -- writing ----------------------------------------------------------------------------

    def ref(self, labels: LabelsLike) -> int:
        """The id of the series with these labels, created if new (an appender's ref)."""
        key = labels if isinstance(labels, tuple) else make_labels(labels)
        sid = self._by_labels.get(key)
        if sid is not None:
            return sid
        if isinstance(labels, tuple):
            key = make_labels(labels)  # a caller's tuple may be unsorted
            sid = self._by_labels.get(key)
            if sid is not None:
                return sid
        if not label_get(key, METRIC_NAME):
            raise ValueError(f"series without a metric name: {key!r}")
        if self.max_series is not None and len(self._series) >= self.max_series:
            raise SeriesLimitExceeded(f"series limit {self.max_series} reached")
        sid = self._next_id
        self._next_id += 1
        self._add(sid, key)
        return sid

    def append(self, labels: LabelsLike | int, t: float, value: float) -> int:
        """Append a sample at ``t`` seconds; returns the series ref for cheaper next appends.
        A sample older than the series' newest is refused; the same one again is ignored."""
        self.flush()
        sid = labels if isinstance(labels, int) else self.ref(labels)
        s = self._series.get(sid)
        if s is None:  # (not `or`: an empty Series is falsy)
            s = self._revive(sid)
        tm = to_ms(t)
        s.append(tm, float(value))
        if self.head_ms is None or tm > self.head_ms:
            self.head_ms = tm
            self._maybe_sweep()
        elif tm < self._oldest_ms:
            self._oldest_ms = tm
        return sid

    def append_many(self, t: float, samples: Iterable[tuple[LabelsLike | int, float]]) -> None:
        """One scrape: every sample at the same timestamp (the fast path for the twin's
        scraper: the time is converted and the head moved once)."""
        self.flush()
        tm = to_ms(t)
        series = self._series
        for key, value in samples:
            sid = key if isinstance(key, int) else self.ref(key)
            s = series.get(sid)
            if s is None:
                s = self._revive(sid)
            s.append(tm, float(value))
        if self.head_ms is None or tm > self.head_ms:
            self.head_ms = tm
            self._maybe_sweep()
        elif tm < self._oldest_ms:
            self._oldest_ms = tm

    def block(self) -> Block:
        """A :class:`Block` for a group of series a scraper appends together every scrape."""
        return Block(self)

    def _start_block(self, block: Block, tm: int, refs: Sequence[int]) -> None:
        """``block`` is about to take a row of other series (a new segment), or an earlier
        time (its rows move first)."""
        if block.times:
            if tm <= block.times[-1]:
                self._flush_block(block)
            else:
                block.done.append((block.refs, block.times, block.rows))
                block.times, block.rows = [], array("d")
        block.refs = list(refs)
        block._source, block._width = refs, len(refs)
        self._pending[id(block)] = block

    def _ready(self) -> None:
        """What a read needs first: the lazy scrapers' data, then every block's rows."""
        hook = self.before_read
        if hook is not None and not self._reading:
            self._reading = True
            try:
                hook()
            finally:
                self._reading = False
        self.flush()

    def flush(self) -> None:
        """Move every block's pending rows into their series (each read does it first)."""
        if self._pending:
            for block in list(self._pending.values()):
                self._flush_block(block)

    def _flush_block(self, block: Block) -> None:
        segments = [*block.done, (block.refs, block.times, block.rows)]
        block.done, block.times, block.rows = [], [], array("d")
        self._pending.pop(id(block), None)
        for refs, times, rows in segments:
            self._flush_rows(refs, times, rows)

    def _flush_rows(self, refs: list[int], times: list[int], rows: array[float]) -> None:
        n, width = len(times), len(refs)
        if not n or not width:
            return
        step = times[1] - times[0] if n > 1 else 0
        regular = n == 1 or all(times[k + 1] - times[k] == step for k in range(n - 1))
        series = self._series
        for i, sid in enumerate(refs):
            s = series.get(sid)
            if s is None:
                s = self._revive(sid)
            col = rows[i::width]
            if regular and s.times is None:  # rows on the series' grid (or starting it): one copy
                have = len(s.values)
                if have >= 2:
                    fits = times[0] == s.t0 + have * s.step and (n == 1 or step == s.step)
                elif have == 1:
                    gap = times[0] - s.t0
                    fits = gap > 0 and (n == 1 or gap == step)
                    if fits:
                        s.step = gap
                else:
                    fits = True
                    s.t0, s.step = times[0], step
                if fits:
                    s.values.extend(col)
                    continue
            for tm, v in zip(times, col):
                s.append(tm, v)

    def set_metadata(self, metric: str, type: str, help: str = "", unit: str = "") -> None:
        self.metadata[metric] = MetricMetadata(type, help, unit)

    def _maybe_sweep(self) -> None:
        assert self.head_ms is not None
        if self._next_sweep is None:
            self._oldest_ms = self.head_ms  # the first append
            self._next_sweep = self.head_ms + max(1, self.retention_ms // 16)
        elif self.head_ms >= self._next_sweep:
            if self.min_time_ms > self._oldest_ms:  # else nothing is out of retention yet
                self.sweep()
            self._next_sweep = self.head_ms + max(1, self.retention_ms // 16)

    def sweep(self) -> None:
        """Drop samples out of retention and the series left empty."""
        self.flush()
        cutoff = self.min_time_ms
        self._oldest_ms = max(self._oldest_ms, cutoff)
        for sid in list(self._series):
            s = self._series[sid]
            s.drop_before(cutoff)
            if not len(s.values):
                self._forget(s)

    def _revive(self, sid: int) -> Series:
        labels = self._forgotten.pop(sid, None)
        if labels is None:
            raise KeyError(f"no series with ref {sid}")
        if labels in self._by_labels:  # re-created meanwhile under a new ref
            return self._series[self._by_labels[labels]]
        self._add(sid, labels)
        return self._series[sid]

    def _add(self, sid: int, key: Labels) -> None:
        self._series[sid] = Series(sid, key)
        self._by_labels[key] = sid
        for name, value in key:
            self._postings.setdefault(name, {}).setdefault(value, set()).add(sid)

    def _forget(self, s: Series) -> None:
        self._forgotten[s.id] = s.labels
        del self._series[s.id]
        del self._by_labels[s.labels]
        for name, value in s.labels:
            values = self._postings[name]
            ids = values[value]
            ids.discard(s.id)
            if not ids:
                del values[value]
                if not values:
                    del self._postings[name]

    # -- reading ----------------------------------------------------------------------------

    @property
    def min_time_ms(self) -> int:
        """The oldest timestamp still inside retention."""
        if self.head_ms is None:
            return 0
        return self.head_ms - self.retention_ms

    def __len__(self) -> int:
        return len(self._series)

    def num_samples(self) -> int:
        self._ready()
        return sum(len(s.values) for s in self._series.values())

    def series(self, sid: int) -> Series:
        self._ready()
        return self._series[sid]

    def all_series(self) -> Iterator[Series]:
        self._ready()
        return iter(self._series.values())

    def select(self, matchers: Sequence[Matcher]) -> list[Series]:
        """Series matching every matcher, sorted by labels (as Prometheus returns them)."""
        self._ready()
        candidates: set[int] | None = None
        rest: list[Matcher] = []
        # Narrow with the postings of matchers that cannot match a missing label, smallest
        # first; the others are checked per candidate.
        narrowing: list[set[int]] = []
        for m in matchers:
            if m.op is MatchOp.EQ and m.value != "":
                narrowing.append(self._postings.get(m.name, {}).get(m.value, set()))
            elif m.op is MatchOp.RE and not m.matches(""):
                ids: set[int] = set()
                for value, vids in self._postings.get(m.name, {}).items():
                    if m.matches(value):
                        ids |= vids
                narrowing.append(ids)
            else:
                rest.append(m)
        for ids in sorted(narrowing, key=len):
            candidates = set(ids) if candidates is None else candidates & ids
            if not candidates:
                return []
        pool: Iterable[int] = self._series.keys() if candidates is None else candidates
        out = []
        for sid in pool:
            s = self._series[sid]
            lm = s.label_map
            if all(m.matches(lm.get(m.name, "")) for m in rest):
                out.append(s)
        out.sort(key=lambda s: s.labels)
        return out

    def series_in_range(self, matcher_sets: Sequence[Sequence[Matcher]] | None,
                        start_ms: int | None, end_ms: int | None) -> list[Series]:
        """Series matching any of the matcher sets (all series for None) with at least one
        sample in ``[start, end]`` (either bound open when None)."""
        self._ready()
        if matcher_sets is None:
            found: dict[int, Series] = dict(self._series)
        else:
            found = {}
            for ms in matcher_sets:
                for s in self.select(ms):
                    found[s.id] = s
        lo = max(self.min_time_ms, start_ms) if start_ms is not None else self.min_time_ms
        out = []
        for s in found.values():
            if not len(s.values):
                continue
            first_in = s.index_after(lo - 1)
            if first_in >= len(s.values):
                continue
            if end_ms is not None and s.time(first_in) > end_ms:
                continue
            out.append(s)
        out.sort(key=lambda s: s.labels)
        return out

    def label_names(self, matcher_sets: Sequence[Sequence[Matcher]] | None = None,
                    start_ms: int | None = None, end_ms: int | None = None) -> list[str]:
        names: set[str] = set()
        for s in self.series_in_range(matcher_sets, start_ms, end_ms):
            names.update(s.label_map)
        return sorted(names)

    def label_values(self, name: str, matcher_sets: Sequence[Sequence[Matcher]] | None = None,
                     start_ms: int | None = None, end_ms: int | None = None) -> list[str]:
        values: set[str] = set()
        for s in self.series_in_range(matcher_sets, start_ms, end_ms):
            v = s.label_map.get(name)
            if v is not None:
                values.add(v)
        return sorted(values)
