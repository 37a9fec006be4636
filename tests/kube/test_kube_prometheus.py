"""The kube backend's Prometheus: the service processes' own /metrics recorded under the twin's
names (kube/series.py), kube-state-metrics from the mirrored objects, and the API served by
the policy proxy — through its service proxy and at /prometheus/ — as the twin serves it."""

from __future__ import annotations

import http.client
import json
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from support.admission import RecordingAdmission as Recorder
from support.kube import ORCHESTRATOR_TOKEN, Upstream

from pytest_sremarathon.apps import load_app
from pytest_sremarathon.backends.monitoring import Monitoring, prometheus_service
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.k8s.store import Store
from pytest_sremarathon.kube.api import KubeApi
from pytest_sremarathon.kube.cluster import KubeCluster
from pytest_sremarathon.kube.proxy import PolicyProxy
from pytest_sremarathon.kube.scrape import parse
from pytest_sremarathon.kube.series import KubeSeries, ScrapedPod
from pytest_sremarathon.prometheus import PrometheusAPI
from pytest_sremarathon.runtime.metrics import Registry

AGENT = "agent-token-kube-prometheus"
T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


def _pod(service: str, name: str, registry: Registry | None) -> ScrapedPod:
    samples = parse(registry.render()) if registry is not None else None
    return ScrapedPod("shop", service, name, f"uid-{name}", service, "worker-a1", f"img/{service}", "10.244.1.9",
                      8080, True, samples)


def _query(api: PrometheusAPI, expr: str) -> list[dict[str, Any]]:
    status, body = api.handle("GET", "/api/v1/query", {"query": [expr]})
    assert status == 200, body
    return body["data"]["result"]


def test_the_runtimes_exposition_is_recorded_under_the_twins_names() -> None:
    shop = load_app(APPS_DIR / "shop")
    series = KubeSeries([shop], Store(lambda: T0))
    api = PrometheusAPI(series.db, now=lambda: T0.timestamp() + 30)
    cart, cache = Registry("shop", "cart", "sha256:1"), Registry("shop", "cart-cache", "sha256:2")
    for i in range(3):
        for _ in range(10):
            cart.observe("get_cart", 200, 0.004)
        cart.observe("get_cart", 500, 0.2)
        cache.observe("get", 200, 0.0003)
        series.record(T0.replace(second=0) if i == 0 else T0.fromtimestamp(T0.timestamp() + 15 * i, timezone.utc),
                      [_pod("cart", "cart-1", cart), _pod("cart-cache", "cart-cache-1", cache),
                       _pod("cart", "cart-2", None)])
    ok = _query(api, 'http_requests_total{service="cart", endpoint="get_cart", code="200"}')
    assert [(r["metric"]["pod"], r["metric"]["job"], r["value"][1]) for r in ok] == [("cart-1", "cart", "30")]
    assert set(ok[0]["metric"]) >= {"namespace", "service", "pod", "container", "job", "instance", "endpoint", "code"}
    buckets = {r["metric"]["le"]: r["value"][1] for r in
               _query(api, 'http_request_duration_seconds_bucket{pod="cart-1", endpoint="get_cart"}')}
    assert buckets["0.005"] == "30" and buckets["+Inf"] == "33"
    assert _query(api, 'redis_commands_total{service="cart-cache", cmd="get"}')[0]["value"][1] == "3"
    assert _query(api, 'redis_connected_clients{service="cart-cache"}')[0]["value"][1] == "2"  # the cart pods
    up = {r["metric"]["pod"]: r["value"][1] for r in _query(api, 'up{namespace="shop"}')}
    assert up == {"cart-1": "1", "cart-cache-1": "1", "cart-2": "0"}  # cart-2's /metrics did not answer
    assert _query(api, 'container_cpu_usage_seconds_total{pod="cart-1"}')
    assert _query(api, 'slo:http_request_duration_seconds:p99{service="cart"}')[0]["value"][1] == "0.08"


def test_the_policy_proxy_serves_the_kube_clusters_prometheus(upstream: Upstream, tmp_path: Path) -> None:
    """A KubeCluster over the twin (whose pods' /metrics the pod proxy does not reach: their
    targets are down) records kube-state-metrics from its mirror; the proxy answers the
    monitoring service proxy and /prometheus/ from it, and forwards everything else."""
    api = KubeApi(server=upstream.url, token=ORCHESTRATOR_TOKEN)
    cluster = KubeCluster(api, upstream.backend.cluster.apps, clock=lambda: upstream.clock.now)
    try:
        cluster.refresh()
        cluster.scrape(upstream.clock.now, 30.0)
        monitoring = Monitoring()
        service, _ = prometheus_service(cluster.prometheus, cluster.store.lock, lambda: upstream.clock.now.timestamp(),
                                        targets=cluster.series.targets, admission=Recorder())
        monitoring.add(service)
        proxy = PolicyProxy(api, tokens={AGENT: "agent"}, admission=Recorder(), extensions=monitoring.extensions(),
                            service_proxy=monitoring.service_proxy).start()
        try:
            def get(path: str, query: dict[str, str] | None = None, body: str | None = None) -> tuple[int, Any]:
                conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=20)
                target = path + ("?" + urllib.parse.urlencode(query) if query else "")
                headers = {"Authorization": f"Bearer {AGENT}"}
                if body is not None:
                    headers["Content-Type"] = "application/x-www-form-urlencoded"
                conn.request("POST" if body is not None else "GET", target, body=body, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                conn.close()
                return resp.status, json.loads(raw) if raw.startswith((b"{", b"[")) else raw.decode()

            via = "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy/api/v1/query"
            status, body = get(via, {"query": 'sum(kube_pod_status_phase{namespace="shop", phase="Running"})'})
            assert status == 200 and float(body["data"]["result"][0]["value"][1]) >= 10
            status, body = get("/prometheus/api/v1/query", body="query=count(up%7Bnamespace%3D%22shop%22%7D%20%3D%3D%200)")
            assert status == 200 and float(body["data"]["result"][0]["value"][1]) >= 10
            status, body = get("/api/v1/namespaces/shop/pods")  # the rest still goes to the cluster
            assert status == 200 and body["kind"] == "PodList"
        finally:
            proxy.stop()
    finally:
        cluster.close()
