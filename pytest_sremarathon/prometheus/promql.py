"""PromQL evaluated over the TSDB.

The query is parsed by ``promql-parser`` (a maintained PromQL parser, Rust bindings) and its
AST is first compiled into the small dataclass tree below: that step is where every construct
this evaluator does not implement is refused, before any data is read, with a Prometheus-style
``bad_data`` error naming it. Evaluation then walks that tree at one instant; a range query is
the same walk at every step (subquery results are memoised per query so a range query does
not recompute them).

Semantics are Prometheus 3's: selectors look back 5 minutes (``--query.lookback-delta``) and
range selectors select ``(t - range, t]`` (left-open, as since 3.0); timestamps are integer
milliseconds; staleness markers do not exist here (a series that stops being scraped vanishes
from instant selectors once its last sample is older than the lookback).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

import promql_parser as pp

from .functions import (
    FUNCTIONS,
    KEEPS_LABELS,
    SPECIAL,
    Notes,
    fsum,
    go_div,
    go_mod,
    go_pow,
    quantile,
    stdvar,
)
from .tsdb import (
    METRIC_NAME,
    TSDB,
    Labels,
    Matcher,
    MatchOp,
    Series,
    labels_str,
    to_ms,
    valid_label_name,
)
from .values import (
    BadData,
    ExecutionError,
    Matrix,
    RangeSeries,
    Sample,
    Scalar,
    String,
    Unsupported,
    Value,
    Vector,
    drop_name,
    format_value,
)

DEFAULT_LOOKBACK = 300.0  # seconds, Prometheus's default lookback delta
DEFAULT_SUBQUERY_STEP = 60.0  # seconds: Prometheus's default evaluation_interval
MAX_POINTS = 11_000  # per series in a range query, as Prometheus refuses beyond
_T = TypeVar("_T")


# --- the compiled tree -----------------------------------------------------------------------

@dataclass(frozen=True)
class At:
    kind: str  # "at", "start", "end"
    ms: int = 0


@dataclass(frozen=True)
class NumberLit:
    value: float


@dataclass(frozen=True)
class StringLit:
    value: str


@dataclass(frozen=True)
class Selector:
    matchers: tuple[Matcher, ...]
    offset_ms: int = 0
    at: At | None = None
    range_ms: int | None = None  # None: an instant selector


@dataclass(frozen=True)
class Subquery:
    expr: Node
    range_ms: int
    step_ms: int | None
    offset_ms: int = 0
    at: At | None = None


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Node, ...]


@dataclass(frozen=True)
class Aggregate:
    op: str
    expr: Node
    param: Node | None
    without: bool  # by(...) when False; no clause at all is by() with no labels
    labels: frozenset[str]


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: Node
    rhs: Node
    card: str = "one-to-one"  # one-to-one, many-to-one, one-to-many, many-to-many
    on: bool = False
    matching: frozenset[str] = frozenset()
    include: tuple[str, ...] = ()
    return_bool: bool = False


@dataclass(frozen=True)
class Neg:
    expr: Node


Node = NumberLit | StringLit | Selector | Subquery | Call | Aggregate | Binary | Neg

ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "^", "atan2"})
COMPARISON = frozenset({"==", "!=", ">", "<", ">=", "<="})
SET_OPS = frozenset({"and", "or", "unless"})
AGGREGATIONS = frozenset({"sum", "avg", "min", "max", "count", "group", "stddev", "stdvar",
                          "topk", "bottomk", "quantile", "count_values"})

# The binding's enums compare with == but are not hashable: pairs, not dicts.
_CARD = (
    (pp.VectorMatchCardinality.OneToOne, "one-to-one"),
    (pp.VectorMatchCardinality.ManyToOne, "many-to-one"),
    (pp.VectorMatchCardinality.OneToMany, "one-to-many"),
    (pp.VectorMatchCardinality.ManyToMany, "many-to-many"),
)
_MATCH_OPS = ((pp.MatchOp.Equal, MatchOp.EQ), (pp.MatchOp.NotEqual, MatchOp.NEQ),
              (pp.MatchOp.Re, MatchOp.RE), (pp.MatchOp.NotRe, MatchOp.NRE))


def _lookup(pairs: Sequence[tuple[Any, _T]], key: Any) -> _T:
    for k, v in pairs:
        if k == key:
            return v
    raise Unsupported(f"parser construct {key}")


def _ms(td: timedelta | None) -> int:
    return 0 if td is None else round(td.total_seconds() * 1000)


def _at(at: Any) -> At | None:
    if at is None:
        return None
    if at.type == pp.AtModifierType.Start:
        return At("start")
    if at.type == pp.AtModifierType.End:
        return At("end")
    moment: datetime = at.at
    return At("at", round(moment.timestamp() * 1000))


def parse(query: str) -> Node:
    """Parse and compile a PromQL expression; ``BadData`` on a syntax error or an
    unsupported construct."""
    if not query.strip():
        raise BadData("parse error: no expression found in input")
    try:
        expr = pp.parse(query)
    except ValueError as e:
        raise BadData(f"parse error: {e}") from None
    return compile_expr(expr)


def compile_expr(e: pp.Expr) -> Node:
    if isinstance(e, pp.ParenExpr):
        return compile_expr(e.expr)
    if isinstance(e, pp.NumberLiteral):
        return NumberLit(float(e.val))
    if isinstance(e, pp.StringLiteral):
        return StringLit(e.val)
    if isinstance(e, pp.VectorSelector):
        return compile_selector(e, None)
    if isinstance(e, pp.MatrixSelector):
        return compile_selector(e.vector_selector, _ms(e.range))
    if isinstance(e, pp.UnaryExpr):
        return Neg(compile_expr(e.expr))
    if isinstance(e, pp.SubqueryExpr):
        step = _ms(e.step) if e.step is not None else None
        return Subquery(compile_expr(e.expr), _ms(e.range), step or None, _ms(e.offset),
                        _at(e.at))
    if isinstance(e, pp.Call):
        name = e.func.name
        if name not in FUNCTIONS and name not in SPECIAL:
            raise Unsupported(f"function {name}()")
        return Call(name, tuple(compile_expr(a) for a in e.args))
    if isinstance(e, pp.AggregateExpr):
        op = str(e.op)
        if op not in AGGREGATIONS:
            raise Unsupported(f"aggregation {op}()")
        mod = e.modifier
        without = mod is not None and mod.type == pp.AggModifierType.Without
        labels = frozenset(mod.labels) if mod is not None else frozenset()
        param = compile_expr(e.param) if e.param is not None else None
        return Aggregate(op, compile_expr(e.expr), param, without, labels)
    if isinstance(e, pp.BinaryExpr):
        return _compile_binary(e)
    raise Unsupported(f"expression {type(e).__name__}")


def compile_selector(vs: pp.VectorSelector, range_ms: int | None) -> Selector:
    matchers = []
    names = set()
    for m in vs.matchers.matchers:
        try:
            matchers.append(Matcher.of(m.name, _lookup(_MATCH_OPS, m.op), m.value))
        except re.error as err:  # an RE2 pattern that Python's re cannot express
            raise BadData(f"invalid regular expression {m.value!r}: {err}") from None
        names.add(m.name)
    if vs.matchers.or_matchers:
        raise Unsupported("the 'or' form of label matchers")
    if vs.name is not None and METRIC_NAME not in names:
        matchers.insert(0, Matcher.of(METRIC_NAME, MatchOp.EQ, vs.name))
    return Selector(tuple(matchers), _ms(vs.offset), _at(vs.at), range_ms)


def _compile_binary(e: pp.BinaryExpr) -> Binary:
    op = str(e.op)
    if op not in ARITHMETIC | COMPARISON | SET_OPS:
        raise Unsupported(f"binary operator {op}")
    mod = e.modifier
    lhs, rhs = compile_expr(e.lhs), compile_expr(e.rhs)
    if mod is None:
        card = "many-to-many" if op in SET_OPS else "one-to-one"
        return Binary(op, lhs, rhs, card)
    on = mod.matching is not None and mod.matching.type == pp.LabelModifierType.Include
    matching = frozenset(mod.matching.labels) if mod.matching is not None else frozenset()
    fill = mod.fill_values
    if fill is not None and (fill.lhs is not None or fill.rhs is not None):
        raise Unsupported("fill() modifiers of vector matching")
    include = tuple(mod.group_labels or ())
    return Binary(op, lhs, rhs, _lookup(_CARD, mod.card), on, matching, include,
                  bool(mod.return_bool))


# --- evaluation ------------------------------------------------------------------------------

@dataclass
class QueryResult:
    value: Value
    notes: Notes


@dataclass
class _Query:
    """Per-query state: the time bounds ``@ start()``/``@ end()`` refer to, caches, limits."""

    start: int
    end: int
    lookback: int
    notes: Notes = field(default_factory=Notes)
    selected: dict[tuple[Matcher, ...], list[Series]] = field(default_factory=dict)
    memo: dict[tuple[int, int], Value] = field(default_factory=dict)
    samples: int = 0


class Engine:
    """Evaluates PromQL over one TSDB. ``max_samples`` bounds the samples one query may load
    (as Prometheus's ``--query.max-samples``), so an agent's query cannot stall the twin."""

    def __init__(self, db: TSDB, lookback: float = DEFAULT_LOOKBACK,
                 max_samples: int = 5_000_000,
                 subquery_step: float = DEFAULT_SUBQUERY_STEP) -> None:
        self.db = db
        self.lookback_ms = to_ms(lookback)
        self.max_samples = max_samples
        self.subquery_step_ms = to_ms(subquery_step)

    # -- entry points ------------------------------------------------------------------------

    def instant(self, query: str | Node, t: float, lookback: float | None = None) -> QueryResult:
        node = parse(query) if isinstance(query, str) else query
        tm = to_ms(t)
        q = _Query(tm, tm, self.lookback_ms if lookback is None else to_ms(lookback))
        value = self.eval(node, tm, q)
        if isinstance(value, Vector):
            _ensure_unique(value.samples)
        return QueryResult(value, q.notes)

    def range(self, query: str | Node, start: float, end: float, step: float,
              lookback: float | None = None) -> QueryResult:
        node = parse(query) if isinstance(query, str) else query
        s, e, st = to_ms(start), to_ms(end), to_ms(step)
        if st <= 0:
            raise BadData("zero or negative query resolution step widths are not accepted. "
                          "Try a positive integer")
        if e < s:
            raise BadData("end timestamp must not be before start time")
        if (e - s) // st > MAX_POINTS:
            raise BadData("exceeded maximum resolution of 11,000 points per timeseries. "
                          "Try decreasing the query resolution (?step=XX)")
        if isinstance(node, StringLit) or (isinstance(node, Selector) and node.range_ms) \
                or isinstance(node, Subquery):
            kind = "string" if isinstance(node, StringLit) else "range vector"
            raise BadData(f'invalid expression type "{kind}" for range query, must be Scalar '
                          "or instant Vector")
        q = _Query(s, e, self.lookback_ms if lookback is None else to_ms(lookback))
        out: dict[Labels, RangeSeries] = {}
        for ts in range(s, e + 1, st):
            v = self.eval(node, ts, q)
            if isinstance(v, Scalar):
                samples = [Sample((), v.value)]
            elif isinstance(v, Vector):
                samples = v.samples
                _ensure_unique(samples)
            else:
                raise BadData(f'invalid expression type "{_kind(v)}" for range query, must be '
                              "Scalar or instant Vector")
            for smp in samples:
                rs = out.get(smp.labels)
                if rs is None:
                    rs = out[smp.labels] = RangeSeries(smp.labels, [], [])
                rs.times.append(ts)
                rs.values.append(smp.value)
        return QueryResult(Matrix(sorted(out.values(), key=lambda r: r.labels), s, e), q.notes)

    # -- the walk ----------------------------------------------------------------------------

    def eval(self, node: Node, t: int, q: _Query) -> Value:
        if isinstance(node, NumberLit):
            return Scalar(node.value)
        if isinstance(node, StringLit):
            return String(node.value)
        if isinstance(node, Selector):
            return self._select(node, t, q)
        if isinstance(node, Subquery):
            return self._subquery(node, t, q)
        if isinstance(node, Call):
            return self._call(node, t, q)
        if isinstance(node, Aggregate):
            return self._aggregate(node, t, q)
        if isinstance(node, Binary):
            return self._binary(node, t, q)
        if isinstance(node, Neg):
            v = self.eval(node.expr, t, q)
            if isinstance(v, Scalar):
                return Scalar(-v.value)
            assert isinstance(v, Vector)
            out = [Sample(drop_name(s.labels), -s.value) for s in v.samples]
            _ensure_unique(out)
            return Vector(out)
        raise Unsupported(f"expression {type(node).__name__}")

    def _ref(self, at: At | None, offset_ms: int, t: int, q: _Query) -> int:
        base = t
        if at is not None:
            base = {"start": q.start, "end": q.end}.get(at.kind, at.ms)
        return base - offset_ms

    def _series(self, matchers: tuple[Matcher, ...], q: _Query) -> list[Series]:
        found = q.selected.get(matchers)
        if found is None:
            found = q.selected[matchers] = self.db.select(matchers)
        return found

    def _charge(self, q: _Query, n: int) -> None:
        q.samples += n
        if q.samples > self.max_samples:
            raise ExecutionError("query processing would load too many samples into memory "
                                 "in query execution")

    def _select(self, sel: Selector, t: int, q: _Query) -> Value:
        ref = self._ref(sel.at, sel.offset_ms, t, q)
        floor = self.db.min_time_ms - 1  # retention: nothing older is visible
        series = self._series(sel.matchers, q)
        if sel.range_ms is None:
            lo = max(ref - q.lookback, floor)
            out = []
            for s in series:
                i = s.index_after(ref)
                if i and s.time(i - 1) > lo:
                    out.append(Sample(s.labels, s.values[i - 1], s.time(i - 1)))
            self._charge(q, len(out))
            return Vector(out)
        lo = ref - sel.range_ms
        rows = []
        for s in series:
            ts, vs = s.window(max(lo, floor), ref)
            if ts:
                rows.append(RangeSeries(s.labels, ts, vs))
                self._charge(q, len(ts))
        return Matrix(rows, lo, ref)

    def _subquery(self, node: Subquery, t: int, q: _Query) -> Matrix:
        hi = self._ref(node.at, node.offset_ms, t, q)
        lo = hi - node.range_ms
        step = node.step_ms or self.subquery_step_ms
        first = (lo // step) * step
        if first <= lo:
            first += step  # the first step-aligned instant inside (lo, hi]
        out: dict[Labels, RangeSeries] = {}
        for ts in range(first, hi + 1, step):
            key = (id(node), ts)
            v = q.memo.get(key)
            if v is None:
                v = q.memo[key] = self.eval(node.expr, ts, q)
            samples = [Sample((), v.value)] if isinstance(v, Scalar) else \
                v.samples if isinstance(v, Vector) else []
            for smp in samples:
                rs = out.get(smp.labels)
                if rs is None:
                    rs = out[smp.labels] = RangeSeries(smp.labels, [], [])
                rs.times.append(ts)
                rs.values.append(smp.value)
        return Matrix(sorted(out.values(), key=lambda r: r.labels), lo, hi)

    def _call(self, node: Call, t: int, q: _Query) -> Value:
        if node.name in SPECIAL:
            return self._absent(node, t, q)
        args = [self.eval(a, t, q) for a in node.args]
        result = FUNCTIONS[node.name](args, t, q.notes)
        if isinstance(result, Vector) and node.name not in KEEPS_LABELS:
            _ensure_unique(result.samples)
        return result

    def _absent(self, node: Call, t: int, q: _Query) -> Vector:
        v = self.eval(node.args[0], t, q)
        present = v.samples if isinstance(v, Vector) else \
            [s for s in v.series if s.values] if isinstance(v, Matrix) else [1]
        if present:
            return Vector([])
        # The labels the selector pins with "=" (once each) are the ones known to be absent.
        labels: dict[str, str] = {}
        dup: set[str] = set()
        arg = node.args[0]
        if isinstance(arg, Selector):
            for m in arg.matchers:
                if m.op is MatchOp.EQ and m.name != METRIC_NAME:
                    if m.name in labels:
                        dup.add(m.name)
                    labels[m.name] = m.value
        for name in dup:
            del labels[name]
        return Vector([Sample(tuple(sorted((k, v) for k, v in labels.items() if v)), 1.0)])

    # -- aggregation -------------------------------------------------------------------------

    def _aggregate(self, node: Aggregate, t: int, q: _Query) -> Vector:
        v = self.eval(node.expr, t, q)
        assert isinstance(v, Vector)
        param: float | str | None = None
        if node.param is not None:
            p = self.eval(node.param, t, q)
            param = p.value if isinstance(p, (Scalar, String)) else None
        groups: dict[Labels, list[Sample]] = {}
        names = node.labels
        for s in v.samples:
            if node.without:
                key = tuple(kv for kv in s.labels if kv[0] not in names and kv[0] != METRIC_NAME)
            else:
                key = tuple(kv for kv in s.labels if kv[0] in names)
            groups.setdefault(key, []).append(s)
        op = node.op
        if op in ("topk", "bottomk"):
            return Vector(_topk(groups, param, op == "topk"))
        if op == "count_values":
            assert isinstance(param, str)
            return Vector(_count_values(groups, param))
        out = []
        for key, members in groups.items():
            vals = [s.value for s in members]
            if op == "sum":
                r = fsum(vals)
            elif op == "avg":
                r = fsum(vals) / len(vals)
            elif op == "count":
                r = float(len(vals))
            elif op == "group":
                r = 1.0
            elif op == "min":
                r = min(vals, key=lambda x: (math.isnan(x), x))
            elif op == "max":
                r = max(vals, key=lambda x: (not math.isnan(x), x))
            elif op == "stddev":
                r = math.sqrt(stdvar(vals))
            elif op == "stdvar":
                r = stdvar(vals)
            else:  # quantile
                assert isinstance(param, float)
                if not 0 <= param <= 1:
                    q.notes.warn("PromQL warning: quantile value should be between 0 and 1, "
                                 f"got {format_value(param)}")
                r = quantile(param, vals)
            out.append(Sample(key, r))
        return Vector(out)

    # -- binary operators --------------------------------------------------------------------

    def _binary(self, node: Binary, t: int, q: _Query) -> Value:
        lhs = self.eval(node.lhs, t, q)
        rhs = self.eval(node.rhs, t, q)
        op = node.op
        if isinstance(lhs, Scalar) and isinstance(rhs, Scalar):
            if op in COMPARISON:
                return Scalar(1.0 if _compare(op, lhs.value, rhs.value) else 0.0)
            return Scalar(_arith(op, lhs.value, rhs.value))
        if isinstance(lhs, Vector) and isinstance(rhs, Vector):
            if op in SET_OPS:
                return Vector(_set_op(node, lhs.samples, rhs.samples))
            return Vector(_vector_binop(node, lhs.samples, rhs.samples))
        if isinstance(lhs, Vector) and isinstance(rhs, Scalar):
            return Vector(_scalar_binop(node, lhs.samples, rhs.value, False))
        if isinstance(lhs, Scalar) and isinstance(rhs, Vector):
            return Vector(_scalar_binop(node, rhs.samples, lhs.value, True))
        raise BadData(f"binary expression between {_kind(lhs)} and {_kind(rhs)} is not allowed")


def _kind(v: Value) -> str:
    if isinstance(v, Matrix):
        return "range vector"
    if isinstance(v, Vector):
        return "instant vector"
    return "scalar" if isinstance(v, Scalar) else "string"


def _ensure_unique(samples: Sequence[Sample]) -> None:
    if len(samples) < 2:
        return
    seen: set[Labels] = set()
    for s in samples:
        if s.labels in seen:
            raise ExecutionError("vector cannot contain metrics with the same labelset")
        seen.add(s.labels)


def _arith(op: str, a: float, b: float) -> float:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return go_div(a, b)
    if op == "%":
        return go_mod(a, b)
    if op == "^":
        return go_pow(a, b)
    return math.atan2(a, b)


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, ">": lambda a, b: a > b,
    "<": lambda a, b: a < b, ">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b,
}


def _compare(op: str, a: float, b: float) -> bool:
    return _COMPARE[op](a, b)


def _scalar_binop(node: Binary, vec: list[Sample], sc: float, scalar_left: bool) -> list[Sample]:
    op = node.op
    arith = op in ARITHMETIC
    out = []
    for s in vec:
        lv, rv = (sc, s.value) if scalar_left else (s.value, sc)
        if arith:
            value, keep = _arith(op, lv, rv), True
        else:
            # A comparison filters; the element keeps the vector's value on either side.
            value, keep = s.value, _compare(op, lv, rv)
        if node.return_bool:
            value, keep = (1.0 if keep else 0.0), True
        if keep:
            labels = drop_name(s.labels) if arith or node.return_bool else s.labels
            out.append(Sample(labels, value))
    _ensure_unique(out)
    return out


def _signature(labels: Labels, on: bool, names: frozenset[str]) -> Labels:
    """The labels two elements must share to match: the ``on`` list, or all but the
    ``ignoring`` list and the metric name."""
    if on:
        return tuple(kv for kv in labels if kv[0] in names)
    return tuple(kv for kv in labels if kv[0] not in names and kv[0] != METRIC_NAME)


def _set_op(node: Binary, lhs: list[Sample], rhs: list[Sample]) -> list[Sample]:
    def sig(s: Sample) -> Labels:
        return _signature(s.labels, node.on, node.matching)

    if node.op == "and":
        right = {sig(s) for s in rhs}
        return [s for s in lhs if sig(s) in right]
    if node.op == "unless":
        right = {sig(s) for s in rhs}
        return [s for s in lhs if sig(s) not in right]
    left = {sig(s) for s in lhs}
    return list(lhs) + [s for s in rhs if sig(s) not in left]


def _sig_str(sig: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in sig) + "}"


def _vector_binop(node: Binary, lhs: list[Sample], rhs: list[Sample]) -> list[Sample]:
    """One-to-one and many-to-one matching (one-to-many is many-to-one with the sides
    swapped): the "one" side must be unique per signature; every "many" element finds its
    partner; group_left/right copies the listed labels from the "one" side."""
    op, card = node.op, node.card
    swapped = card == "one-to-many"
    many, one = (rhs, lhs) if swapped else (lhs, rhs)
    arith = op in ARITHMETIC
    one_side: dict[Labels, Sample] = {}
    for s in one:
        sig = _signature(s.labels, node.on, node.matching)
        dup = one_side.get(sig)
        if dup is not None:
            side = "left" if swapped else "right"
            raise ExecutionError(
                f"found duplicate series for the match group {_sig_str(sig)} on the {side} "
                f"hand-side of the operation: [{labels_str(s.labels)}, {labels_str(dup.labels)}]"
                ";many-to-many matching not allowed: matching labels must be unique on one side")
        one_side[sig] = s
    matched: dict[Labels, set[Labels]] = {}
    out = []
    for s in many:
        sig = _signature(s.labels, node.on, node.matching)
        partner = one_side.get(sig)
        if partner is None:
            continue
        vl, vr = (partner.value, s.value) if swapped else (s.value, partner.value)
        if arith:
            value, keep = _arith(op, vl, vr), True
        else:
            value, keep = vl, _compare(op, vl, vr)
        if node.return_bool:
            value, keep = (1.0 if keep else 0.0), True
        if not keep:
            continue
        labels = _result_labels(node, s.labels, partner.labels, arith)
        if node.return_bool:
            labels = drop_name(labels)
        seen = matched.get(sig)
        if card == "one-to-one":
            if seen is not None:
                raise ExecutionError("multiple matches for labels: many-to-one matching must be "
                                     "explicit (group_left/group_right)")
            matched[sig] = set()
        else:
            if seen is None:
                seen = matched[sig] = set()
            elif labels in seen:
                raise ExecutionError("multiple matches for labels: grouping labels must ensure "
                                     "unique matches")
            seen.add(labels)
        out.append(Sample(labels, value))
    return out


def _result_labels(node: Binary, many: Labels, one: Labels, arith: bool) -> Labels:
    d = dict(many)
    if arith:
        d.pop(METRIC_NAME, None)
    if node.card == "one-to-one":
        if node.on:
            d = {k: v for k, v in d.items() if k in node.matching}
        else:
            for n in node.matching:
                d.pop(n, None)
    if node.include:
        od = dict(one)
        for n in node.include:
            if od.get(n):
                d[n] = od[n]
            else:
                d.pop(n, None)
    return tuple(sorted(d.items()))


def _topk(groups: dict[Labels, list[Sample]], param: float | str | None, top: bool
          ) -> list[Sample]:
    assert isinstance(param, float)
    if math.isnan(param):
        raise ExecutionError("Parameter value is NaN")
    k = int(param)
    if k < 1:
        return []
    out = []
    for members in groups.values():
        # NaN ranks below every number either way; ties keep the input (label) order.
        ranked = sorted(members, key=lambda s: (math.isnan(s.value),
                                                 -s.value if top else s.value))
        out.extend(ranked[:k])
    return out


def _count_values(groups: dict[Labels, list[Sample]], label: str) -> list[Sample]:
    if not valid_label_name(label):
        raise ExecutionError(f"invalid label name {label!r}")
    out = []
    for key, members in groups.items():
        counts: dict[str, int] = {}
        for s in members:
            sv = format_value(s.value)
            counts[sv] = counts.get(sv, 0) + 1
        for sv, n in counts.items():
            d = dict(key)
            d[label] = sv
            out.append(Sample(tuple(sorted(d.items())), float(n)))
    return out


__all__ = ["DEFAULT_LOOKBACK", "MAX_POINTS", "Engine", "QueryResult", "parse"]
