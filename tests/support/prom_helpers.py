"""Small builders shared by the Prometheus tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pytest_sremarathon.prometheus import TSDB, Engine
from pytest_sremarathon.prometheus.values import Matrix, Scalar, Vector

T0 = 1_767_571_200  # 2026-01-05T00:00:00Z, the marathon's epoch


def load(db: TSDB, labels: Mapping[str, str], points: Iterable[tuple[float, float]]) -> None:
    """Samples at T0 + offset seconds."""
    for offset, value in points:
        db.append(labels, T0 + offset, value)


def instant(db: TSDB, query: str, at: float) -> dict[tuple[tuple[str, str], ...], float]:
    """{labels: value} of an instant-vector query at T0 + at."""
    v = Engine(db).instant(query, T0 + at).value
    assert isinstance(v, Vector), v
    return {s.labels: s.value for s in v.samples}


def one(db: TSDB, query: str, at: float) -> float:
    """The single value of a query at T0 + at (a scalar, or a one-element vector)."""
    v = Engine(db).instant(query, T0 + at).value
    if isinstance(v, Scalar):
        return v.value
    assert isinstance(v, Vector) and len(v.samples) == 1, v
    return v.samples[0].value


def by(db: TSDB, query: str, at: float, label: str) -> dict[str, float]:
    """{value of `label`: value} of an instant-vector query."""
    return {dict(k).get(label, ""): v for k, v in instant(db, query, at).items()}


def matrix(db: TSDB, query: str, at: float) -> Matrix:
    v = Engine(db).instant(query, T0 + at).value
    assert isinstance(v, Matrix), v
    return v
