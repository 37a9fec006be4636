"""PromQL value types, errors and the number spellings of Prometheus's JSON."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import Decimal

from .tsdb import METRIC_NAME, Labels


class PromQLError(Exception):
    """An error the API returns as ``{"status": "error", "errorType": ..., "error": ...}``."""

    error_type = "bad_data"
    status = 400


class BadData(PromQLError):
    """The query or a parameter is malformed, or asks for something not supported here."""


class Unsupported(BadData):
    """A construct the parser knows and this evaluator does not implement."""

    def __init__(self, construct: str) -> None:
        super().__init__(f"unsupported PromQL: {construct} is not implemented by "
                         "pytest-sremarathon's Prometheus")


class ExecutionError(PromQLError):
    """The query is well-formed but cannot be evaluated (many-to-many matching, too many
    samples, duplicate label sets, ...)."""

    error_type = "execution"
    status = 422


@dataclass(slots=True)
class Sample:
    """One element of an instant vector. ``t`` is the sample's own timestamp (ms) where it
    came straight from storage (``timestamp()`` needs it), else None."""

    labels: Labels
    value: float
    t: int | None = None


@dataclass(slots=True)
class Vector:
    samples: list[Sample] = field(default_factory=list)


@dataclass(slots=True)
class RangeSeries:
    labels: Labels
    times: list[int]
    values: list[float]


@dataclass(slots=True)
class Matrix:
    """A range vector. ``lo``/``hi`` is the selected window ``(lo, hi]`` in ms, which the
    extrapolating functions (rate, increase, delta) need."""

    series: list[RangeSeries]
    lo: int = 0
    hi: int = 0


@dataclass(slots=True)
class Scalar:
    value: float


@dataclass(slots=True)
class String:
    value: str


Value = Vector | Matrix | Scalar | String


def type_name(v: Value) -> str:
    return {Vector: "vector", Matrix: "matrix", Scalar: "scalar", String: "string"}[type(v)]


def drop_name(labels: Labels) -> Labels:
    if labels and any(k == METRIC_NAME for k, _ in labels):
        return tuple(kv for kv in labels if kv[0] != METRIC_NAME)
    return labels


def format_value(v: float) -> str:
    """A float as Go's ``strconv.FormatFloat(v, 'f', -1, 64)``: shortest round-trip digits,
    never an exponent; ``NaN``, ``+Inf``, ``-Inf``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    s = repr(v)
    if "e" in s or "E" in s:
        s = format(Decimal(s), "f")
    s = s.removesuffix(".0")
    return s


def format_value_exp(v: float) -> str:
    """A float as Go's ``strconv.FormatFloat(v, 'e', -1, 64)`` (``1e+00``, ``7.5e-01``), the
    spelling of an alert's value in ``/api/v1/alerts``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == 0:
        return "-0e+00" if math.copysign(1.0, v) < 0 else "0e+00"
    sign, digits, exp = Decimal(repr(v)).as_tuple()
    ds = "".join(str(d) for d in digits).rstrip("0") or "0"
    assert isinstance(exp, int)
    e10 = exp + len(digits) - 1
    mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
    return f"{'-' if sign else ''}{mant}e{'+' if e10 >= 0 else '-'}{abs(e10):02d}"


def format_time(ms: int) -> int | float:
    """A timestamp as the JSON number Prometheus writes: seconds, ms precision."""
    if ms % 1000 == 0:
        return ms // 1000
    return ms / 1000.0
