"""The Jaeger query handler served over HTTP on loopback and called as Grafana's Jaeger data
source and the Jaeger UI call jaeger-query: services, operations, a search form, a trace, the
dependency graph."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator

import pytest
from loopback_handler import HandlerServer, request
from trace_world import MINUTE, T0

from pytest_sremarathon.tracing import JaegerQuery, TraceRecorder

World = tuple[TraceRecorder, JaegerQuery, dict[str, int]]


@pytest.fixture
def jaeger(world: World) -> Iterator[tuple[str, dict[str, int]]]:
    _, q, ids = world
    with HandlerServer(lambda method, path, query, _body: q.handle(method, path, query)) as server:
        yield server.url, ids


def test_the_ui_search_form(jaeger: tuple[str, dict[str, int]]) -> None:
    url, ids = jaeger
    status, services = request(f"{url}/api/services")
    assert status == 200 and "cart.shop" in services["data"] and services["total"] == len(services["data"])
    service = urllib.parse.quote("frontend.shop", safe="")
    status, ops = request(f"{url}/api/services/{service}/operations")
    assert status == 200 and ops["data"] == ["checkout", "home"]
    # what the UI sends for "last hour, 20 results": empty duration fields included
    end = T0 + 10 * MINUTE
    status, found = request(f"{url}/api/traces", params=[
        ("end", str(end)), ("limit", "20"), ("lookback", "1h"), ("maxDuration", ""), ("minDuration", ""),
        ("service", "frontend.shop"), ("start", str(end - 3600 * 10**6))])
    assert status == 200 and len(found["data"]) == 20
    assert (found["total"], found["limit"], found["offset"], found["errors"]) == (0, 0, 0, None)


def test_grafana_finds_the_failing_request_and_opens_it(jaeger: tuple[str, dict[str, int]]) -> None:
    url, ids = jaeger
    status, found = request(f"{url}/api/traces", params=[
        ("service", "checkout.shop"), ("operation", "place_order"), ("tags", json.dumps({"error": "true"})),
        ("minDuration", "1ms"), ("limit", "20"), ("start", str(T0)), ("end", str(T0 + 10 * MINUTE))])
    assert status == 200
    (trace,) = found["data"]
    status, by_id = request(f"{url}/api/traces/{trace['traceID']}")
    assert status == 200 and by_id["data"] == [trace]
    cart_errors = [s for s in trace["spans"] if trace["processes"][s["processID"]]["serviceName"] == "cart.shop"
                   and any(t["key"] == "error" for t in s["tags"])]
    assert [s["operationName"] for s in cart_errors] == ["empty_cart"]
    assert int(trace["traceID"], 16) == ids["checkout-5"]


def test_the_dependency_graph(jaeger: tuple[str, dict[str, int]]) -> None:
    url, _ = jaeger
    status, deps = request(f"{url}/api/dependencies", params=[
        ("endTs", str((T0 + 10 * MINUTE) // 1000)), ("lookback", str(3600 * 1000))])
    assert status == 200
    assert {(d["parent"], d["child"]): d["callCount"] for d in deps["data"]} == {
        ("frontend.shop", "checkout.shop"): 10, ("checkout.shop", "cart.shop"): 20}


def test_errors_reach_the_client_with_their_status(jaeger: tuple[str, dict[str, int]]) -> None:
    url, _ = jaeger
    status, body = request(f"{url}/api/traces/0123456789abcdef")
    assert status == 404 and body["errors"] == [{"code": 404, "msg": "trace not found"}]
    status, body = request(f"{url}/api/traces", params=[("service", "cart.shop"), ("minDuration", "10")])
    assert status == 400 and body["data"] is None
    assert body["errors"][0]["msg"] == 'unable to parse param \'minDuration\': time: missing unit in duration "10"'
    status, body = request(f"{url}/api/traces")
    assert status == 400 and body["errors"][0]["msg"] == "parameter 'service' is required"
