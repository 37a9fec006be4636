"""The twin's Prometheus: the series it records, counts faithful to the traffic they stand for,
and the API served through the API server's service proxy and at /prometheus/, behind the
agent's token and the policy point."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from twin_prom import PROXY, TOKEN, Shop

from pytest_sremarathon.alerts.engine import AlertEngine
from pytest_sremarathon.alerts.noise import NoiseConfig, NoiseGenerator
from pytest_sremarathon.alerts.rules import DEFAULT_RULES
from pytest_sremarathon.policy import Decision, MutationRequest

CHECKOUT = 'namespace="shop", service="checkout"'
ERROR_RATIO = (f'sum(rate(http_requests_total{{{CHECKOUT}, code=~"5.."}}[1m]))'
               f' / sum(rate(http_requests_total{{{CHECKOUT}}}[1m]))')
PER_SCRAPE = f'sum(http_requests_total{{{CHECKOUT}}}) - sum(http_requests_total{{{CHECKOUT}}} offset 30s)'


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[Shop]:
    s = Shop(tmp_path)
    yield s
    s.close()


def test_a_service_failing_75_percent_of_its_requests_reads_about_75_percent_in_every_scrape(shop: Shop) -> None:
    """Issue 16's example. Checkout runs at about 1.7 requests/s (1.8 at 00:15, 1.6 by 01:15)
    and gets one handler sample a tick. Under a code fault failing 75% of its requests:

    * each scrape counts Poisson(rate x 30 s) requests, about 51: within 4.5 standard deviations;
    * each scrape's error ratio is binomial over those ~51 requests around the failure share of
      the handler runs since the fault began (sd 0.061 at 0.75): within 4 sd of that share, so
      the counts say what the real handlers did;
    * that share is the handlers' (one run a tick: sd 0.068 twenty minutes in, 0.046 fifty
      minutes in), within 3 sd of 0.75; together every scrape is within 0.25 of 0.75 (about
      3 sd) and three quarters within 0.12. The half hour's mean ratio is held to the mean of
      the handlers' share over the same scrapes (within 0.05, and the binomial z-scores average
      under 1 in magnitude: the counts are unbiased), not to 0.75 itself: that mean follows
      the handlers' own draw of users (sd about 0.05 here), so a bound of 0.06 around 0.75
      tested the seed, not the counts (the autoscaling merge's new objects shifted the draw to a
      share of 0.69, which the scrapes read as 0.685). The old counting read 0 or 1: every
      scrape 0.25 or more away."""
    shop.break_checkout()
    shop.run(120)  # the rollout
    runs: list[bool] = []  # what checkout's handler did, run by run: failed?
    for c in shop.cluster.kubelet.containers.values():
        if c.service == "checkout" and c.module is not None:
            handler = c.module.ENDPOINTS["place_order"]

            def recorded(ctx: object, req: dict, handler: object = handler) -> object:
                try:
                    out = handler(ctx, req)  # type: ignore[operator]
                except Exception:
                    runs.append(True)
                    raise
                runs.append(False)
                return out

            c.module.ENDPOINTS["place_order"] = recorded
    shop.run(1080)  # twenty minutes of the fault
    ratios, off, binomial, shares = [], [], [], []
    for _ in range(60):  # half an hour of scrapes
        shop.run(30)
        expected = shop.checkout_rps() * 30
        count = shop.value(PER_SCRAPE)
        off.append((count - expected) / expected ** 0.5)
        ratio = shop.value(ERROR_RATIO)
        ratios.append(ratio)
        share = sum(runs) / len(runs)
        shares.append(share)
        binomial.append((ratio - share) / (share * (1 - share) / count) ** 0.5)
    share, n = sum(runs) / len(runs), len(runs)
    assert 1.5 < shop.checkout_rps() < 1.9 and 90 <= n <= 110
    assert all(abs(z) < 4.5 for z in off), off
    assert abs(statistics.fmean(off)) < 0.6  # unbiased: the mean count is the modelled rate's
    assert all(abs(z) < 4 for z in binomial), binomial
    assert abs(share - 0.75) < 3 * (0.75 * 0.25 / n) ** 0.5, (share, n)
    assert all(abs(r - 0.75) < 0.25 for r in ratios), ratios
    assert sum(abs(r - 0.75) < 0.12 for r in ratios) >= 0.75 * len(ratios), ratios
    assert abs(statistics.fmean(ratios) - statistics.fmean(shares)) < 0.05, (statistics.fmean(ratios), shares[-1])
    assert abs(statistics.fmean(binomial)) < 1, binomial
    # what the alert rules read is the same counts: the MetricStore's error ratio of each tick
    window = shop.cluster.metrics.window("shop", "checkout", "error_ratio", 10)
    assert window[-1] == pytest.approx(ratios[-1])


def test_every_family_is_recorded_with_its_metadata(shop: Shop) -> None:
    status, body = shop.get(PROXY + "/api/v1/metadata")
    assert status == 200
    meta = body["data"]
    for name, kind in [("http_requests_total", "counter"), ("http_request_duration_seconds", "histogram"),
                       ("container_cpu_usage_seconds_total", "counter"),
                       ("container_memory_working_set_bytes", "gauge"),
                       ("kube_pod_container_resource_limits", "gauge"), ("kube_pod_status_phase", "gauge"),
                       ("kube_pod_container_status_restarts_total", "counter"),
                       ("kube_pod_container_status_last_terminated_reason", "gauge"),
                       ("kube_deployment_status_replicas_available", "gauge"),
                       ("kube_deployment_spec_replicas", "gauge"), ("kube_node_status_condition", "gauge"),
                       ("up", "gauge"), ("redis_connected_clients", "gauge"), ("redis_commands_total", "counter"),
                       ("redis_commands_duration_seconds_total", "counter")]:
        assert meta[name][0]["type"] == kind, name
    names = set(shop.get(PROXY + "/api/v1/label/__name__/values")[1]["data"])
    assert {"http_requests_total", "http_request_duration_seconds_bucket", "http_request_duration_seconds_sum",
            "http_request_duration_seconds_count", "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes", "kube_pod_container_resource_limits", "kube_pod_status_phase",
            "kube_pod_container_status_restarts_total", "kube_deployment_status_replicas_available",
            "kube_deployment_spec_replicas", "kube_node_status_condition", "up", "redis_connected_clients",
            "redis_commands_total", "redis_commands_duration_seconds_total"} <= names
    series = shop.query('http_requests_total{service="cart", endpoint="get_cart", pod!=""}')
    assert series and set(series[0]["metric"]) >= {"namespace", "service", "pod", "endpoint", "code", "job",
                                                   "instance", "container"}
    assert len({s["metric"]["pod"] for s in series}) == 2  # both cart pods
    le = {s["metric"]["le"] for s in shop.query('http_request_duration_seconds_bucket{service="cart", '
                                                'endpoint="get_cart", pod!=""}')}
    assert le == {"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5",
                  "10", "+Inf"}
    up = shop.query('up{namespace="shop"}')
    assert len(up) == 22 and all(s["value"][1] == "1" for s in up)  # every shop pod answers its scrape
    assert shop.value('kube_node_status_condition{node="worker-a1", condition="Ready", status="true"}') == 1
    assert shop.value('sum(kube_pod_status_phase{namespace="shop", phase="Running"})') == 22
    # 21 of them are Deployments' and cart-cache's is its StatefulSet's (a datastore, with a claim)
    assert shop.value('sum(kube_deployment_spec_replicas{namespace="shop"})') == 21
    assert shop.value('kube_statefulset_replicas{namespace="shop", statefulset="cart-cache"}') == 1
    limits = shop.query('kube_pod_container_resource_limits{namespace="shop", resource="memory"}')
    assert limits and all(float(s["value"][1]) > 0 and s["metric"]["unit"] == "byte" for s in limits)
    assert shop.value('redis_connected_clients{service="cart-cache"}') == 2  # the two cart pods


def test_the_request_series_count_what_the_telemetry_endpoint_reports(shop: Shop) -> None:
    """The MetricStore (the alert rules and /sremarathon/v1/telemetry/metrics) and the series are
    the same draws: the requests of the latest scrape, per service."""
    shop.run(120)
    for svc in ("frontend", "cart", "productcatalog"):
        per_scrape = shop.value(f'sum(http_requests_total{{service="{svc}"}})'
                                f' - sum(http_requests_total{{service="{svc}"}} offset 30s)')
        assert per_scrape == pytest.approx(shop.cluster.metrics.latest("shop", svc, "requests_per_second") * 30)
        status, body = shop.get("/sremarathon/v1/telemetry/metrics",
                                {"app": "shop", "service": svc, "name": "requests_per_second"})
        assert status == 200 and body["series"][-1][1] == pytest.approx(per_scrape / 30)
    p99 = shop.cluster.metrics.latest("shop", "cart", "latency_p99_ms")
    assert 0 < p99 < 80  # under its SLO, as a healthy service is
    quantile = shop.value('histogram_quantile(0.99, sum by (le) (rate(http_request_duration_seconds_bucket'
                          '{service="cart"}[5m])))')
    assert 0 < quantile <= 0.1


def test_a_node_down_takes_its_targets_down(shop: Shop) -> None:
    node = "worker-b1"
    shop.cluster.network.node_up[node] = False
    shop.run(60)
    pods = {s["metric"]["pod"] for s in shop.query(f'kube_pod_info{{node="{node}", namespace="shop"}}')}
    assert pods
    down = {s["metric"]["pod"] for s in shop.query('up{namespace="shop"} == 0')}
    assert down == pods
    assert shop.value(f'up{{job="kubelet", node="{node}"}}') == 0
    status, body = shop.get(PROXY + "/api/v1/targets", {"state": "active"})
    health = {t["labels"].get("pod"): t["health"] for t in body["data"]["activeTargets"] if t["labels"].get("pod")}
    assert {p for p, h in health.items() if h == "down"} == pods


def test_served_through_the_service_proxy_and_at_the_direct_url(shop: Shop) -> None:
    q = {"query": 'sum by (service) (rate(http_requests_total{namespace="shop"}[2m]))'}
    status, via_proxy = shop.get(PROXY + "/api/v1/query", q)
    assert status == 200 and via_proxy["status"] == "success"
    assert {r["metric"]["service"] for r in via_proxy["data"]["result"]} >= {"frontend", "cart", "checkout"}
    assert shop.get("/prometheus/api/v1/query", q) == (200, via_proxy)
    assert shop.get(PROXY + "/api/v1/query", data=q) == (200, via_proxy)  # POST, form-encoded
    assert shop.get("/api/v1/namespaces/monitoring/services/http:prometheus:9090/proxy/api/v1/query", q)[0] == 200
    assert shop.get("/api/v1/namespaces/monitoring/services/prometheus:web/proxy/-/healthy") == \
        (200, "Prometheus Server is Healthy.\n")
    status, body = shop.get(PROXY + "/api/v1/series", {"match[]": ["up{job=\"cart\"}", "up{job=\"kubelet\"}"]})
    assert status == 200 and {s["job"] for s in body["data"]} == {"cart", "kubelet"}
    assert shop.backend.urls == {"prometheus": shop.url("/prometheus"), "alertmanager": shop.url("/alertmanager"),
                                 "jaeger-query": shop.url("/jaeger")}
    # Prometheus's errors, the API server's for what is not a monitoring service, 401 without a token
    status, body = shop.get(PROXY + "/api/v1/query", {"query": "rate(up[5m]"})
    assert status == 400 and body["errorType"] == "bad_data"
    assert shop.get(PROXY + "/api/v1/query", q, token=None)[0] == 401
    assert shop.get("/prometheus/api/v1/query", q, token="wrong")[0] == 401
    status, body = shop.get("/api/v1/namespaces/shop/services/frontend:8080/proxy/")
    assert status == 503 and body["reason"] == "ServiceUnavailable"
    status, body = shop.get("/api/v1/namespaces/monitoring/services/nothing:80/proxy/")
    assert status == 404 and body["reason"] == "NotFound"
    assert shop.get("/api/v1/namespaces/monitoring/services/prometheus:9091/proxy/api/v1/query", q)[0] == 503


def test_reads_pass_the_policy_point_and_the_namespace_stays_protected(shop: Shop) -> None:
    shop.get(PROXY + "/api/v1/query", {"query": "up"})
    assert shop.admission.records == []  # an allowed read is no action
    status, body = shop.get("/api/v1/namespaces/monitoring/services/prometheus")
    assert status == 200 and body["spec"]["ports"][0]["port"] == 9090

    class DenyMonitoringReads:
        def __init__(self) -> None:
            self.records: list = []

        def decide(self, req: MutationRequest) -> Decision:
            if req.namespace == "monitoring" and req.verb == "get":
                return Decision(False, "no-monitoring", "denied: no dashboards today")
            return Decision(True)

        def record(self, req: MutationRequest, decision: Decision, status: int) -> None:
            self.records.append((req, status))

    from pytest_sremarathon.backends.monitoring import prometheus_handler
    from pytest_sremarathon.serving.http import Request

    deny = DenyMonitoringReads()
    handler = prometheus_handler(shop.backend.prometheus, shop.backend.store.lock, deny)
    resp = handler(Request("GET", "/api/v1/query", {"query": "up"}, None, "agent"))
    assert resp.status == 403 and [(r.target, s) for r, s in deny.records] == \
        [("kube/monitoring/services/prometheus/proxy", 403)]


def test_kubectl_and_the_official_client_reach_it_and_cannot_touch_the_namespace(shop: Shop, tmp_path: Path) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    kubeconfig = shop.backend.server.write_kubeconfig(tmp_path / "kubeconfig", TOKEN)
    api = kubernetes.config.new_client_from_config(str(kubeconfig))
    core = kubernetes.client.CoreV1Api(api)
    assert core.connect_get_namespaced_service_proxy_with_path("prometheus:9090", "monitoring",
                                                               "-/ready") == "Prometheus Server is Ready.\n"
    if shutil.which("kubectl"):
        out = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
                              "get", "--raw", PROXY + "/api/v1/query?query=count(up)"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["data"]["result"][0]["value"][1] == str(len(shop.query("up")))
    with pytest.raises(kubernetes.client.ApiException) as denied:
        core.delete_namespaced_service("prometheus", "monitoring")
    assert denied.value.status == 403 and "protected-namespaces" in denied.value.body
    assert [(r.verb, r.target, d.rule, s) for r, d, s in shop.admission.records] == \
        [("delete", "kube/monitoring/services/prometheus", "protected-namespaces", 403)]


def test_prometheus_api_client_through_the_service_proxy_with_the_token_and_the_ca(shop: Shop, tmp_path: Path) -> None:
    pac = pytest.importorskip("prometheus_api_client")
    requests = pytest.importorskip("requests")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(shop.backend.server.ca_pem)
    session = requests.Session()
    session.trust_env = False  # loopback only
    session.verify = str(ca)
    prom = pac.PrometheusConnect(url=shop.backend.server.https_url + PROXY, session=session,
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    assert prom.check_prometheus_connection()
    assert "http_requests_total" in prom.all_metrics()
    result = prom.custom_query('sum by (service) (rate(http_requests_total{namespace="shop"}[1m]))')
    assert {r["metric"]["service"] for r in result} >= {"frontend", "checkout"}
    assert set(prom.get_label_values("service", params={"match[]": "up"})) >= {"cart", "frontend"}
    import datetime as dt

    now = shop.clock.now
    rows = prom.get_metric_range_data('up{job="cart"}', start_time=now - dt.timedelta(minutes=3), end_time=now)
    assert len(rows) == 2 and all(len(r["values"]) >= 6 for r in rows)
    post = pac.PrometheusConnect(url=shop.backend.server.https_url + PROXY, session=session, method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}"})
    assert post.custom_query("count(up)")[0]["value"][1] == str(len(shop.query("up")))


def test_the_rules_and_alerts_are_the_alert_engines(shop: Shop) -> None:
    import random

    engine = AlertEngine(DEFAULT_RULES, NoiseGenerator(NoiseConfig(alerts_per_hour=0), random.Random(1), {}))
    shop.backend.rules.source = engine
    apps = {"shop": shop.app}
    fired = []
    shop.break_checkout()
    for _ in range(20):
        shop.run(30)
        fired += [t.alert for t in engine.evaluate(shop.clock.now, 30, shop.cluster, apps) if t.alert.status == "firing"]
    status, body = shop.get(PROXY + "/api/v1/rules")
    assert status == 200
    rules = {r["name"]: (g["name"], r) for g in body["data"]["groups"] for r in g["rules"]}
    assert {r.name for r in DEFAULT_RULES} <= set(rules)
    group, rule = rules["ServiceHighErrorRate"]
    assert group == "service-slos" and rule["duration"] == 120 and rule["labels"] == {"severity": "critical"}
    assert rule["state"] == "firing"
    firing = [a for a in fired if a.name == "ServiceHighErrorRate"]
    assert {a.labels["service"] for a in firing} >= {"checkout"}
    status, body = shop.get(PROXY + "/api/v1/alerts")
    shown = {tuple(sorted(a["labels"].items())): a for a in body["data"]["alerts"]}
    for alert in firing:
        a = shown[tuple(sorted(alert.labels.items()))]
        assert a["state"] == "firing" and a["annotations"] == alert.annotations
    # each rule's PromQL reads the recorded series: the error-rate rule's query finds checkout
    result = shop.query(rule["query"])
    assert {r["metric"]["service"] for r in result} >= {"checkout"}
    for _, r in rules.values():
        assert shop.get(PROXY + "/api/v1/query", {"query": r["query"]})[0] == 200, r["query"]
