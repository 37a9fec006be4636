"""The API over real HTTP on loopback, queried by the client off-the-shelf agents use
(prometheus-api-client's PrometheusConnect) and by plain urllib."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from support.prom_helpers import T0

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

pac = pytest.importorskip("prometheus_api_client", reason="the test extra is not installed")
requests = pytest.importorskip("requests")

HOUR = 3600
NOW = T0 + HOUR
FAULT_AT = T0 + 30 * 60  # checkout fails 75% of its requests from here on
BOUNDS = ("0.05", "0.1", "0.25", "0.5", "1", "+Inf")


def record_an_hour() -> tuple[TSDB, list[Target]]:
    """What the twin's scraper will record: an hour of 30 s scrapes of two services."""
    db = TSDB(retention=2 * HOUR)
    db.set_metadata("http_requests_total", "counter", "Requests served, by code.")
    db.set_metadata("http_request_duration_seconds", "histogram", "Request latency.",
                    "seconds")
    db.set_metadata("up", "gauge", "Whether the last scrape of the target succeeded.")
    targets = []
    pods = [("checkout", f"checkout-7d9f-{i}", 1.7 / 2) for i in range(2)] + \
           [("cart", f"cart-5b6c-{i}", 3.0 / 2) for i in range(2)]
    totals = {pod: [0, 0] for _, pod, _ in pods}  # ok, errors
    hist = {pod: [0.0] * len(BOUNDS) for _, pod, _ in pods}
    for _, pod, _ in pods:
        targets.append(Target({"job": "shop/" + pod.split("-")[0], "instance": pod + ":8080",
                               "namespace": "shop", "pod": pod}, "shop",
                              f"http://{pod}.shop:8080/metrics", last_scrape=NOW - 5))
    for k in range(HOUR // 30 + 1):
        t = T0 + 30 * k
        scrape: list[tuple[dict[str, str], float]] = []
        for svc, pod, per_s in pods:
            n = round(per_s * 30 * (k + 1)) - round(per_s * 30 * k)
            failing = svc == "checkout" and t > FAULT_AT
            err = (3 * n + k % 4) // 4 if failing else 0  # 75% of them, integer counts
            totals[pod][0] += n - err
            totals[pod][1] += err
            # Latency: a fixed shape per request, slower under the fault.
            shape = (0.2, 0.5, 0.9, 0.97, 1.0, 1.0) if not failing else (0.0, 0.1, 0.3, 0.6,
                                                                          0.9, 1.0)
            for i, share in enumerate(shape):
                hist[pod][i] += n * share
            base = {"namespace": "shop", "service": svc, "pod": pod, "endpoint": "/",
                    "job": f"shop/{svc}", "instance": pod + ":8080"}
            scrape += [({"__name__": "http_requests_total", **base, "code": "200"},
                        totals[pod][0]),
                       ({"__name__": "http_requests_total", **base, "code": "500"},
                        totals[pod][1])]
            scrape += [({"__name__": "http_request_duration_seconds_bucket", **base, "le": le},
                        hist[pod][i]) for i, le in enumerate(BOUNDS)]
            scrape.append(({"__name__": "up", "job": f"shop/{svc}", "instance": pod + ":8080",
                            "namespace": "shop", "pod": pod}, 1))
        db.append_many(t, scrape)
    return db, targets


@pytest.fixture(scope="module")
def world() -> tuple[TSDB, list[Target]]:
    return record_an_hour()


@pytest.fixture
def url(world: tuple[TSDB, list[Target]],
        serve_prometheus: Callable[[PrometheusAPI], str]) -> str:
    db, targets = world
    alert = Alert({"alertname": "HighErrorRate", "namespace": "shop", "service": "checkout",
                   "severity": "page"}, {"summary": "checkout fails 75% of its requests"},
                  "firing", active_at=FAULT_AT + 120, value=0.75)
    rules = StaticRules([RuleGroup("shop.rules", "shop.yaml", [Rule(
        "HighErrorRate", "service:error_ratio:rate5m > 0.05", duration=120,
        labels={"severity": "page"}, state="firing", alerts=[alert])])])
    return serve_prometheus(PrometheusAPI(db, now=lambda: NOW, targets=StaticTargets(targets),
                                          rules=rules))


def connect(url: str, method: str = "GET") -> Any:
    session = requests.Session()
    session.trust_env = False  # loopback only: no proxy from the environment
    return pac.PrometheusConnect(url=url, session=session, method=method, timeout=30)


def dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


RATIO = ('sum by (service) (rate(http_requests_total{code=~"5.."}[5m])) '
         '/ sum by (service) (rate(http_requests_total[5m]))')


def test_prometheus_api_client_queries(url: str) -> None:
    pc = connect(url)
    assert pc.check_prometheus_connection()
    assert pc.all_metrics() == ["http_request_duration_seconds_bucket", "http_requests_total",
                                "up"]
    assert "le" in pc.get_label_names()
    assert pc.get_label_values("service") == ["cart", "checkout"]
    # The example: 1.7 req/s, 75% failing, read as Prometheus would.
    got = {r["metric"]["service"]: float(r["value"][1])
           for r in pc.custom_query(RATIO, params={"time": NOW})}
    assert got["cart"] == 0 and got["checkout"] == pytest.approx(0.75, abs=0.01)
    rps = pc.custom_query('sum(rate(http_requests_total{service="checkout"}[5m]))',
                          params={"time": NOW})
    assert float(rps[0]["value"][1]) == pytest.approx(1.7, rel=0.02)
    # ... at every step after the fault has filled the 5m window, never 0 or 1.
    rows = pc.custom_query_range(RATIO, dt(FAULT_AT + 300), dt(NOW), "60")
    checkout = next(r for r in rows if r["metric"]["service"] == "checkout")
    assert len(checkout["values"]) == 26
    assert all(abs(float(v) - 0.75) < 0.03 for _, v in checkout["values"])
    p99 = pc.custom_query('histogram_quantile(0.99, sum by (le, service) '
                          '(rate(http_request_duration_seconds_bucket[5m])))',
                          params={"time": NOW})
    # cart: rank 0.99 falls in (0.5, 1], which holds 3% of requests: 0.5 + 0.5 * 2/3.
    # checkout (10% above 1 s): a rank in the +Inf bucket answers the largest finite bound.
    assert {r["metric"]["service"]: float(r["value"][1]) for r in p99} == {
        "cart": pytest.approx(0.5 + 0.5 * (0.99 - 0.97) / 0.03), "checkout": 1.0}


def test_prometheus_api_client_series_and_range_data(url: str) -> None:
    pc = connect(url)
    data = pc.get_metric_range_data("up", label_config={"pod": "cart-5b6c-0"},
                                    start_time=dt(NOW - 600), end_time=dt(NOW),
                                    chunk_size=timedelta(minutes=5))
    assert len(data) == 2  # one result per 5-minute chunk
    assert [len(d["values"]) for d in data] == [10, 10]  # (t - 300, t]: 10 scrapes each
    current = pc.get_current_metric_value("up", label_config={"pod": "cart-5b6c-1"},
                                          params={"time": NOW})
    assert [r["value"] for r in current] == [[NOW, "1"]]
    series = pc.get_series(dt(NOW - 60), dt(NOW), params={"match[]": 'up{service!="x"}'})
    assert [s["pod"] for s in series] == ["cart-5b6c-0", "cart-5b6c-1", "checkout-7d9f-0",
                                          "checkout-7d9f-1"]


def test_prometheus_api_client_targets_metadata_and_post(url: str) -> None:
    pc = connect(url)
    targets = pc.get_targets()
    assert len(targets["activeTargets"]) == 4
    assert pc.get_scrape_pools() == ["shop"]
    md = pc.get_metric_metadata("http_request_duration_seconds")
    assert md == [{"metric_name": "http_request_duration_seconds", "type": "histogram",
                   "help": "Request latency.", "unit": "seconds"}]
    tmd = pc.get_target_metadata({"job": "shop/checkout"}, metric="up")
    assert {m["metric"] for m in tmd} == {"up"} and len(tmd) == 2
    post = connect(url, method="POST")
    assert float(post.custom_query("sum(up)", params={"time": NOW})[0]["value"][1]) == 4
    with pytest.raises(pac.PrometheusApiClientException, match="400"):
        pc.custom_query("sum(rate(http_requests_total[5m])")


def fetch(url: str, data: bytes | None = None) -> tuple[int, dict[str, Any]]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, data=data)
    if data is not None:
        req.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        with opener.open(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_plain_http(url: str) -> None:
    q = urllib.parse.urlencode({"query": RATIO, "time": "2026-01-05T01:00:00Z"})
    status, body = fetch(f"{url}/api/v1/query?{q}")
    assert status == 200 and body["status"] == "success"
    assert body["data"]["resultType"] == "vector"
    form = urllib.parse.urlencode({"query": 'up{pod=~"checkout.*"}', "start": NOW - 60,
                                   "end": NOW, "step": "30s"}).encode()
    status, body = fetch(f"{url}/api/v1/query_range", form)
    assert status == 200
    assert [len(r["values"]) for r in body["data"]["result"]] == [3, 3]
    status, body = fetch(f"{url}/api/v1/query?query=" + urllib.parse.quote("rate(up)"))
    assert status == 400 and body["errorType"] == "bad_data"
    assert "expected type matrix" in body["error"]
    status, body = fetch(f"{url}/api/v1/query?query=" + urllib.parse.quote(
        "up * on() up"))
    assert status == 422 and body["errorType"] == "execution"
    status, body = fetch(f"{url}/api/v1/alerts")
    assert body["data"]["alerts"][0]["labels"]["alertname"] == "HighErrorRate"
    status, body = fetch(f"{url}/api/v1/rules?type=alert")
    assert body["data"]["groups"][0]["rules"][0]["state"] == "firing"
    status, body = fetch(f"{url}/api/v1/status/buildinfo")
    assert status == 200 and body["data"]["version"]
    status, body = fetch(f"{url}/api/v1/nothing")
    assert status == 404 and body["status"] == "error"
