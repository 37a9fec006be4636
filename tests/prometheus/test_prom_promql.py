"""Selectors, operators, matching, aggregations, histogram_quantile and the other functions,
against values worked out by hand from Prometheus's documented semantics."""

from __future__ import annotations

import math

import pytest
from support.prom_helpers import T0, by, instant, load, matrix, one

from pytest_sremarathon.prometheus import (
    TSDB,
    BadData,
    Engine,
    ExecutionError,
    Unsupported,
)
from pytest_sremarathon.prometheus.values import Matrix, Scalar, String, Vector


@pytest.fixture
def shop() -> TSDB:
    """Per-pod request counters and a kube-state-metrics-style pod info series."""
    db = TSDB()
    for pod, node, codes in (("checkout-a", "n1", {"200": 10, "500": 2}),
                             ("checkout-b", "n2", {"200": 5})):
        for code, v in codes.items():
            load(db, {"__name__": "http_requests_total", "service": "checkout", "pod": pod,
                      "code": code}, [(0, v)])
        load(db, {"__name__": "kube_pod_info", "pod": pod, "node": node}, [(0, 1)])
    load(db, {"__name__": "kube_node_zone", "node": "n1", "zone": "zone-a"}, [(0, 1)])
    load(db, {"__name__": "kube_node_zone", "node": "n2", "zone": "zone-b"}, [(0, 1)])
    return db


# --- selectors -------------------------------------------------------------------------------

def test_instant_selector_looks_back_five_minutes() -> None:
    db = TSDB()
    load(db, {"__name__": "up"}, [(0, 1), (30, 0)])
    assert one(db, "up", 30) == 0
    assert one(db, "up", 329) == 0  # the newest sample not after t, within 5 m
    assert instant(db, "up", 330) == {}  # (30, 330] holds none: the series has gone stale
    assert instant(db, "up", -1) == {}
    assert Engine(db).instant("up", T0 + 330, lookback=600).value == \
        Vector(Engine(db).instant("up", T0 + 30).value.samples)  # type: ignore[union-attr]


def test_offset_and_at() -> None:
    db = TSDB()
    load(db, {"__name__": "g"}, [(30 * i, i) for i in range(20)])
    assert one(db, "g offset 1m", 300) == 8
    assert one(db, "g offset -1m", 300) == 12
    assert one(db, f"g @ {T0 + 90}", 300) == 3
    assert one(db, f"g @ {T0 + 90} offset 30s", 0) == 2
    assert one(db, "max_over_time(g[1m] offset 2m)", 300) == 6
    # @ start() / end() of a range query pin every step to one instant.
    res = Engine(db).range("g @ end()", T0 + 60, T0 + 120, 30).value
    assert isinstance(res, Matrix) and res.series[0].values == [4.0, 4.0, 4.0]


def test_range_selector_in_an_instant_query_is_a_matrix() -> None:
    db = TSDB()
    load(db, {"__name__": "g"}, [(30 * i, i) for i in range(5)])
    m = matrix(db, "g[1m]", 120)
    assert [(t // 1000 - T0, v) for t, v in zip(m.series[0].times, m.series[0].values)] == [
        (90, 3.0), (120, 4.0)]


# --- binary operators ------------------------------------------------------------------------

def test_scalar_arithmetic_and_go_float_rules() -> None:
    db = TSDB()
    assert one(db, "1 + 2 * 3", 0) == 7
    assert one(db, "2 ^ 3 ^ 2", 0) == 512  # right-associative
    assert one(db, "7 % 3", 0) == 1 and one(db, "-7 % 3", 0) == -1  # Go's fmod sign
    assert one(db, "1 / 0", 0) == math.inf and math.isnan(one(db, "0 / 0", 0))
    assert one(db, "2 > bool 1", 0) == 1 and one(db, "2 < bool 1", 0) == 0


def test_vector_scalar_arithmetic_drops_the_name_and_comparison_filters(shop: TSDB) -> None:
    got = instant(shop, 'http_requests_total{pod="checkout-a"} * 2', 0)
    assert sorted(got.values()) == [4, 20]
    assert all("__name__" not in dict(k) for k in got)
    kept = instant(shop, "http_requests_total > 4", 0)
    assert sorted(kept.values()) == [5, 10]
    assert all(dict(k)["__name__"] == "http_requests_total" for k in kept)
    # Scalar on the left: the vector's value is still what a comparison keeps.
    assert sorted(instant(shop, "4 < http_requests_total", 0).values()) == [5, 10]
    flags = by(shop, 'http_requests_total{pod="checkout-a"} > bool 5', 0, "code")
    assert flags == {"200": 1, "500": 0}


def test_one_to_one_matching_with_on_and_ignoring(shop: TSDB) -> None:
    # Error share per pod: 5xx over all, matched on pod.
    q = ('sum by (pod) (http_requests_total{code=~"5.."}) '
         '/ on (pod) sum by (pod) (http_requests_total)')
    assert by(shop, q, 0, "pod") == {"checkout-a": pytest.approx(2 / 12)}
    # ignoring(code): {pod=a, code=500} meets {pod=a, code=200} minus code.
    q2 = ('http_requests_total{code="500"} / ignoring(code) '
          'http_requests_total{code="200"}')
    got = instant(shop, q2, 0)
    assert got == {(("pod", "checkout-a"), ("service", "checkout")): pytest.approx(0.2)}
    # Without group_left, two left elements meeting one right element is an error.
    with pytest.raises(ExecutionError, match="many-to-one matching must be explicit"):
        instant(shop, "http_requests_total / on(pod) kube_pod_info", 0)


def test_group_left_copies_labels_from_the_one_side(shop: TSDB) -> None:
    q = "http_requests_total * on (pod) group_left (node) kube_pod_info"
    got = {(dict(k)["pod"], dict(k)["code"]): (dict(k)["node"], v)
           for k, v in instant(shop, q, 0).items()}
    assert got == {("checkout-a", "200"): ("n1", 10), ("checkout-a", "500"): ("n1", 2),
                   ("checkout-b", "200"): ("n2", 5)}
    # The many side keeps its labels (less the name, for arithmetic).
    assert all("__name__" not in dict(k) and "service" in dict(k)
               for k in instant(shop, q, 0))
    # Chained: requests per zone through pod -> node -> zone.
    q3 = ("sum by (zone) (" + q + " * on (node) group_left (zone) kube_node_zone)")
    assert by(shop, q3, 0, "zone") == {"zone-a": 12, "zone-b": 5}


def test_group_right_mirrors_group_left(shop: TSDB) -> None:
    q = "kube_pod_info * on (pod) group_right (node) http_requests_total"
    got = {(dict(k)["pod"], dict(k)["code"]): v for k, v in instant(shop, q, 0).items()}
    assert got == {("checkout-a", "200"): 10, ("checkout-a", "500"): 2,
                   ("checkout-b", "200"): 5}
    # The "one" side must be unique per match group.
    with pytest.raises(ExecutionError, match="found duplicate series for the match group"):
        instant(shop, "http_requests_total * on (pod) group_right kube_pod_info", 0)


def test_set_operators(shop: TSDB) -> None:
    assert sorted(instant(shop, 'http_requests_total and on (pod) kube_pod_info{node="n2"}',
                          0).values()) == [5]
    assert sorted(instant(shop, 'http_requests_total unless on (pod) kube_pod_info{node="n2"}',
                          0).values()) == [2, 10]
    got = instant(shop, 'http_requests_total{code="500"} or http_requests_total', 0)
    # "or" adds the right side's elements whose label set (less the name) is new.
    assert sorted(got.values()) == [2, 5, 10]


# --- aggregations ----------------------------------------------------------------------------

def test_aggregations_by_and_without(shop: TSDB) -> None:
    assert one(shop, "sum(http_requests_total)", 0) == 17
    assert by(shop, "sum by (pod) (http_requests_total)", 0, "pod") == {
        "checkout-a": 12, "checkout-b": 5}
    assert by(shop, "sum without (pod) (http_requests_total)", 0, "code") == {
        "200": 15, "500": 2}
    # without drops the metric name too; by keeps only what it lists.
    assert list(instant(shop, "max without (pod, code) (http_requests_total)", 0)) == [
        (("service", "checkout"),)]
    assert one(shop, "avg(http_requests_total)", 0) == pytest.approx(17 / 3)
    assert one(shop, "min(http_requests_total)", 0) == 2
    assert one(shop, "max(http_requests_total)", 0) == 10
    assert one(shop, "count(http_requests_total)", 0) == 3
    assert one(shop, "group(http_requests_total)", 0) == 1
    # population stddev of 10 2 5: mean 17/3.
    mean = 17 / 3
    var = ((10 - mean) ** 2 + (2 - mean) ** 2 + (5 - mean) ** 2) / 3
    assert one(shop, "stddev(http_requests_total)", 0) == pytest.approx(math.sqrt(var))
    # quantile 0.5 of 2 5 10 is 5; 0.25 is 2 + .5 * 3.
    assert one(shop, "quantile(0.5, http_requests_total)", 0) == 5
    assert one(shop, "quantile(0.25, http_requests_total)", 0) == 3.5
    assert by(shop, 'count_values("n", http_requests_total)', 0, "n") == {
        "10": 1, "2": 1, "5": 1}


def test_topk_and_bottomk_keep_the_series_labels(shop: TSDB) -> None:
    v = Engine(shop).instant("topk(2, http_requests_total)", T0).value
    assert isinstance(v, Vector)
    assert [(dict(s.labels)["pod"], s.value) for s in v.samples] == [
        ("checkout-a", 10), ("checkout-b", 5)]  # descending
    assert dict(v.samples[0].labels)["__name__"] == "http_requests_total"
    b = Engine(shop).instant("bottomk by (pod) (1, http_requests_total)", T0).value
    assert isinstance(b, Vector)
    assert sorted((dict(s.labels)["pod"], s.value) for s in b.samples) == [
        ("checkout-a", 2), ("checkout-b", 5)]
    assert instant(shop, "topk(0, http_requests_total)", 0) == {}


# --- histogram_quantile ----------------------------------------------------------------------

def buckets(db: TSDB, counts: dict[str, float], **labels: str) -> None:
    for le, c in counts.items():
        load(db, {"__name__": "http_request_duration_seconds_bucket", "le": le, **labels},
             [(0, c)])


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    db = TSDB()
    buckets(db, {"0.1": 10, "0.5": 30, "1": 45, "+Inf": 50}, service="cart")
    hq = "histogram_quantile({}, http_request_duration_seconds_bucket)"
    # rank 25 of 50 falls in (0.1, 0.5], which holds 20: 0.1 + 0.4 * (25 - 10) / 20.
    assert one(db, hq.format(0.5), 0) == pytest.approx(0.4)
    # rank 2.5 in the first bucket, whose lower edge is 0: 0.1 * 2.5 / 10.
    assert one(db, hq.format(0.05), 0) == pytest.approx(0.025)
    # rank 45.5 > 45: the +Inf bucket answers the largest finite bound.
    assert one(db, hq.format(0.91), 0) == 1
    assert one(db, hq.format(1.5), 0) == math.inf
    assert one(db, hq.format(-1), 0) == -math.inf
    # The output keeps the other labels, drops le and the metric name.
    assert list(instant(db, hq.format(0.5), 0)) == [(("service", "cart"),)]


def test_histogram_quantile_of_rates_per_group() -> None:
    db = TSDB()
    for svc, rates in (("cart", {"0.1": 1, "0.5": 3, "+Inf": 4}),
                       ("pay", {"0.1": 0, "0.5": 0, "+Inf": 2})):
        for le, r in rates.items():
            load(db, {"__name__": "http_request_duration_seconds_bucket", "le": le,
                      "service": svc}, [(30 * i, r * 30 * i) for i in range(11)])
    q = ("histogram_quantile(0.5, sum by (service, le) "
         "(rate(http_request_duration_seconds_bucket[5m])))")
    got = by(db, q, 300, "service")
    # cart: rank 2 of 4 in (0.1, 0.5] holding 2: 0.1 + 0.4 * 1/2. pay: all above 0.5.
    assert got == {"cart": pytest.approx(0.3), "pay": 0.5}


def test_histogram_quantile_edge_cases() -> None:
    db = TSDB()
    buckets(db, {"0.1": 10, "0.5": 8, "+Inf": 20}, service="dip")  # non-monotonic
    buckets(db, {"0.1": 1, "0.5": 2}, service="noinf")
    buckets(db, {"0.1": 0, "+Inf": 0}, service="empty")
    load(db, {"__name__": "http_request_duration_seconds_bucket", "service": "x", "le": "abc"},
         [(0, 1)])
    res = Engine(db).instant("histogram_quantile(0.5, http_request_duration_seconds_bucket)",
                             T0)
    assert isinstance(res.value, Vector)
    got = {dict(s.labels)["service"]: s.value for s in res.value.samples}
    # dip: counts forced to 10 10 20; rank 10 reached in the first bucket: 0.1 * 10/10.
    assert got["dip"] == pytest.approx(0.1)
    assert math.isnan(got["noinf"]) and math.isnan(got["empty"])
    assert "x" not in got
    assert any("monotonicity" in i for i in res.notes.infos)
    assert any('"le" is missing or has a malformed value' in w for w in res.notes.warnings)


# --- functions -------------------------------------------------------------------------------

def test_math_and_clamp_functions() -> None:
    db = TSDB()
    load(db, {"__name__": "g", "k": "a"}, [(0, -2.5)])
    load(db, {"__name__": "g", "k": "b"}, [(0, 3.7)])
    assert by(db, "abs(g)", 0, "k") == {"a": 2.5, "b": 3.7}
    assert by(db, "ceil(g)", 0, "k") == {"a": -2, "b": 4}
    assert by(db, "floor(g)", 0, "k") == {"a": -3, "b": 3}
    assert by(db, "round(g)", 0, "k") == {"a": -2, "b": 4}  # floor(x + 0.5)
    assert by(db, "round(g, 0.5)", 0, "k") == {"a": -2.5, "b": 3.5}
    assert by(db, "clamp_min(g, 0)", 0, "k") == {"a": 0, "b": 3.7}
    assert by(db, "clamp_max(g, 0)", 0, "k") == {"a": -2.5, "b": 0}
    assert by(db, "clamp(g, -1, 1)", 0, "k") == {"a": -1, "b": 1}
    assert instant(db, "clamp(g, 1, -1)", 0) == {}
    assert math.isnan(by(db, "sqrt(g)", 0, "k")["a"])  # Go: NaN, not an exception
    assert by(db, "ln(g * 0)", 0, "k")["b"] == -math.inf


def test_absent_vector_scalar_time() -> None:
    db = TSDB()
    load(db, {"__name__": "up", "job": "cart"}, [(0, 1)])
    load(db, {"__name__": "up", "job": "pay"}, [(0, 1)])
    assert instant(db, 'absent(up{job="cart"})', 0) == {}
    assert instant(db, 'absent(up{job="gone", env=~"p.*"})', 0) == {(("job", "gone"),): 1}
    assert instant(db, 'absent_over_time(nothing{a="b"}[5m])', 0) == {(("a", "b"),): 1}
    assert instant(db, "vector(3)", 0) == {(): 3}
    assert math.isnan(one(db, "scalar(up)", 0))  # two elements
    assert one(db, 'scalar(up{job="cart"})', 0) == 1
    assert one(db, "time()", 90) == T0 + 90
    assert one(db, "hour(vector(time()))", 3 * 3600 + 5) == 3
    assert one(db, "day_of_week()", 0) == 1  # 2026-01-05 is a Monday


def test_label_replace_and_join() -> None:
    db = TSDB()
    load(db, {"__name__": "up", "instance": "cart-7d9f:8080"}, [(0, 1)])
    got = instant(db, 'label_replace(up, "pod", "$1", "instance", "(.*):.*")', 0)
    assert [dict(k)["pod"] for k in got] == ["cart-7d9f"]
    assert dict(next(iter(got)))["__name__"] == "up"  # label_replace keeps the name
    # Anchored: "cart" alone does not match "cart-7d9f:8080", so nothing changes.
    same = instant(db, 'label_replace(up, "pod", "$1", "instance", "(cart)")', 0)
    assert [dict(k).get("pod") for k in same] == [None]
    named = instant(db, 'label_replace(up, "port", "${p}", "instance", ".*:(?P<p>.*)")', 0)
    assert [dict(k)["port"] for k in named] == ["8080"]
    joined = instant(db, 'label_join(up, "x", "/", "__name__", "instance")', 0)
    assert [dict(k)["x"] for k in joined] == ["up/cart-7d9f:8080"]
    with pytest.raises(ExecutionError, match="invalid destination label name"):
        instant(db, 'label_replace(up, "1bad", "$1", "instance", "(.*)")', 0)


def test_sort_and_sort_desc() -> None:
    db = TSDB()
    for k, v in (("a", 2), ("b", 9), ("c", 4)):
        load(db, {"__name__": "g", "k": k}, [(0, v)])
    asc = Engine(db).instant("sort(g)", T0).value
    desc = Engine(db).instant("sort_desc(g)", T0).value
    assert isinstance(asc, Vector) and isinstance(desc, Vector)
    assert [s.value for s in asc.samples] == [2, 4, 9]
    assert [s.value for s in desc.samples] == [9, 4, 2]


def test_scalar_string_and_negation_results() -> None:
    db = TSDB()
    load(db, {"__name__": "g"}, [(0, 5)])
    assert isinstance(Engine(db).instant("1", T0).value, Scalar)
    assert Engine(db).instant('"hi"', T0).value == String("hi")
    assert instant(db, "-g", 0) == {(): -5}


# --- range queries and errors ----------------------------------------------------------------

def test_range_query_steps_and_series_sorted_by_labels() -> None:
    db = TSDB()
    for k in ("b", "a"):
        load(db, {"__name__": "g", "k": k}, [(30 * i, i) for i in range(10)])
    m = Engine(db).range("g", T0 + 60, T0 + 120, 30).value
    assert isinstance(m, Matrix)
    assert [dict(s.labels)["k"] for s in m.series] == ["a", "b"]
    assert m.series[0].values == [2, 3, 4]
    s = Engine(db).range("scalar(sum(g))", T0, T0 + 60, 60).value
    assert isinstance(s, Matrix) and s.series[0].labels == () and s.series[0].values == [0, 4]


def test_range_query_limits() -> None:
    e = Engine(TSDB())
    with pytest.raises(BadData, match="11,000 points"):
        e.range("up", 0, 11_001, 1)
    e.range("up", 0, 11_000, 1)  # (end - start) / step = 11,000 is allowed
    with pytest.raises(BadData, match="zero or negative"):
        e.range("up", 0, 10, 0)
    with pytest.raises(BadData, match="end timestamp must not be before start time"):
        e.range("up", 10, 0, 1)
    with pytest.raises(BadData, match='invalid expression type "range vector"'):
        e.range("up[5m]", 0, 10, 1)


def test_unsupported_and_malformed_queries_name_the_problem() -> None:
    e = Engine(TSDB())
    with pytest.raises(Unsupported, match=r"function histogram_count\(\)"):
        e.instant("histogram_count(x)", 0)
    with pytest.raises(Unsupported, match=r"aggregation limitk\(\)"):
        e.instant("limitk(2, x)", 0)
    with pytest.raises(BadData, match="parse error"):
        e.instant("sum(", 0)
    with pytest.raises(BadData, match="no expression"):
        e.instant("  ", 0)


def test_duplicate_label_sets_after_dropping_the_name_are_an_error() -> None:
    db = TSDB()
    load(db, {"__name__": "a_total", "k": "1"}, [(0, 1), (30, 2)])
    load(db, {"__name__": "b_total", "k": "1"}, [(0, 1), (30, 2)])
    with pytest.raises(ExecutionError, match="same labelset"):
        instant(db, '{__name__=~"a_total|b_total"} * 2', 30)
    assert len(instant(db, '{__name__=~"a_total|b_total"}', 30)) == 2


def test_max_samples_bounds_a_query() -> None:
    db = TSDB()
    load(db, {"__name__": "g"}, [(30 * i, i) for i in range(100)])
    with pytest.raises(ExecutionError, match="too many samples"):
        Engine(db, max_samples=50).instant("g[1h]", T0 + 3000)
