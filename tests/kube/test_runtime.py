"""The service runtime in-process: artifacts and their digests, the HTTP surface, ``ctx.call``
over real HTTP with the twin's error classes, the datastore, ``/metrics``."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.http import get_text, post_json

from pytest_sremarathon.apps import load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.kube.scrape import PodCounters, histogram_quantile, parse
from pytest_sremarathon.pipeline.build import package
from pytest_sremarathon.runtime import (
    ArtifactError,
    HttpRouter,
    Registry,
    ServiceServer,
    burn_cpu,
    content_digest,
    read_artifact,
    write_artifact,
)
from pytest_sremarathon.runtime.artifacts import datastore
from pytest_sremarathon.runtime.code import Artifact, Context, ServiceError, StoreError, UpstreamTimeout

SHOP = APPS_DIR / "shop"

SLOW = '''
def slow(ctx, req):
    ctx.work(float(req.get("ms", 0)))
    return {"ok": True}


def boom(ctx, req):
    return {"ratio": 1 / int(req.get("d", 0))}


def call(ctx, req):
    return ctx.call(req["service"], req["endpoint"], req.get("payload") or {})


def plain(ctx, req):
    return 42


ENDPOINTS = {"slow": slow, "boom": boom, "call": call, "plain": plain}
'''


def shop_artifacts() -> dict[str, Artifact]:
    app = load_app(SHOP)
    files = {str(p.relative_to(SHOP)): p.read_text() for p in sorted((SHOP / "services").glob("*.py"))}
    return package(app, files)


def artifact_of(service: str, source: str) -> Artifact:
    files = {f"services/{service}.py": source}
    return Artifact("lab", service, content_digest(files), f"services/{service}.py", files)


class Served:
    """ServiceServers on loopback, with an address map between them."""

    def __init__(self) -> None:
        self.servers: dict[str, ServiceServer] = {}
        self.addrs: dict[str, str] = {}
        self.logs: dict[str, list[str]] = {}

    def start(self, artifact: Artifact, config: dict[str, str] | None = None) -> ServiceServer:
        registry = Registry(artifact.app, artifact.service, artifact.digest)
        router = HttpRouter(namespace=artifact.app, registry=registry, addrs=self.addrs)
        lines = self.logs.setdefault(artifact.service, [])
        server = ServiceServer(artifact, namespace=artifact.app, config=config or {}, router=router,
                               registry=registry, bind="127.0.0.1", port=0, log=lines.append).start()
        self.servers[artifact.service] = server
        self.addrs[artifact.service] = f"127.0.0.1:{server.port}"
        return server

    def stop(self) -> None:
        for s in self.servers.values():
            s.stop()


@pytest.fixture
def served() -> Iterator[Served]:
    s = Served()
    yield s
    s.stop()


def post(server: ServiceServer, endpoint: str, body: Any) -> tuple[int, Any]:
    return post_json(server.port, endpoint, body, timeout=10)


def get(server: ServiceServer, path: str) -> tuple[int, str]:
    return get_text(server.port, path, timeout=10)


# -- artifacts -------------------------------------------------------------------------------------

def test_artifact_directories_keep_the_build_digest(tmp_path: Path) -> None:
    artifacts = shop_artifacts()
    cart = artifacts["cart"]
    assert content_digest(cart.files) == cart.digest  # the runtime's digest is the build step's
    back = read_artifact(write_artifact(cart, tmp_path / "cart"))
    assert back == cart
    assert json.loads((tmp_path / "cart" / "artifact.json").read_text())["digest"] == cart.digest
    (tmp_path / "cart" / "services" / "cart.py").write_text(cart.files["services/cart.py"] + "\n# patched\n")
    with pytest.raises(ArtifactError, match="do not match digest"):
        read_artifact(tmp_path / "cart")
    with pytest.raises(ArtifactError, match="no artifact manifest"):
        read_artifact(tmp_path / "nothing-here")


def test_datastore_artifact_round_trips_with_the_twins_digest(tmp_path: Path) -> None:
    ds = datastore("shop", "cart-cache", "redis:7.2-alpine")
    back = read_artifact(write_artifact(ds, tmp_path / "ds", datastore_image="redis:7.2-alpine"))
    assert back.digest == ds.digest and back.files == ds.files


# -- HTTP surface ----------------------------------------------------------------------------------

def test_endpoints_health_readiness_and_errors(served: Served) -> None:
    s = served.start(artifact_of("lab", SLOW))
    assert post(s, "slow", {"ms": 1}) == (200, {"ok": True})
    assert post(s, "plain", {}) == (200, {"value": 42})
    assert get(s, "/healthz") == (200, "ok")
    assert get(s, "/readyz") == (200, "ok")  # no ready(): always ready
    status, body = post(s, "boom", {"d": 0})
    assert status == 500 and body == {"error": "Internal Server Error", "origin": "service:lab/lab"}
    trace = "\n".join(served.logs["lab"])
    assert "ERROR boom failed\nTraceback (most recent call last):" in trace
    assert 'File "/app/services/lab.py", line 8, in boom' in trace
    assert "    return {\"ratio\": 1 / int(req.get(\"d\", 0))}" in trace
    assert "ZeroDivisionError: division by zero" in trace
    assert post(s, "nope", {})[0] == 404
    assert json.loads(get(s, "/")[1])["endpoints"] == ["boom", "call", "plain", "slow"]


def test_calls_map_failures_to_the_twins_exceptions(served: Served) -> None:
    callee = served.start(artifact_of("callee", SLOW))
    caller_art = artifact_of("caller", SLOW)
    caller = served.start(caller_art, config={"REQUEST_TIMEOUT_MS": "150"})
    ctx = caller.ctx

    assert ctx.call("callee", "slow", {"ms": 1}) == {"ok": True}
    # the callee's own bug: a 500 whose origin is the callee
    with pytest.raises(ServiceError) as err:
        ctx.call("callee", "boom", {"d": 0})
    assert (err.value.status, err.value.origin) == (500, "service:lab/callee")
    assert str(err.value) == "callee: HTTP 500: Internal Server Error"
    # a name that is no service: no such host, the caller's misconfiguration
    with pytest.raises(ServiceError) as err:
        ctx.call("payments-gateway", "charge", {})
    assert err.value.status == 503 and err.value.origin == "service:lab/caller"
    assert "lookup payments-gateway.lab.svc.cluster.local: no such host" in str(err.value)
    # an unknown endpoint is the callee's 404
    with pytest.raises(ServiceError) as err:
        ctx.call("callee", "missing", {})
    assert err.value.status == 404
    # the failure keeps its origin across hops: caller -> callee -> (boom)
    status, body = post(caller, "call", {"service": "callee", "endpoint": "boom", "payload": {"d": 0}})
    assert status == 500 and body["origin"] == "service:lab/callee"
    assert any("ERROR call: upstream call failed: callee: HTTP 500" in line for line in served.logs["caller"])
    # slower than the caller's REQUEST_TIMEOUT_MS
    t0 = time.perf_counter()
    with pytest.raises(UpstreamTimeout) as timeout:
        ctx.call("callee", "slow", {"ms": 400})
    assert time.perf_counter() - t0 < 0.4
    assert timeout.value.origin == "service:lab/callee" and "deadline exceeded after 150ms" in str(timeout.value)
    # a service that is down that is down: connection refused
    callee.stop()
    with pytest.raises(ServiceError) as err:
        ctx.call("callee", "slow", {})
    assert err.value.status == 503 and "connection refused" in str(err.value)


def test_the_datastore_serves_the_twins_store_with_its_password(served: Served) -> None:
    served.start(datastore("shop", "cart-cache", "redis:7.2-alpine"), config={"REDIS_PASSWORD": "s3cret"})
    client = served.start(artifact_of("cart", SLOW), config={"CART_CACHE_PASSWORD": "s3cret"})
    store = client.ctx.store("cart-cache")
    store.put("cart:u1", '[{"product": "X", "quantity": 2}]')
    assert store.get("cart:u1") == '[{"product": "X", "quantity": 2}]'
    assert store.incr("hits") == 1 and store.incr("hits", 4) == 5
    wrong = Context(app="shop", service="cart", pod="p", zone="", config_data={"CART_CACHE_PASSWORD": "old"},
                    router=client.router, logger=lambda _l: None)
    with pytest.raises(StoreError, match="WRONGPASS"):
        wrong.store("cart-cache").get("cart:u1")


def test_work_burns_real_cpu() -> None:
    t0 = time.thread_time()
    burn_cpu(30)
    assert time.thread_time() - t0 >= 0.029


# -- /metrics --------------------------------------------------------------------------------------

def test_metrics_are_prometheus_text_the_scraper_reads(served: Served) -> None:
    s = served.start(artifact_of("lab", SLOW))
    for _ in range(8):
        post(s, "slow", {"ms": 2})
    post(s, "boom", {"d": 0})
    status, text = get(s, "/metrics")
    assert status == 200
    samples = parse(text)
    names = {x.name for x in samples}
    assert {"sremarathon_requests_total", "sremarathon_request_duration_seconds_bucket",
            "process_cpu_seconds_total", "process_resident_memory_bytes", "sremarathon_build_info"} <= names
    by = {(x.label("endpoint"), x.label("code")): x.value for x in samples if x.name == "sremarathon_requests_total"}
    assert by[("slow", "200")] == 8 and by[("boom", "500")] == 1
    counters = PodCounters.from_samples(samples)
    assert counters.requests == 9 and counters.errors == 1 and counters.rss_bytes > 10 * 2**20
    assert counters.buckets[float("inf")] == 9
    p50 = histogram_quantile(0.5, counters.buckets)
    assert 0.001 <= p50 <= 0.05  # ~2 ms of work each


def test_histogram_quantile_interpolates_like_promql() -> None:
    buckets = {0.1: 50.0, 0.2: 90.0, 0.5: 100.0, float("inf"): 100.0}
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.7, buckets) == pytest.approx(0.15)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.47)
    assert histogram_quantile(0.5, {}) == 0.0
