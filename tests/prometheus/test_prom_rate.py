"""rate/irate/increase/delta and the *_over_time family, checked against values worked out
by hand from Prometheus's documented semantics (querying/functions, and the extrapolation
rules of its engine). Every window below is (t - range, t], left-open as in Prometheus 3."""

from __future__ import annotations

import math

import pytest
from support.prom_helpers import T0, by, instant, load, one

from pytest_sremarathon.prometheus import TSDB, Engine
from pytest_sremarathon.prometheus.values import Vector

C = {"__name__": "http_requests_total", "pod": "p"}


def counter(points: list[tuple[float, float]]) -> TSDB:
    db = TSDB()
    load(db, C, points)
    return db


def test_rate_extrapolates_to_both_window_edges() -> None:
    # 10 samples 15 s inside each edge of a 5m window, +10 per 30 s scrape.
    db = counter([(15 + 30 * i, 100 + 10 * i) for i in range(10)])
    # raw increase 90 over 270 s sampled; both gaps (15 s) are under 1.1 x 30 s, so the
    # interval extends to the full 300 s: increase = 90 * 300 / 270 = 100, rate = 100 / 300.
    assert one(db, "increase(http_requests_total[5m])", 300) == pytest.approx(100)
    assert one(db, "rate(http_requests_total[5m])", 300) == pytest.approx(1 / 3)
    # rate drops the metric name and keeps the other labels.
    assert list(instant(db, "rate(http_requests_total[5m])", 300)) == [(("pod", "p"),)]


def test_rate_extrapolates_half_a_step_when_the_series_starts_inside_the_window() -> None:
    db = counter([(165 + 30 * i, 100 + 10 * i) for i in range(5)])
    # raw 40 over 120 s; the start gap (165 s) is over 1.1 x 30 s: extend by 15 s only;
    # the end gap 15 s is under it: extend by 15 s. 40 * 150 / 120 = 50.
    assert one(db, "increase(http_requests_total[5m])", 300) == pytest.approx(50)
    assert one(db, "rate(http_requests_total[5m])", 300) == pytest.approx(50 / 300)


def test_a_counter_is_not_extrapolated_below_zero() -> None:
    db = counter([(165 + 30 * i, 2 + 10 * i) for i in range(5)])
    # raw 40 over 120 s; at 10 per 30 s the counter was 0 six seconds before its first
    # sample (120 * 2 / 40), so the start extends by 6 s, not 15: 40 * (120+6+15) / 120.
    assert one(db, "increase(http_requests_total[5m])", 300) == pytest.approx(47)
    # The zero point cuts the half-step extension, never lengthens it: from 6, zero was 18 s
    # before the first sample, more than the 15 s half step, so the start extends by 15 s.
    db2 = counter([(165 + 30 * i, 6 + 10 * i) for i in range(5)])
    assert one(db2, "increase(http_requests_total[5m])", 300) == pytest.approx(50)


def test_counter_resets_add_the_value_before_the_reset() -> None:
    db = counter([(15, 100), (45, 110), (75, 5), (105, 15)])
    # 15 - 100 = -85, plus 110 lost at the reset = 25 over 90 s, extended to 120 s.
    assert one(db, "increase(http_requests_total[2m])", 120) == pytest.approx(25 * 120 / 90)
    assert one(db, "rate(http_requests_total[2m])", 120) == pytest.approx(25 / 90)
    # irate: the last two samples; 15 after 5 is +10 in 30 s.
    assert one(db, "irate(http_requests_total[2m])", 120) == pytest.approx(10 / 30)
    # Across the reset itself irate takes the new value as the increase: 5 in 30 s.
    assert one(db, "irate(http_requests_total[2m])", 90) == pytest.approx(5 / 30)
    assert one(db, "resets(http_requests_total[2m])", 120) == 1
    assert one(db, "changes(http_requests_total[2m])", 120) == 3


def test_delta_is_not_counter_corrected() -> None:
    db = TSDB()
    load(db, {"__name__": "queue_depth"}, [(15, 10), (45, 5), (75, 8)])
    # -2 over 60 s, both edge gaps 15 s < 33 s: -2 * 90 / 60.
    assert one(db, "delta(queue_depth[90s])", 90) == pytest.approx(-3)
    assert one(db, "idelta(queue_depth[90s])", 90) == pytest.approx(3)


def test_windows_are_left_open_and_need_two_samples() -> None:
    db = counter([(0, 0), (30, 10), (60, 20)])
    # (0, 60] holds the samples at 30 and 60 only.
    assert one(db, "count_over_time(http_requests_total[60s])", 60) == 2
    assert instant(db, "rate(http_requests_total[30s])", 60) == {}  # one sample: nothing
    db2 = counter([(0, 0)])
    assert instant(db2, "rate(http_requests_total[5m])", 60) == {}


def test_rate_of_a_gauge_named_series_carries_a_prometheus_info() -> None:
    db = TSDB()
    load(db, {"__name__": "temperature"}, [(0, 1), (30, 2)])
    res = Engine(db).instant("rate(temperature[1m])", T0 + 30)
    assert res.notes.infos and "might not be a counter" in res.notes.infos[0]


def test_over_time_functions() -> None:
    db = TSDB()
    load(db, {"__name__": "g", "k": "v"}, [(30, 4), (60, 1), (90, 7), (120, 2)])
    assert one(db, "avg_over_time(g[2m])", 120) == pytest.approx(3.5)
    assert one(db, "min_over_time(g[2m])", 120) == 1
    assert one(db, "max_over_time(g[2m])", 120) == 7
    assert one(db, "sum_over_time(g[2m])", 120) == 14
    assert one(db, "count_over_time(g[2m])", 120) == 4
    assert one(db, "last_over_time(g[2m])", 120) == 2
    # quantile: rank q * (n - 1) over the sorted values 1 2 4 7, linear in between.
    assert one(db, "quantile_over_time(0.5, g[2m])", 120) == pytest.approx(3)  # 2 + .5*2
    assert one(db, "quantile_over_time(0.9, g[2m])", 120) == pytest.approx(6.1)  # 4 + .7*3
    # population standard deviation: mean 3.5, squared deviations .25 6.25 12.25 2.25.
    assert one(db, "stddev_over_time(g[2m])", 120) == pytest.approx(math.sqrt(21 / 4))
    assert one(db, "stdvar_over_time(g[2m])", 120) == pytest.approx(21 / 4)
    assert one(db, "first_over_time(g[2m])", 120) == 4
    assert one(db, "present_over_time(g[2m])", 120) == 1
    # median absolute deviation: median 3, deviations 1 2 4 1, their median 1.5.
    assert one(db, "mad_over_time(g[2m])", 120) == pytest.approx(1.5)
    # last_over_time keeps the metric name; the others drop it.
    assert list(instant(db, "last_over_time(g[2m])", 120)) == [(("__name__", "g"), ("k", "v"))]
    assert list(instant(db, "max_over_time(g[2m])", 120)) == [(("k", "v"),)]


def test_deriv_and_predict_linear() -> None:
    db = TSDB()
    load(db, {"__name__": "disk_free_bytes"}, [(30 * i, 1000 - 2 * 30 * i) for i in range(5)])
    assert one(db, "deriv(disk_free_bytes[5m])", 120) == pytest.approx(-2)
    # 1000 - 2 * 120 at t = 120, then 60 s more at -2/s.
    assert one(db, "predict_linear(disk_free_bytes[5m], 60)", 120) == pytest.approx(640)


def test_the_issue_example_error_ratio_is_faithful_at_every_scrape() -> None:
    """A service at 1.7 requests/s scraped every 30 s (51 requests a scrape), 75% failing:
    the ratio of the 5xx rate to the total is 0.75 at every evaluation, not 0 or 1."""
    db = TSDB()
    lab = {"__name__": "http_requests_total", "namespace": "shop", "service": "checkout",
           "endpoint": "/checkout"}
    ok = db.ref({**lab, "code": "200"})
    err = db.ref({**lab, "code": "500"})
    for k in range(121):  # one hour
        total = 51 * k
        errors = (3 * total) // 4  # integer counts: 38 or 39 a scrape, 38.25 on average
        db.append_many(T0 + 30 * k, [(ok, total - errors), (err, errors)])
    q = ('sum(rate(http_requests_total{code=~"5.."}[5m])) '
         '/ sum(rate(http_requests_total[5m]))')
    res = Engine(db).range(q, T0 + 600, T0 + 3600, 30)
    (series,) = res.value.series  # type: ignore[union-attr]
    assert len(series.values) == 101
    assert all(abs(v - 0.75) < 0.01 for v in series.values), series.values
    # 51 requests in each scrape: the counter against itself 30 s earlier.
    assert one(db, "sum(http_requests_total - http_requests_total offset 30s)", 3600) == 51
    # A 30 s window holds one sample (left-open), so increase() needs [1m]: 51 over the 30 s
    # between its two samples, extrapolated to the 60 s window.
    assert one(db, "sum(increase(http_requests_total[1m]))", 3600) == pytest.approx(102)
    assert one(db, "sum(rate(http_requests_total[5m]))", 3600) == pytest.approx(1.7)


def test_subquery_max_of_rate() -> None:
    db = counter([(30 * i, 10 * i if i < 20 else 190 + 40 * (i - 19)) for i in range(40)])
    # +10 a scrape, then +40 from the 20th: rate[1m] is 1/3 per s, then 4/3.
    got = one(db, "max_over_time(rate(http_requests_total[1m])[10m:1m])", 1170)
    assert got == pytest.approx(4 / 3)
    v = Engine(db).instant("rate(http_requests_total[1m])[5m:1m]", T0 + 1170).value
    assert not isinstance(v, Vector)
    (s,) = v.series  # type: ignore[union-attr]
    # Step-aligned instants in (870, 1170]: 900, 960, ..., 1140 (the grid is absolute).
    assert [t // 1000 - T0 for t in s.times] == [900, 960, 1020, 1080, 1140]


def test_by_value_helper_sanity() -> None:
    db = TSDB()
    load(db, {"__name__": "up", "job": "a"}, [(0, 1)])
    load(db, {"__name__": "up", "job": "b"}, [(0, 0)])
    assert by(db, "up", 0, "job") == {"a": 1, "b": 0}
