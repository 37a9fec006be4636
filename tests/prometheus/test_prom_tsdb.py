"""The in-memory series store: identity, order, retention, matchers, memory."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from pytest_sremarathon.prometheus.tsdb import (
    TSDB,
    Matcher,
    MatchOp,
    OutOfOrderSample,
    SeriesLimitExceeded,
    compile_anchored,
    make_labels,
)

T0 = 1_767_571_200  # 2026-01-05T00:00:00Z, the marathon's epoch


def req(code: str, pod: str = "checkout-1", **extra: str) -> dict[str, str]:
    return {"__name__": "http_requests_total", "namespace": "shop", "service": "checkout",
            "pod": pod, "code": code, **extra}


def test_a_series_is_its_label_set_in_any_order() -> None:
    db = TSDB()
    a = db.ref({"b": "2", "__name__": "m", "a": "1"})
    b = db.ref((("a", "1"), ("__name__", "m"), ("b", "2")))
    assert a == b and len(db) == 1
    # An empty value is no label at all, as in Prometheus.
    assert db.ref({"__name__": "m", "a": "1", "b": "2", "c": ""}) == a
    with pytest.raises(ValueError):
        db.ref({"a": "1"})  # no metric name


def test_samples_in_time_order_and_regular_series_store_no_timestamps() -> None:
    db = TSDB()
    ref = db.append(req("200"), T0, 1)
    for i in range(1, 10):
        db.append(ref, T0 + 30 * i, i + 1)
    s = db.series(ref)
    assert s.times is None  # on the grid: times derived from t0 + i * step
    assert [s.time(i) for i in (0, 9)] == [T0 * 1000, (T0 + 270) * 1000]
    assert s.window(T0 * 1000, (T0 + 90) * 1000) == (
        [(T0 + 30) * 1000, (T0 + 60) * 1000, (T0 + 90) * 1000], [2.0, 3.0, 4.0])
    # A missed scrape puts the series on explicit timestamps, and nothing else changes.
    db.append(ref, T0 + 330, 12)
    assert s.times is not None and len(s.times) == 11
    assert s.window((T0 + 250) * 1000, (T0 + 400) * 1000) == (
        [(T0 + 270) * 1000, (T0 + 330) * 1000], [10.0, 12.0])
    with pytest.raises(OutOfOrderSample):
        db.append(ref, T0 + 300, 5)
    db.append(ref, T0 + 330, 12)  # the same sample again is ignored
    assert len(s) == 11


def test_retention_drops_old_samples_and_forgets_empty_series() -> None:
    db = TSDB(retention=600)
    gone = db.append(req("500", pod="old"), T0, 1)
    ref = db.append(req("200"), T0, 0)
    for i in range(1, 101):
        db.append(ref, T0 + 30 * i, i)
    s = db.series(ref)
    # Swept every retention/16 of data time; nothing older than head - retention is kept
    # for long, and a query never sees it (min_time_ms).
    assert db.min_time_ms == (T0 + 3000 - 600) * 1000
    assert s.time(0) >= db.min_time_ms - 600 * 1000 // 16
    assert len(s) <= 600 // 30 + 1 + 600 // 16 // 30 + 1
    with pytest.raises(KeyError):
        db.series(gone)
    assert db.label_values("pod") == ["checkout-1"]
    db.sweep()
    assert s.time(0) >= db.min_time_ms
    # A pod silent longer than retention that comes back: its old ref still appends.
    db.append(gone, T0 + 3030, 2)
    assert db.label_values("pod") == ["checkout-1", "old"]
    assert len(db.series(gone)) == 1


def test_max_series_bounds_cardinality() -> None:
    db = TSDB(max_series=2)
    db.ref(req("200"))
    db.ref(req("500"))
    db.ref(req("200"))  # existing series are fine
    with pytest.raises(SeriesLimitExceeded):
        db.ref(req("503"))


def sel(db: TSDB, *ms: tuple[str, str, str]) -> list[dict[str, str]]:
    return [dict(s.labels) for s in db.select([Matcher.of(n, op, v) for n, op, v in ms])]


def test_the_four_matchers_with_prometheus_empty_label_semantics() -> None:
    db = TSDB()
    for code in ("200", "404", "500", "503"):
        db.append(req(code), T0, 1)
    db.append(req("200", pod="checkout-2", canary="yes"), T0, 1)

    def codes(rows: list[dict[str, str]]) -> list[str]:
        return [r["code"] for r in rows]

    assert codes(sel(db, ("code", "=", "500"))) == ["500"]
    assert codes(sel(db, ("code", "!=", "200"))) == ["404", "500", "503"]
    assert codes(sel(db, ("code", "=~", "5.."))) == ["500", "503"]
    assert codes(sel(db, ("code", "!~", "5..|404"))) == ["200", "200"]
    # Regexes are fully anchored: "5" matches no code, "5.*" all the 5xx.
    assert sel(db, ("code", "=~", "5")) == []
    assert codes(sel(db, ("code", "=~", "5.*"))) == ["500", "503"]
    # A missing label is the empty string: canary="" selects the series without it.
    assert len(sel(db, ("__name__", "=", "http_requests_total"), ("canary", "=", ""))) == 4
    assert [r["pod"] for r in sel(db, ("canary", "!=", ""))] == ["checkout-2"]
    assert len(sel(db, ("canary", "=~", "yes|"))) == 5
    # Results come sorted by label set.
    rows = sel(db, ("__name__", "=~", ".+"))
    assert rows == sorted(rows, key=lambda r: make_labels(r))


def test_regex_dialect() -> None:
    rx = compile_anchored("[[:digit:]]+")  # RE2's POSIX classes
    assert rx.fullmatch("123") and not rx.fullmatch("12a")
    assert compile_anchored("a.b").fullmatch("a\nb")  # (?s): dot matches newline
    assert Matcher.of("x", MatchOp.NRE, "foo|bar").matches("baz")


def test_label_names_values_and_series_by_time() -> None:
    db = TSDB()
    db.append(req("200"), T0, 1)
    db.append({"__name__": "up", "job": "shop/checkout"}, T0 + 600, 1)
    ms = [[Matcher.of("__name__", "=", "up")]]
    assert db.label_names() == ["__name__", "code", "job", "namespace", "pod", "service"]
    assert db.label_names(ms) == ["__name__", "job"]
    assert db.label_values("__name__") == ["http_requests_total", "up"]
    # Only series with a sample inside [start, end].
    assert db.label_values("__name__", None, (T0 + 300) * 1000, None) == ["up"]
    assert db.label_values("__name__", None, None, (T0 + 300) * 1000) == ["http_requests_total"]
    assert [dict(s.labels)["__name__"] for s in db.series_in_range(ms, None, None)] == ["up"]


def test_metadata_per_metric_name() -> None:
    db = TSDB()
    db.set_metadata("http_requests_total", "counter", "Requests served.", "")
    md = db.metadata["http_requests_total"]
    assert (md.type, md.help, md.unit) == ("counter", "Requests served.", "")


def _bytes_per_sample(n_series: int, n_samples: int, jitter: bool) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        db = TSDB(retention=13 * 3600)
        refs = [db.ref({"__name__": "http_requests_total", "namespace": "shop",
                        "service": f"svc{i % 7}", "pod": f"svc{i % 7}-7d9f{i}",
                        "endpoint": f"/e{i % 5}", "code": str(200 + i % 3)})
                for i in range(n_series)]
        for k in range(n_samples):
            t = T0 + 30 * k + (0.001 * (k % 2) if jitter else 0)
            db.append_many(t, [(r, float(k)) for r in refs])
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return used / (n_series * n_samples)


def test_bytes_per_sample() -> None:
    """The figure quoted in tsdb.py's docstring, at a smaller scale (per-series overhead
    weighs more here, so the bound is looser than the quoted 12-hour figure)."""
    regular = _bytes_per_sample(200, 1440, jitter=False)
    irregular = _bytes_per_sample(50, 1440, jitter=True)
    assert regular < 12, regular
    assert irregular < 21, irregular
