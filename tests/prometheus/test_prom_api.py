"""The HTTP API as a pure handler: envelope, parameters, errors, every endpoint."""

from __future__ import annotations

from typing import Any

import pytest
from support.prom_helpers import T0, load

from pytest_sremarathon.prometheus import (
    TSDB,
    Alert,
    PrometheusAPI,
    Rule,
    RuleGroup,
    StaticRules,
    StaticTargets,
    Target,
)
from pytest_sremarathon.prometheus.api import parse_duration, parse_time

NOW = T0 + 600


@pytest.fixture
def api() -> PrometheusAPI:
    db = TSDB()
    for pod, code, per_scrape in (("cart-1", "200", 30), ("cart-1", "500", 10),
                                  ("cart-2", "200", 40)):
        load(db, {"__name__": "http_requests_total", "job": "shop/cart", "instance": pod,
                  "pod": pod, "code": code}, [(30 * i, per_scrape * i) for i in range(21)])
    load(db, {"__name__": "up", "job": "shop/cart", "instance": "cart-1"},
         [(30 * i, 1) for i in range(21)])
    db.set_metadata("http_requests_total", "counter", "Requests served.")
    db.set_metadata("up", "gauge", "Whether the target answered its scrape.")
    targets = StaticTargets([
        Target({"job": "shop/cart", "instance": "cart-1"}, "shop/cart",
               "http://10.0.0.7:8080/metrics", last_scrape=NOW - 12, last_scrape_duration=0.01),
        Target({"job": "shop/cart", "instance": "cart-2"}, "shop/cart",
               "http://10.0.0.8:8080/metrics", health="down", last_error="connection refused"),
        Target({"job": "dropped"}, "other", "", dropped=True),
    ])
    firing = Alert({"alertname": "HighErrorRate", "service": "cart", "severity": "page"},
                   {"summary": "cart fails"}, "firing", active_at=NOW - 300, value=0.25)
    rules = StaticRules([RuleGroup("shop", "/etc/prometheus/rules/shop.yaml", [
        Rule("HighErrorRate", 'sum(rate(http_requests_total{code=~"5.."}[5m])) > 0.1',
             duration=120, labels={"severity": "page"}, annotations={"summary": "errors"},
             state="firing", alerts=[firing], last_evaluation=NOW - 15),
        Rule("TargetDown", "up == 0", duration=300, labels={"severity": "ticket"}),
        Rule("job:requests:rate5m", "sum by (job) (rate(http_requests_total[5m]))",
             type="recording"),
    ], interval=30, last_evaluation=NOW - 15)])
    return PrometheusAPI(db, now=lambda: NOW, targets=targets, rules=rules)


def get(api: PrometheusAPI, path: str, **params: Any) -> tuple[int, dict[str, Any]]:
    q = {k.replace("match", "match[]") if k == "match" else k:
         (v if isinstance(v, list) else [str(v)]) for k, v in params.items()}
    status, body = api.handle("GET", path, q)
    assert isinstance(body, dict)
    return status, body


def test_instant_query_envelope(api: PrometheusAPI) -> None:
    status, body = get(api, "/api/v1/query", query='sum by (code) (rate(http_requests_total[5m]))')
    assert status == 200 and body["status"] == "success"
    assert body["data"]["resultType"] == "vector"
    result = {r["metric"]["code"]: r["value"] for r in body["data"]["result"]}
    # Values are [unix seconds, "string"], at the evaluation time (the caller's clock).
    assert {code: (ts, type(v)) for code, (ts, v) in result.items()} == {
        "200": (NOW, str), "500": (NOW, str)}
    assert float(result["200"][1]) == pytest.approx(70 / 30)
    assert float(result["500"][1]) == pytest.approx(10 / 30)
    assert "warnings" not in body


def test_time_parameters_unix_or_rfc3339(api: PrometheusAPI) -> None:
    for t in (str(T0 + 300), "2026-01-05T00:05:00Z", "2026-01-05T01:05:00+01:00",
              "2026-01-05T00:05:00.000Z"):
        _, body = get(api, "/api/v1/query", query="up", time=t)
        assert body["data"]["result"][0]["value"] == [T0 + 300, "1"], t
    _, body = get(api, "/api/v1/query", query="up", time=str(T0 + 300.5))
    assert body["data"]["result"][0]["value"][0] == T0 + 300.5
    assert parse_duration("1m30s") == 90 and parse_duration("15") == 15
    assert parse_time("2026-01-05T00:00:00Z") == T0
    status, body = get(api, "/api/v1/query", query="up", time="yesterday")
    assert status == 400 and body == {"status": "error", "errorType": "bad_data",
                                      "error": 'invalid parameter "time": cannot parse '
                                               '"yesterday" to a valid timestamp'}


def test_scalar_string_and_matrix_results(api: PrometheusAPI) -> None:
    _, body = get(api, "/api/v1/query", query="1 / 3")
    assert body["data"] == {"resultType": "scalar", "result": [NOW, "0.3333333333333333"]}
    _, body = get(api, "/api/v1/query", query="1 / 0")
    assert body["data"]["result"][1] == "+Inf"
    _, body = get(api, "/api/v1/query", query='"text"')
    assert body["data"] == {"resultType": "string", "result": [NOW, "text"]}
    _, body = get(api, "/api/v1/query", query='up[1m]')
    assert body["data"]["resultType"] == "matrix"
    assert body["data"]["result"][0]["values"] == [[NOW - 30, "1"], [NOW, "1"]]


def test_query_range(api: PrometheusAPI) -> None:
    status, body = get(api, "/api/v1/query_range", query="sum(rate(http_requests_total[5m]))",
                       start=T0 + 300, end=T0 + 600, step="60s")
    assert status == 200 and body["data"]["resultType"] == "matrix"
    (series,) = body["data"]["result"]
    assert series["metric"] == {}
    assert [v[0] for v in series["values"]] == [T0 + 300 + 60 * i for i in range(6)]
    assert all(float(v[1]) == pytest.approx(80 / 30) for v in series["values"])
    for params, err in (
        ({"start": T0, "end": T0 + 10, "step": "0"}, "zero or negative"),
        ({"start": T0, "end": T0 + 11_001, "step": "1"}, "11,000 points"),
        ({"start": T0 + 10, "end": T0, "step": "1"}, "end timestamp must not be before"),
        ({"end": T0, "step": "1"}, 'invalid parameter "start"'),
        ({"start": T0, "end": T0, "step": "x"}, 'invalid parameter "step"'),
    ):
        status, body = get(api, "/api/v1/query_range", query="up", **params)
        assert status == 400 and body["errorType"] == "bad_data" and err in body["error"]


def test_post_form_encoded_like_prometheus(api: PrometheusAPI) -> None:
    status, body = api.handle("POST", "/api/v1/query", {},
                              b"query=sum%28up%29&time=" + str(T0 + 300).encode())
    assert status == 200 and isinstance(body, dict)
    assert body["data"]["result"] == [{"metric": {}, "value": [T0 + 300, "1"]}]
    # The body's value wins over the URL's, as Go's Request.FormValue reads them.
    status, body = api.handle("POST", "/api/v1/query", {"query": ["nope{"]}, "query=up")
    assert status == 200
    status, body = api.handle("POST", "/api/v1/series", {},
                              {"match[]": ["up"], "start": [str(T0)]})
    assert status == 200 and isinstance(body, dict) and len(body["data"]) == 1


def test_errors_are_prometheus_shaped(api: PrometheusAPI) -> None:
    status, body = get(api, "/api/v1/query", query="sum(")
    assert status == 400 and body["status"] == "error" and body["errorType"] == "bad_data"
    assert body["error"].startswith('invalid parameter "query": parse error')
    status, body = get(api, "/api/v1/query", query="histogram_fraction(0, 1, x)")
    assert status == 400 and "histogram_fraction() is not implemented" in body["error"]
    status, body = get(api, "/api/v1/query", query="up / on() http_requests_total")
    assert status == 422 and body["errorType"] == "execution"
    assert "many-to-many matching not allowed" in body["error"]
    status, body = get(api, "/api/v1/nope")
    assert status == 404 and body["errorType"] == "not_found"
    status, body = api.handle("POST", "/api/v1/rules", {}, b"")
    assert status == 405


def test_warnings_and_infos_in_the_envelope(api: PrometheusAPI) -> None:
    _, body = get(api, "/api/v1/query", query="rate(up[5m])")
    assert any("might not be a counter" in i for i in body["infos"])
    _, body = get(api, "/api/v1/query", query="http_requests_total", limit="1")
    assert len(body["data"]["result"]) == 1
    assert body["warnings"] == ["results truncated due to limit"]


def test_series_labels_and_label_values(api: PrometheusAPI) -> None:
    status, body = get(api, "/api/v1/series", match=['http_requests_total{code="500"}', "up"])
    assert status == 200
    assert body["data"] == [
        {"__name__": "http_requests_total", "code": "500", "instance": "cart-1",
         "job": "shop/cart", "pod": "cart-1"},
        {"__name__": "up", "instance": "cart-1", "job": "shop/cart"}]
    status, body = get(api, "/api/v1/series")
    assert status == 400 and body["error"] == "no match[] parameter provided"
    status, body = get(api, "/api/v1/series", match=["sum(up)"])
    assert status == 400 and 'invalid parameter "match[]"' in body["error"]
    # Outside the data's time range nothing matches.
    _, body = get(api, "/api/v1/series", match=["up"], start=T0 + 7200, end=T0 + 7300)
    assert body["data"] == []
    _, body = get(api, "/api/v1/labels")
    assert body["data"] == ["__name__", "code", "instance", "job", "pod"]
    _, body = get(api, "/api/v1/labels", match=["up"])
    assert body["data"] == ["__name__", "instance", "job"]
    _, body = get(api, "/api/v1/label/__name__/values")
    assert body["data"] == ["http_requests_total", "up"]
    _, body = get(api, "/api/v1/label/code/values", match=['{pod="cart-2"}'])
    assert body["data"] == ["200"]
    status, body = get(api, "/api/v1/label/bad-name/values")
    assert status == 400 and "invalid label name" in body["error"]


def test_metadata(api: PrometheusAPI) -> None:
    _, body = get(api, "/api/v1/metadata")
    assert body["data"] == {
        "http_requests_total": [{"type": "counter", "help": "Requests served.", "unit": ""}],
        "up": [{"type": "gauge", "help": "Whether the target answered its scrape.",
                "unit": ""}]}
    _, body = get(api, "/api/v1/metadata", metric="up")
    assert list(body["data"]) == ["up"]
    _, body = get(api, "/api/v1/metadata", limit="1")
    assert len(body["data"]) == 1


def test_targets(api: PrometheusAPI) -> None:
    _, body = get(api, "/api/v1/targets")
    active = body["data"]["activeTargets"]
    assert [t["health"] for t in active] == ["up", "down"]
    assert active[0]["labels"] == {"job": "shop/cart", "instance": "cart-1"}
    assert active[0]["lastScrape"] == "2026-01-05T00:09:48.000Z"
    assert active[1]["lastError"] == "connection refused"
    assert body["data"]["droppedTargets"] == [{"discoveredLabels": {"job": "dropped"},
                                               "scrapePool": "other"}]
    _, body = get(api, "/api/v1/targets", state="active")
    assert body["data"]["droppedTargets"] == []
    _, body = get(api, "/api/v1/targets/metadata", match_target='{instance="cart-2"}')
    assert [(m["metric"], m["type"]) for m in body["data"]] == [
        ("http_requests_total", "counter")]


def test_rules_and_alerts(api: PrometheusAPI) -> None:
    _, body = get(api, "/api/v1/rules")
    (group,) = body["data"]["groups"]
    assert (group["name"], group["file"], group["interval"]) == (
        "shop", "/etc/prometheus/rules/shop.yaml", 30)
    high, down, rec = group["rules"]
    assert high["type"] == "alerting" and high["state"] == "firing"
    assert high["duration"] == 120 and high["labels"] == {"severity": "page"}
    assert high["alerts"][0]["activeAt"] == "2026-01-05T00:05:00.000Z"
    assert high["alerts"][0]["value"] == "2.5e-01"  # Go's %e spelling, as Prometheus
    assert down["state"] == "inactive" and down["alerts"] == []
    assert rec == {"name": "job:requests:rate5m",
                   "query": "sum by (job) (rate(http_requests_total[5m]))", "labels": {},
                   "health": "ok", "lastError": "", "evaluationTime": 0.0,
                   "lastEvaluation": "0001-01-01T00:00:00Z", "type": "recording"}
    _, body = get(api, "/api/v1/rules", type="record")
    assert [r["name"] for r in body["data"]["groups"][0]["rules"]] == ["job:requests:rate5m"]
    _, body = get(api, "/api/v1/rules", **{"rule_name[]": ["TargetDown"]})
    assert [r["name"] for r in body["data"]["groups"][0]["rules"]] == ["TargetDown"]
    _, body = get(api, "/api/v1/rules", match=['{severity="page"}'], exclude_alerts="true")
    assert [r["alerts"] for r in body["data"]["groups"][0]["rules"]] == [[]]
    _, body = get(api, "/api/v1/rules", **{"rule_group[]": ["other"]})
    assert body["data"]["groups"] == []
    status, body = get(api, "/api/v1/rules", type="bogus")
    assert status == 400
    _, body = get(api, "/api/v1/alerts")
    assert body["data"]["alerts"] == [{
        "labels": {"alertname": "HighErrorRate", "service": "cart", "severity": "page"},
        "annotations": {"summary": "cart fails"}, "state": "firing",
        "activeAt": "2026-01-05T00:05:00.000Z", "value": "2.5e-01"}]


def test_status_and_plain_endpoints(api: PrometheusAPI) -> None:
    _, body = get(api, "/api/v1/status/buildinfo")
    assert set(body["data"]) == {"version", "revision", "branch", "buildUser", "buildDate",
                                 "goVersion"}
    _, body = get(api, "/api/v1/status/flags")
    assert body["data"]["query.lookback-delta"] == "5m"
    _, body = get(api, "/api/v1/status/runtimeinfo")
    assert body["data"]["storageRetention"] == "1d"
    _, body = get(api, "/api/v1/format_query", query="sum(rate(x[5m]))by(a)")
    assert body["data"] == "sum by (a) (rate(x[5m]))"
    _, body = get(api, "/api/v1/query_exemplars", query="up", start=T0, end=NOW)
    assert body["data"] == []
    assert api.handle("GET", "/-/healthy", {}).status == 200
    assert api.handle("GET", "/", {}).content_type.startswith("text/plain")


def test_number_spellings_are_go_s() -> None:
    from pytest_sremarathon.prometheus.values import format_value, format_value_exp
    assert [format_value(v) for v in (1.0, 0.1, 1e21, 1.5e-7, -0.0, float("nan"),
                                      float("-inf"), 2.5)] == [
        "1", "0.1", "1000000000000000000000", "0.00000015", "-0", "NaN", "-Inf", "2.5"]
    assert [format_value_exp(v) for v in (1.0, 51.0, 0.75, 1e-10, 123456.0, 0.0, -2.0)] == [
        "1e+00", "5.1e+01", "7.5e-01", "1e-10", "1.23456e+05", "0e+00", "-2e+00"]


def test_a_single_string_parameter_and_an_internal_error(api: PrometheusAPI,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    status, body = api.handle("GET", "/api/v1/query", {"query": "up"})
    assert status == 200 and isinstance(body, dict) and len(body["data"]["result"]) == 1

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(api.engine, "instant", boom)
    status, body = api.handle("GET", "/api/v1/query", {"query": ["up"]})
    assert status == 500 and body == {"status": "error", "errorType": "internal",
                                      "error": "RuntimeError: bug"}
