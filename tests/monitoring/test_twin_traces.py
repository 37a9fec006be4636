"""The twin's traces: head-sampled requests through the shop's real handlers, recorded from the
traffic engine's calls and served by the Jaeger query API as ``jaeger-query:16686`` of the
monitoring namespace (through the API server's service proxy and at /jaeger/), behind the
agent's token and the policy point. Faults show where they are: the exception at the faulty
service, added latency at the pod it was added to, a call no pod answered as the caller's
client span."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twin_prom import TOKEN, Shop

from pytest_sremarathon.twin.tracing import TRACES_PER_APP_PER_TICK

JAEGER = "/api/v1/namespaces/monitoring/services/jaeger-query:16686/proxy"


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[Shop]:
    s = Shop(tmp_path)
    yield s
    s.close()


def traces(shop: Shop, **params: Any) -> list[dict[str, Any]]:
    status, body = shop.get(JAEGER + "/api/traces", params)
    assert status == 200 and body["errors"] is None, body
    return body["data"]


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span["tags"]}


def service_of(trace: dict[str, Any], span: dict[str, Any]) -> str:
    return trace["processes"][span["processID"]]["serviceName"]


def parent_of(span: dict[str, Any]) -> str | None:
    return span["references"][0]["spanID"] if span["references"] else None


def self_time(trace: dict[str, Any], span: dict[str, Any]) -> int:
    """µs of a span not spent in its children."""
    children = [s for s in trace["spans"] if parent_of(s) == span["spanID"]]
    return span["duration"] - sum(c["duration"] for c in children)


def test_sampled_requests_through_the_real_handlers_are_traces_with_their_call_tree(shop: Shop) -> None:
    status, body = shop.get(JAEGER + "/api/services")
    assert status == 200 and {"frontend.shop", "checkout.shop", "cart.shop"} <= set(body["data"])
    status, body = shop.get(JAEGER + "/api/services/checkout.shop/operations")
    assert body["data"] == ["place_order"]
    found = traces(shop, service="checkout.shop", limit=5)
    assert found
    for trace in found:
        spans = {s["spanID"]: s for s in trace["spans"]}
        root = next(s for s in trace["spans"] if not s["references"])
        assert service_of(trace, root) == "frontend.shop" and root["operationName"] == "checkout"
        for s in trace["spans"]:
            if s is root:
                continue
            parent = spans[parent_of(s)]  # type: ignore[index]
            # a child starts within its parent and the tree follows the call graph
            assert parent["startTime"] <= s["startTime"] <= parent["startTime"] + parent["duration"]
            assert (service_of(trace, parent), service_of(trace, s)) in {
                ("frontend.shop", "checkout.shop"), ("checkout.shop", "cart.shop"), ("checkout.shop", "payment.shop"),
                ("checkout.shop", "shipping.shop"), ("checkout.shop", "currency.shop"), ("checkout.shop", "email.shop"),
                ("cart.shop", "cart-cache.shop"), ("checkout.shop", "productcatalog.shop")}, (parent, s)
            assert tags(s)["http.status_code"] == 200 and "error" not in tags(s)
        pod = next(t["value"] for t in trace["processes"][root["processID"]]["tags"] if t["key"] == "k8s.pod.name")
        assert pod.startswith("frontend-")
    status, body = shop.get(JAEGER + "/api/dependencies")
    pairs = {(d["parent"], d["child"]) for d in body["data"]}
    assert {("frontend.shop", "checkout.shop"), ("checkout.shop", "cart.shop")} <= pairs


def test_a_code_fault_shows_its_exception_at_the_faulty_service(shop: Shop) -> None:
    shop.break_checkout()
    shop.run(300)
    found = traces(shop, service="checkout.shop", tags=json.dumps({"error": "true"}), limit=10)
    assert found
    for trace in found:
        failing = [s for s in trace["spans"] if tags(s).get("error")]
        checkout = next(s for s in failing if service_of(trace, s) == "checkout.shop")
        t = tags(checkout)
        assert t["http.status_code"] == 500 and t["otel.status_description"] == \
            "RuntimeError: card vault unavailable for this shard"
        log = {f["key"]: f["value"] for f in checkout["logs"][0]["fields"]}
        assert log["exception.type"] == "RuntimeError" and "checkout.py" in log["exception.stacktrace"]
        # the deepest failing span is checkout's: its callers fail because of it, its callees do not
        assert {service_of(trace, s) for s in failing} == {"frontend.shop", "checkout.shop"}
        frontend = next(s for s in failing if service_of(trace, s) == "frontend.shop")
        assert tags(frontend)["otel.status_description"] == "checkout: HTTP 500: Internal Server Error"


def test_added_latency_shows_at_the_pod_it_was_added_to(shop: Shop) -> None:
    carts = [c for c in shop.cluster.kubelet.containers.values() if c.service == "cart"]
    for c in carts:
        shop.cluster.network.pod_delay_ms[c.pod_uid] = 400.0
    shop.run(120)
    found = traces(shop, service="cart.shop", minDuration="400ms", limit=5)
    assert found
    for trace in found:
        slowest = max(trace["spans"], key=lambda s: self_time(trace, s))
        assert service_of(trace, slowest) == "cart.shop" and self_time(trace, slowest) >= 400_000
    # what does not call cart is not slowed
    assert not traces(shop, service="recommendation.shop", minDuration="300ms", lookback="1m")


def test_calls_that_reach_no_pod_are_the_callers_client_spans(shop: Shop) -> None:
    tracer = shop.cluster.traffic.tracer
    assert tracer is not None
    tracer.per_tick = 100  # every sampled request: checkout's (one a tick) are not all two a tick
    shop.cluster.network.externals_down.add("payment-provider")
    shop.run(600)
    spans = [(t, s) for t in traces(shop, service="payment.shop", tags=json.dumps({"span.kind": "client"}),
                                    limit=0) for s in t["spans"] if tags(s)["span.kind"] == "client"]
    assert any(tags(s)["peer.service"] == "payment-provider" and service_of(t, s) == "payment.shop"
               and tags(s)["http.status_code"] == 503 for t, s in spans), spans
    shop.cluster.network.dns_broken_zones.add("zone-a")
    shop.run(60)
    dns = traces(shop, service="frontend.shop", tag="span.kind:client", limit=0)
    calls = [s for t in dns for s in t["spans"] if tags(s)["span.kind"] == "client"]
    assert calls and all(tags(s)["error"] for s in calls)
    assert any("i/o timeout" in tags(s)["otel.status_description"] for s in calls)
    # an entry Service with no endpoints leaves the load balancer's span: ingress -> frontend.shop
    svc = shop.backend.store.get("Service", "shop", "frontend")
    assert svc is not None
    svc["spec"]["selector"] = {"app": "nothing"}
    shop.backend.store.replace(svc, check_rv=False)
    shop.run(60)
    ingress = [s for t in traces(shop, service="ingress", lookback="30s") for s in t["spans"]]
    assert ingress and {tags(s)["peer.service"] for s in ingress} == {"frontend.shop"}
    assert all(tags(s)["http.status_code"] == 503 for s in ingress)


def test_times_are_virtual_as_prometheus_answers(shop: Shop) -> None:
    """Span times are virtual µs, like the Prometheus API's virtual seconds: the window a client
    takes from Prometheus's ``time()`` finds this tick's traces; the default window ends at the
    virtual now; every trace of the tick lies in (now - 30 s, now]."""
    status, body = shop.get("/prometheus/api/v1/query", {"query": "time()"})
    now = float(body["data"]["result"][1])
    assert now == shop.clock.now.timestamp()
    end_us = int(now * 1_000_000)
    last_tick = traces(shop, service="frontend.shop", start=end_us - 30_000_000 + 1, end=end_us, limit=0)
    assert len(last_tick) == TRACES_PER_APP_PER_TICK  # head sampling: two of the shop's requests a tick
    for trace in last_tick:
        root = next(s for s in trace["spans"] if not s["references"])
        assert end_us - 30_000_000 < root["startTime"] <= end_us
    assert traces(shop, service="frontend.shop", limit=1) == traces(shop, service="frontend.shop", end=end_us, limit=1)
    assert not traces(shop, service="frontend.shop", start=end_us + 1)
    assert len(shop.backend.traces) <= shop.backend.traces.max_traces


def test_tracing_draws_nothing_from_the_simulations_random_stream(tmp_path: Path) -> None:
    """The same seed gives the same cluster whether requests are traced or not."""
    runs = []
    for traced in (True, False):
        s = Shop(tmp_path, traces=traced)
        try:
            s.break_checkout()
            s.run(600)
            series = s.query("http_requests_total")
            logs = [s.cluster.pod_log("shop", p["metadata"]["name"], None, False) for p in s.backend.store.list("Pod", "shop")]
            runs.append((sorted((json.dumps(r["metric"], sort_keys=True), r["value"][1]) for r in series), logs,
                         len(s.backend.traces)))
        finally:
            s.close()
    (series_on, logs_on, kept_on), (series_off, logs_off, kept_off) = runs
    assert kept_on > 0 and kept_off == 0
    assert series_on == series_off and logs_on == logs_off


def test_reached_with_urllib_kubectl_and_the_official_client_behind_the_token(shop: Shop, tmp_path: Path) -> None:
    assert shop.backend.urls["jaeger-query"] == shop.url("/jaeger")
    assert shop.get("/jaeger/api/services") == shop.get(JAEGER + "/api/services")
    assert shop.get("/jaeger/api/services", token=None)[0] == 401
    assert shop.get("/jaeger/api/services", token="wrong")[0] == 401
    status, body = shop.get(JAEGER + "/api/traces")
    assert status == 400 and body["errors"] == [{"code": 400, "msg": "parameter 'service' is required"}]
    trace_id = traces(shop, service="checkout.shop", limit=1)[0]["traceID"]
    kubernetes = pytest.importorskip("kubernetes")
    kubeconfig = shop.backend.server.write_kubeconfig(tmp_path / "kubeconfig", TOKEN)
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(kubeconfig)))
    raw = core.connect_get_namespaced_service_proxy_with_path("jaeger-query:16686", "monitoring",
                                                              f"api/traces/{trace_id}", _preload_content=False)
    assert json.loads(raw.data)["data"][0]["traceID"] == trace_id
    if shutil.which("kubectl"):
        out = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
                              "get", "--raw", JAEGER + "/api/services"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "checkout.shop" in json.loads(out.stdout)["data"]
    status, body = shop.get("/api/v1/namespaces/monitoring/services/jaeger-query")
    assert status == 200 and body["spec"]["ports"][0]["port"] == 16686
    with pytest.raises(kubernetes.client.ApiException) as denied:
        core.delete_namespaced_service("jaeger-query", "monitoring")
    assert denied.value.status == 403 and "protected-namespaces" in denied.value.body


def test_reads_pass_the_policy_point(shop: Shop) -> None:
    from pytest_sremarathon.backends.monitoring import jaeger_service
    from pytest_sremarathon.policy import Decision, MutationRequest
    from pytest_sremarathon.serving.http import Request
    from pytest_sremarathon.tracing import JaegerQuery

    class DenyMonitoringReads:
        records: list = []

        def decide(self, req: MutationRequest) -> Decision:
            return Decision(False, "no-traces", "denied: no traces today") if req.namespace == "monitoring" \
                else Decision(True)

        def record(self, req: MutationRequest, decision: Decision, status: int) -> None:
            self.records.append((req.target, status))

    deny = DenyMonitoringReads()
    svc = jaeger_service(JaegerQuery(shop.backend.traces, lambda: 0), shop.backend.store.lock, deny)
    resp = svc.handler(Request("GET", "/api/services", {}, None, "agent"))
    assert resp.status == 403 and deny.records == [("kube/monitoring/services/jaeger-query/proxy", 403)]
    shop.get(JAEGER + "/api/services")
    assert shop.admission.records == []  # an allowed read is no action


def test_requests_over_tls_through_the_service_proxy_with_the_ca(shop: Shop, tmp_path: Path) -> None:
    """As a Jaeger client (Grafana's data source, HolmesGPT's toolset) would: HTTPS to the API
    server, the kubeconfig's CA and token."""
    requests = pytest.importorskip("requests")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(shop.backend.server.ca_pem)
    session = requests.Session()
    session.trust_env = False  # loopback only
    session.verify = str(ca)
    session.headers["Authorization"] = f"Bearer {TOKEN}"
    base = shop.backend.server.https_url + JAEGER
    r = session.get(base + "/api/traces", params={"service": "frontend.shop", "limit": 3, "lookback": "5m"})
    assert r.status_code == 200 and len(r.json()["data"]) == 3
    trace_id = r.json()["data"][0]["traceID"]
    r = session.get(base + f"/api/traces/{trace_id}")
    assert r.status_code == 200 and r.json()["data"][0]["traceID"] == trace_id
    assert session.get(base + "/api/traces/zzz").status_code == 400
    assert session.get(base + "/api/traces/" + "0" * 31 + "1").json()["errors"][0]["msg"] == "trace not found"
