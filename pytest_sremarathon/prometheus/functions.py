"""PromQL functions over evaluated values (the evaluator in promql.py calls them).

Each implementation follows the semantics Prometheus documents (querying/functions) and the
edge cases of its engine where they matter to an SRE reading the result: the extrapolation of
``rate``/``increase``/``delta``, counter resets, the bucket interpolation of
``histogram_quantile``, Go's float arithmetic (``x/0`` is ``+Inf``, ``log(-1)`` is ``NaN``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from itertools import pairwise

from .tsdb import METRIC_NAME, Labels, compile_anchored, label_get, valid_label_name
from .values import (
    ExecutionError,
    Matrix,
    RangeSeries,
    Sample,
    Scalar,
    String,
    Value,
    Vector,
    drop_name,
    format_value,
)


@dataclass
class Notes:
    """Warnings and infos a query collects, returned in the API envelope."""

    warnings: list[str] = field(default_factory=list)
    infos: list[str] = field(default_factory=list)

    def warn(self, msg: str) -> None:
        if msg not in self.warnings:
            self.warnings.append(msg)

    def info(self, msg: str) -> None:
        if msg not in self.infos:
            self.infos.append(msg)


FnImpl = Callable[[Sequence[Value], int, Notes], Value]


# --- Go float semantics ----------------------------------------------------------------------

def go_div(a: float, b: float) -> float:
    """IEEE division as Go does it: no exception on zero."""
    if b == 0.0:
        if a == 0.0 or math.isnan(a):
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def go_mod(a: float, b: float) -> float:
    if b == 0.0 or math.isinf(a) or math.isnan(a) or math.isnan(b):
        return math.nan
    return math.fmod(a, b)


def go_pow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except OverflowError:
        return math.inf if a > 0 or float(b).is_integer() and int(b) % 2 == 0 else -math.inf
    except (ValueError, ZeroDivisionError):
        if a == 0.0 and b < 0:
            return math.inf
        return math.nan


def go_max(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return max(a, b)


def go_min(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return min(a, b)


def fsum(values: Sequence[float]) -> float:
    """An exactly rounded sum (Prometheus uses Kahan summation for the same reason: summing
    many rates must not drift); infinities and NaN fall back to IEEE addition."""
    try:
        return math.fsum(values)
    except (ValueError, OverflowError):
        return float(sum(values))


def quantile(q: float, values: Sequence[float]) -> float:
    """Prometheus's φ-quantile of a set: linear interpolation between the two nearest ranks
    of ``q * (n - 1)``; ``q < 0`` is -Inf, ``q > 1`` is +Inf."""
    if not values or math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    xs = sorted(values)
    rank = q * (len(xs) - 1)
    lo = max(0, math.floor(rank))
    hi = min(len(xs) - 1, lo + 1)
    weight = rank - math.floor(rank)
    return xs[lo] * (1 - weight) + xs[hi] * weight


def _check_quantile(q: float, notes: Notes) -> None:
    if not 0 <= q <= 1:
        notes.warn("PromQL warning: quantile value should be between 0 and 1, got "
                   + format_value(q))


# --- rate and friends ------------------------------------------------------------------------

_COUNTER_SUFFIXES = ("_total", "_sum", "_count", "_bucket")


def _counter_info(labels: Labels, fn: str, notes: Notes) -> None:
    name = label_get(labels, METRIC_NAME)
    if name and not name.endswith(_COUNTER_SUFFIXES):
        notes.info("PromQL info: metric might not be a counter, name does not end in "
                   f'_total/_sum/_count/_bucket: "{name}" (in {fn})')


def extrapolated(m: Matrix, is_counter: bool, is_rate: bool) -> list[Sample]:
    """``rate``/``increase``/``delta``: the change over the samples in the window, corrected
    for counter resets, then extrapolated toward the window's edges. Prometheus (since 2.52,
    prometheus/prometheus#13725) extends the sampled interval to an edge when the gap to it is
    under 1.1x the average sample spacing, else by half a spacing; then a counter's start
    extension is cut to the time its first value would have been reached from 0, so it is
    never extrapolated below zero."""
    out = []
    range_s = (m.hi - m.lo) / 1000.0
    for s in m.series:
        n = len(s.values)
        if n < 2:
            continue
        result = s.values[-1] - s.values[0]
        if is_counter:
            prev = s.values[0]
            for v in s.values[1:]:
                if v < prev:  # a reset: the counter restarted from 0, add what was lost
                    result += prev
                prev = v
        to_start = (s.times[0] - m.lo) / 1000.0
        to_end = (m.hi - s.times[-1]) / 1000.0
        sampled = (s.times[-1] - s.times[0]) / 1000.0
        avg_step = sampled / (n - 1)
        threshold = avg_step * 1.1
        if to_start >= threshold:  # the series starts inside the window
            to_start = avg_step / 2
        if is_counter and result > 0 and s.values[0] >= 0:
            to_start = min(to_start, sampled * (s.values[0] / result))
        if to_end >= threshold:
            to_end = avg_step / 2
        factor = (sampled + to_start + to_end) / sampled
        if is_rate:
            factor /= range_s
        out.append(Sample(drop_name(s.labels), result * factor))
    return out


def _instant_delta(m: Matrix, is_rate: bool) -> list[Sample]:
    """``irate``/``idelta``: from the last two samples only."""
    out = []
    for s in m.series:
        if len(s.values) < 2:
            continue
        last, prev = s.values[-1], s.values[-2]
        result = last - prev
        if is_rate and last < prev:
            result = last  # counter reset between the two
        if is_rate:
            result /= (s.times[-1] - s.times[-2]) / 1000.0
        out.append(Sample(drop_name(s.labels), result))
    return out


def _matrix_arg(args: Sequence[Value], i: int = 0) -> Matrix:
    m = args[i]
    assert isinstance(m, Matrix)
    return m


def _scalar_arg(args: Sequence[Value], i: int) -> float:
    a = args[i]
    assert isinstance(a, Scalar)
    return a.value


def _vector_arg(args: Sequence[Value], i: int = 0) -> list[Sample]:
    a = args[i]
    assert isinstance(a, Vector)
    return a.samples


def _fn_rate(args: Sequence[Value], t: int, notes: Notes) -> Value:
    m = _matrix_arg(args)
    for s in m.series[:1]:
        _counter_info(s.labels, "rate", notes)
    return Vector(extrapolated(m, True, True))


def _fn_increase(args: Sequence[Value], t: int, notes: Notes) -> Value:
    m = _matrix_arg(args)
    for s in m.series[:1]:
        _counter_info(s.labels, "increase", notes)
    return Vector(extrapolated(m, True, False))


def _fn_delta(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector(extrapolated(_matrix_arg(args), False, False))


def _fn_irate(args: Sequence[Value], t: int, notes: Notes) -> Value:
    m = _matrix_arg(args)
    for s in m.series[:1]:
        _counter_info(s.labels, "irate", notes)
    return Vector(_instant_delta(m, True))


def _fn_idelta(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector(_instant_delta(_matrix_arg(args), False))


def _count_changes(values: Sequence[float], resets: bool) -> int:
    n = 0
    for a, b in pairwise(values):
        if resets:
            n += b < a
        else:
            n += not (a == b or (math.isnan(a) and math.isnan(b)))
    return n


def _fn_changes(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector([Sample(drop_name(s.labels), float(_count_changes(s.values, False)))
                   for s in _matrix_arg(args).series if s.values])


def _fn_resets(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector([Sample(drop_name(s.labels), float(_count_changes(s.values, True)))
                   for s in _matrix_arg(args).series if s.values])


def _regression(s: RangeSeries, intercept_ms: int) -> tuple[float, float]:
    """Least-squares slope (per second) and intercept at ``intercept_ms``."""
    xs = [(t - intercept_ms) / 1000.0 for t in s.times]
    n = float(len(xs))
    if all(v == s.values[0] for v in s.values):
        return 0.0, s.values[0]
    sx, sy = fsum(xs), fsum(s.values)
    sxy = fsum([x * y for x, y in zip(xs, s.values)])
    sx2 = fsum([x * x for x in xs])
    cov = sxy - sx * sy / n
    var = sx2 - sx * sx / n
    slope = go_div(cov, var)
    return slope, sy / n - slope * sx / n


def _fn_deriv(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector([Sample(drop_name(s.labels), _regression(s, s.times[0])[0])
                   for s in _matrix_arg(args).series if len(s.values) >= 2])


def _fn_predict_linear(args: Sequence[Value], t: int, notes: Notes) -> Value:
    horizon = _scalar_arg(args, 1)
    out = []
    for s in _matrix_arg(args).series:
        if len(s.values) >= 2:
            slope, icpt = _regression(s, t)
            out.append(Sample(drop_name(s.labels), icpt + slope * horizon))
    return Vector(out)


def _over_time(f: Callable[[list[float]], float], keep_name: bool = False) -> FnImpl:
    def impl(args: Sequence[Value], t: int, notes: Notes) -> Value:
        m = _matrix_arg(args, len(args) - 1)
        return Vector([Sample(s.labels if keep_name else drop_name(s.labels), f(s.values))
                       for s in m.series if s.values])
    return impl


def _nan_max(vs: list[float]) -> float:
    best = vs[0]
    for v in vs[1:]:
        if v > best or math.isnan(best):
            best = v
    return best


def _nan_min(vs: list[float]) -> float:
    best = vs[0]
    for v in vs[1:]:
        if v < best or math.isnan(best):
            best = v
    return best


def stdvar(vs: Sequence[float]) -> float:
    """Population variance, as Prometheus's stdvar/stddev."""
    mean = fsum(vs) / len(vs)
    return fsum([(v - mean) ** 2 for v in vs]) / len(vs)


def _fn_quantile_over_time(args: Sequence[Value], t: int, notes: Notes) -> Value:
    q = _scalar_arg(args, 0)
    _check_quantile(q, notes)
    return Vector([Sample(drop_name(s.labels), quantile(q, s.values))
                   for s in _matrix_arg(args, 1).series if s.values])


def _mad(vs: list[float]) -> float:
    med = quantile(0.5, vs)
    return quantile(0.5, [abs(v - med) for v in vs])


# --- instant-vector functions ----------------------------------------------------------------

def _safe(f: Callable[[float], float], at_zero: float | None = None) -> Callable[[float], float]:
    """Wrap a math function to answer like Go's (NaN or +-Inf, never an exception)."""
    def g(x: float) -> float:
        if at_zero is not None and x == 0:
            return at_zero
        try:
            return f(x)
        except OverflowError:
            return math.inf
        except ValueError:
            return math.nan
    return g


def _sgn(x: float) -> float:
    if math.isnan(x):
        return x
    return 1.0 if x > 0 else -1.0 if x < 0 else 0.0


def _go_floor(x: float) -> float:
    return x if math.isinf(x) or math.isnan(x) else float(math.floor(x))


def _go_ceil(x: float) -> float:
    return x if math.isinf(x) or math.isnan(x) else float(math.ceil(x))


_MATH: dict[str, Callable[[float], float]] = {
    "abs": abs, "ceil": _go_ceil, "floor": _go_floor, "sgn": _sgn,
    "exp": _safe(math.exp), "sqrt": _safe(math.sqrt),
    "ln": _safe(math.log, -math.inf), "log2": _safe(math.log2, -math.inf),
    "log10": _safe(math.log10, -math.inf),
    "sin": _safe(math.sin), "cos": _safe(math.cos), "tan": _safe(math.tan),
    "asin": _safe(math.asin), "acos": _safe(math.acos), "atan": _safe(math.atan),
    "sinh": _safe(math.sinh), "cosh": _safe(math.cosh), "tanh": _safe(math.tanh),
    "asinh": _safe(math.asinh), "acosh": _safe(math.acosh), "atanh": _safe(math.atanh),
    "deg": math.degrees, "rad": math.radians,
}


def _simple(f: Callable[[float], float]) -> FnImpl:
    def impl(args: Sequence[Value], t: int, notes: Notes) -> Value:
        return Vector([Sample(drop_name(s.labels), f(s.value)) for s in _vector_arg(args)])
    return impl


def _fn_round(args: Sequence[Value], t: int, notes: Notes) -> Value:
    to = _scalar_arg(args, 1) if len(args) > 1 else 1.0
    inv = go_div(1.0, to)
    return Vector([Sample(drop_name(s.labels), go_div(_go_floor(s.value * inv + 0.5), inv))
                   for s in _vector_arg(args)])


def _fn_clamp(args: Sequence[Value], t: int, notes: Notes) -> Value:
    lo, hi = _scalar_arg(args, 1), _scalar_arg(args, 2)
    if hi < lo:
        return Vector([])
    return Vector([Sample(drop_name(s.labels), go_max(lo, go_min(hi, s.value)))
                   for s in _vector_arg(args)])


def _fn_clamp_min(args: Sequence[Value], t: int, notes: Notes) -> Value:
    lo = _scalar_arg(args, 1)
    return Vector([Sample(drop_name(s.labels), go_max(lo, s.value)) for s in _vector_arg(args)])


def _fn_clamp_max(args: Sequence[Value], t: int, notes: Notes) -> Value:
    hi = _scalar_arg(args, 1)
    return Vector([Sample(drop_name(s.labels), go_min(hi, s.value)) for s in _vector_arg(args)])


def _fn_scalar(args: Sequence[Value], t: int, notes: Notes) -> Value:
    v = _vector_arg(args)
    return Scalar(v[0].value if len(v) == 1 else math.nan)


def _fn_vector(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector([Sample((), _scalar_arg(args, 0))])


def _fn_time(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Scalar(t / 1000.0)


def _fn_pi(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Scalar(math.pi)


def _fn_timestamp(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector([Sample(drop_name(s.labels), (s.t if s.t is not None else t) / 1000.0)
                   for s in _vector_arg(args)])


def _sort_key(desc: bool) -> Callable[[Sample], tuple[bool, float]]:
    # NaN sorts last either way, so a broken series never hides the top of the list.
    return lambda s: (math.isnan(s.value), -s.value if desc else s.value)


def _fn_sort(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector(sorted(_vector_arg(args), key=_sort_key(False)))


def _fn_sort_desc(args: Sequence[Value], t: int, notes: Notes) -> Value:
    return Vector(sorted(_vector_arg(args), key=_sort_key(True)))


_TEMPLATE_VAR = re.compile(r"\$(?:\{([A-Za-z0-9_]*)\}|([A-Za-z0-9_]+)|(\$))")


def expand_template(template: str, match: re.Match[str]) -> str:
    """Go's ``Regexp.Expand``: ``$1``, ``${1}``, ``$name``, ``${name}``, ``$$`` for a dollar;
    an unknown group is empty; a ``$`` that starts no reference stays literal."""
    groups = match.re.groupindex

    def sub(m: re.Match[str]) -> str:
        if m.group(3):
            return "$"
        name = m.group(1) if m.group(1) is not None else m.group(2)
        if name.isdigit():
            idx = int(name)
            if idx <= (match.re.groups or 0):
                return match.group(idx) or ""
            return ""
        if name in groups:
            return match.group(name) or ""
        return ""

    return _TEMPLATE_VAR.sub(sub, template)


def _string_arg(args: Sequence[Value], i: int) -> str:
    a = args[i]
    assert isinstance(a, String)
    return a.value


def _set_label(labels: Labels, name: str, value: str) -> Labels:
    d = dict(labels)
    if value:
        d[name] = value
    else:
        d.pop(name, None)
    return tuple(sorted(d.items()))


def _fn_label_replace(args: Sequence[Value], t: int, notes: Notes) -> Value:
    dst, repl, src, rx = (_string_arg(args, i) for i in range(1, 5))
    try:
        regex = compile_anchored(rx)
    except re.error as e:
        raise ExecutionError(f"invalid regular expression in label_replace(): {rx}: {e}") from None
    if not valid_label_name(dst):
        raise ExecutionError(f"invalid destination label name in label_replace(): {dst}")
    out = []
    for s in _vector_arg(args):
        m = regex.fullmatch(label_get(s.labels, src))
        labels = s.labels if m is None else _set_label(s.labels, dst, expand_template(repl, m))
        out.append(Sample(labels, s.value, s.t))
    return Vector(out)


def _fn_label_join(args: Sequence[Value], t: int, notes: Notes) -> Value:
    dst, sep = _string_arg(args, 1), _string_arg(args, 2)
    srcs = [_string_arg(args, i) for i in range(3, len(args))]
    if not valid_label_name(dst):
        raise ExecutionError(f"invalid destination label name in label_join(): {dst}")
    return Vector([Sample(_set_label(s.labels, dst, sep.join(label_get(s.labels, n) for n in srcs)),
                          s.value, s.t) for s in _vector_arg(args)])


def _date_fn(part: Callable[[datetime], float]) -> FnImpl:
    def impl(args: Sequence[Value], t: int, notes: Notes) -> Value:
        if not args:
            return Vector([Sample((), part(datetime.fromtimestamp(t / 1000.0, timezone.utc)))])
        out = []
        for s in _vector_arg(args):
            if math.isnan(s.value) or math.isinf(s.value):
                out.append(Sample(drop_name(s.labels), math.nan))
                continue
            out.append(Sample(drop_name(s.labels),
                              part(datetime.fromtimestamp(s.value, timezone.utc))))
        return Vector(out)
    return impl


def _days_in_month(d: datetime) -> float:
    nxt = datetime(d.year + (d.month == 12), d.month % 12 + 1, 1, tzinfo=timezone.utc)
    return float((nxt - datetime(d.year, d.month, 1, tzinfo=timezone.utc)).days)


# --- histogram_quantile ----------------------------------------------------------------------

def bucket_quantile(q: float, buckets: list[tuple[float, float]]) -> tuple[float, bool]:
    """The φ-quantile from classic cumulative buckets ``(upper_bound, count)``.

    Prometheus's method: sort by bound, merge equal bounds, force the counts monotonic
    (returned flag), find the first bucket whose count reaches ``rank = q * total`` and
    interpolate linearly inside it, its lower edge being the previous bound (0 for the first
    bucket when its bound is positive). A rank in the +Inf bucket answers the largest finite
    bound. Without a +Inf bucket, or with fewer than two buckets, the answer is NaN.
    """
    if math.isnan(q):
        return math.nan, False
    if q < 0:
        return -math.inf, False
    if q > 1:
        return math.inf, False
    merged: dict[float, float] = {}
    for ub, c in buckets:
        merged[ub] = merged.get(ub, 0.0) + c
    bs = sorted(merged.items())
    if not bs or not math.isinf(bs[-1][0]) or bs[-1][0] < 0:
        return math.nan, False
    fixed = False
    counts = [c for _, c in bs]
    top = counts[0]
    for i in range(1, len(counts)):
        c = counts[i]
        if c == top:
            continue
        if abs(c - top) <= 1e-12 * max(abs(c), abs(top)):
            # Float noise from rate() over equal buckets: treat them as equal, so a bucket
            # that holds nothing does not become a sliver to interpolate in.
            counts[i] = top
        elif c < top:
            # Buckets scraped at slightly different moments can dip; Prometheus repairs it.
            counts[i] = top
            fixed = True
        else:
            top = c
    if len(bs) < 2:
        return math.nan, fixed
    total = counts[-1]
    if total == 0 or math.isnan(total):
        return math.nan, fixed
    rank = q * total
    b = next((i for i in range(len(bs) - 1) if counts[i] >= rank), len(bs) - 1)
    if b == len(bs) - 1:
        return bs[-2][0], fixed
    if b == 0 and bs[0][0] <= 0:
        return bs[0][0], fixed
    start, end, count = 0.0, bs[b][0], counts[b]
    if b > 0:
        start = bs[b - 1][0]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * go_div(rank, count), fixed


def _fn_histogram_quantile(args: Sequence[Value], t: int, notes: Notes) -> Value:
    q = _scalar_arg(args, 0)
    _check_quantile(q, notes)
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for s in _vector_arg(args, 1):
        le = label_get(s.labels, "le")
        try:
            ub = float(le)
        except ValueError:
            name = label_get(s.labels, METRIC_NAME)
            notes.warn('PromQL warning: bucket label "le" is missing or has a malformed value '
                       f'of "{le}" for metric name "{name}"')
            continue
        key = tuple(kv for kv in s.labels if kv[0] not in ("le", METRIC_NAME))
        groups.setdefault(key, []).append((ub, s.value))
    out = []
    for key, buckets in groups.items():
        value, fixed = bucket_quantile(q, buckets)
        if fixed:
            notes.info("PromQL info: input to histogram_quantile needed to be fixed for "
                       "monotonicity (and may give inaccurate results)")
        out.append(Sample(key, value))
    return Vector(out)


# --- the table -------------------------------------------------------------------------------

FUNCTIONS: dict[str, FnImpl] = {
    "rate": _fn_rate, "increase": _fn_increase, "delta": _fn_delta,
    "irate": _fn_irate, "idelta": _fn_idelta,
    "changes": _fn_changes, "resets": _fn_resets,
    "deriv": _fn_deriv, "predict_linear": _fn_predict_linear,
    "avg_over_time": _over_time(lambda vs: fsum(vs) / len(vs)),
    "min_over_time": _over_time(_nan_min),
    "max_over_time": _over_time(_nan_max),
    "sum_over_time": _over_time(fsum),
    "count_over_time": _over_time(lambda vs: float(len(vs))),
    "last_over_time": _over_time(lambda vs: vs[-1], keep_name=True),
    "first_over_time": _over_time(lambda vs: vs[0], keep_name=True),
    "present_over_time": _over_time(lambda vs: 1.0),
    "stddev_over_time": _over_time(lambda vs: math.sqrt(stdvar(vs))),
    "stdvar_over_time": _over_time(stdvar),
    "mad_over_time": _over_time(_mad),
    "quantile_over_time": _fn_quantile_over_time,
    "round": _fn_round, "clamp": _fn_clamp, "clamp_min": _fn_clamp_min,
    "clamp_max": _fn_clamp_max,
    "scalar": _fn_scalar, "vector": _fn_vector, "time": _fn_time, "pi": _fn_pi,
    "timestamp": _fn_timestamp, "sort": _fn_sort, "sort_desc": _fn_sort_desc,
    "label_replace": _fn_label_replace, "label_join": _fn_label_join,
    "histogram_quantile": _fn_histogram_quantile,
    "minute": _date_fn(lambda d: float(d.minute)),
    "hour": _date_fn(lambda d: float(d.hour)),
    "day_of_month": _date_fn(lambda d: float(d.day)),
    "day_of_week": _date_fn(lambda d: float(d.isoweekday() % 7)),
    "day_of_year": _date_fn(lambda d: float(d.timetuple().tm_yday)),
    "days_in_month": _date_fn(_days_in_month),
    "month": _date_fn(lambda d: float(d.month)),
    "year": _date_fn(lambda d: float(d.year)),
}
FUNCTIONS.update({name: _simple(f) for name, f in _MATH.items()})

# Functions whose output keeps the input's label set, so no duplicate check is needed.
KEEPS_LABELS = frozenset({"last_over_time", "first_over_time", "sort", "sort_desc"})

# Evaluated by promql.py itself (they need the argument's selector, not its value).
SPECIAL = frozenset({"absent", "absent_over_time"})
