"""The Jaeger query API handler: endpoints, search parameters, JSON shapes and errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
from trace_world import CART, MINUTE, T0

from pytest_sremarathon.tracing import JaegerQuery, TraceRecorder
from pytest_sremarathon.tracing.jaeger import parse_go_duration, parse_trace_id
from pytest_sremarathon.tracing.recorder import format_trace_id

World = tuple[TraceRecorder, JaegerQuery, dict[str, int]]
EMPTY = {"total": 0, "limit": 0, "offset": 0, "errors": None}


def search(q: JaegerQuery, **params: Any) -> tuple[int, Any]:
    query = {k: v if isinstance(v, list) else [str(v)] for k, v in params.items()}
    return q.handle("GET", "/api/traces", query)


def trace_ids(body: dict[str, Any]) -> list[int]:
    return [int(t["traceID"], 16) for t in body["data"]]


def test_services_and_operations(world: World) -> None:
    _, q, _ = world
    assert q.handle("GET", "/api/services") == (200, {
        "data": ["cart.shop", "checkout.shop", "frontend.hotel", "frontend.shop"], "total": 4, "limit": 0,
        "offset": 0, "errors": None})
    assert q.handle("GET", "/api/services/frontend.shop/operations") == (200, {
        "data": ["checkout", "home"], "total": 2, "limit": 0, "offset": 0, "errors": None})
    status, body = q.handle("GET", "/api/operations", {"service": ["cart.shop"], "spanKind": ["server"]})
    assert status == 200 and body["data"] == [{"name": "empty_cart", "spanKind": "server"},
                                              {"name": "get_cart", "spanKind": "server"}]
    assert q.handle("GET", "/api/operations", {"service": ["cart.shop"], "spanKind": ["client"]})[1]["data"] == []
    assert q.handle("GET", "/api/services/nope/operations")[1]["data"] == []
    assert q.handle("GET", "/api/operations") == (400, {
        "data": None, "total": 0, "limit": 0, "offset": 0,
        "errors": [{"code": 400, "msg": "parameter 'service' is required"}]})


def test_search_by_service_and_operation_newest_first(world: World) -> None:
    _, q, ids = world
    status, body = search(q, service="cart.shop")
    assert status == 200 and {k: body[k] for k in EMPTY} == EMPTY
    assert trace_ids(body) == [ids[f"checkout-{m}"] for m in reversed(range(10))]
    assert trace_ids(search(q, service="frontend.shop", operation="home")[1]) == \
        [ids[f"home-{m}"] for m in reversed(range(10))]
    assert trace_ids(search(q, service="frontend.hotel")[1]) == [ids["hotel"]]
    assert search(q, service="nope")[1]["data"] == []
    assert search(q) == (400, {"data": None, "total": 0, "limit": 0, "offset": 0,
                               "errors": [{"code": 400, "msg": "parameter 'service' is required"}]})


def test_search_limit(world: World) -> None:
    _, q, ids = world
    assert trace_ids(search(q, service="cart.shop", limit=3)[1]) == [ids[f"checkout-{m}"] for m in (9, 8, 7)]
    assert len(search(q, service="cart.shop", limit=0)[1]["data"]) == 10  # 0: no limit, as Jaeger's store reads it
    assert search(q, service="cart.shop", limit="x")[1]["errors"] == [
        {"code": 400, "msg": 'strconv.ParseInt: parsing "x": invalid syntax'}]


def test_search_by_tags_json_and_tag_pairs(world: World) -> None:
    _, q, ids = world
    failed = [ids["checkout-5"]]
    assert trace_ids(search(q, service="cart.shop", tags=json.dumps({"error": "true"}))[1]) == failed
    assert trace_ids(search(q, service="cart.shop", tags=json.dumps({"http.status_code": "500"}))[1]) == failed
    assert trace_ids(search(q, service="cart.shop", tag="error:true")[1]) == failed
    # a log field (the exception event) and a process tag (the pod) match too, as in Jaeger's store
    assert trace_ids(search(q, service="cart.shop", tags=json.dumps({"exception.type": "KeyError"}))[1]) == failed
    by_pod = search(q, service="cart.shop", tags=json.dumps({"k8s.pod.name": CART.pod_name}))[1]
    assert len(by_pod["data"]) == 10
    assert search(q, service="cart.shop", tags=json.dumps({"error": "true", "k8s.node.name": "node-z"}))[1]["data"] == []
    # one span must carry them all: the failed cart span, not a mix of spans
    assert search(q, service="frontend.shop", tags=json.dumps({"exception.type": "KeyError"}))[1]["data"] == []
    # a trace at an edge of the time window is rebuilt and its spans tested one by one
    edge = search(q, service="cart.shop", tags=json.dumps({"error": "true"}), start=T0 + 5 * MINUTE,
                  end=T0 + 5 * MINUTE + 10_000)[1]
    assert trace_ids(edge) == failed
    assert search(q, service="cart.shop", tags=json.dumps({"error": "true"}), start=T0 + 5 * MINUTE,
                  end=T0 + 5 * MINUTE + 6_000)[1]["data"] == []  # the failed span starts 8.5 ms in
    assert search(q, service="cart.shop", tags="{bad")[1]["errors"][0]["msg"].startswith(
        "malformed 'tags' parameter, cannot unmarshal JSON")
    assert search(q, service="cart.shop", tag="error")[1]["errors"] == [
        {"code": 400, "msg": "malformed 'tag' parameter, expecting key:value, received: error"}]


def test_search_by_duration(world: World) -> None:
    _, q, ids = world
    slow = [ids["checkout-7"]]
    assert trace_ids(search(q, service="cart.shop", minDuration="100ms")[1]) == slow
    assert trace_ids(search(q, service="cart.shop", operation="get_cart", minDuration="0.25s")[1]) == slow
    assert ids["checkout-7"] not in trace_ids(search(q, service="cart.shop", operation="get_cart",
                                                     maxDuration="100ms")[1])
    # any one span of the service within the bounds will do: checkout-7's empty_cart took 1 ms
    assert ids["checkout-7"] in trace_ids(search(q, service="cart.shop", maxDuration="100ms")[1])
    assert len(search(q, service="cart.shop", minDuration="1.5ms", maxDuration="2.5ms")[1]["data"]) == 9
    errors = {
        "5": 'unable to parse param \'minDuration\': time: missing unit in duration "5"',
        "5x": 'unable to parse param \'minDuration\': time: unknown unit "x" in duration "5x"',
        "fast": 'unable to parse param \'minDuration\': time: invalid duration "fast"',
    }
    for text, msg in errors.items():
        assert search(q, service="cart.shop", minDuration=text) == (400, {
            "data": None, "total": 0, "limit": 0, "offset": 0, "errors": [{"code": 400, "msg": msg}]})
    assert search(q, service="cart.shop", minDuration="2s", maxDuration="1s")[1]["errors"] == [
        {"code": 400, "msg": "'maxDuration' should be greater than 'minDuration'"}]


def test_search_by_time_window(world: World) -> None:
    _, q, ids = world
    window = search(q, service="cart.shop", start=T0 + 2 * MINUTE, end=T0 + 4 * MINUTE + 1)[1]
    # minute 2's spans start 0.5 ms into the window, minute 4's after its end
    assert trace_ids(window) == [ids["checkout-3"], ids["checkout-2"]]
    assert trace_ids(search(q, service="cart.shop", lookback="3m")[1]) == [
        ids[f"checkout-{m}"] for m in (9, 8, 7)]  # end defaults to the virtual now
    assert len(search(q, service="cart.shop", lookback="2d")[1]["data"]) == 10
    assert search(q, service="cart.shop", start="yesterday")[1]["errors"] == [
        {"code": 400, "msg": 'unable to parse param \'start\': strconv.ParseInt: parsing "yesterday": invalid syntax'}]


def test_trace_by_id_and_its_json_shape(world: World) -> None:
    _, q, ids = world
    tid = format_trace_id(ids["checkout-5"])
    status, body = q.handle("GET", f"/api/traces/{tid}")
    assert status == 200 and {k: body[k] for k in EMPTY} == EMPTY
    (trace,) = body["data"]
    assert set(trace) == {"traceID", "spans", "processes", "warnings"} and trace["traceID"] == tid
    spans = trace["spans"]
    assert [s["operationName"] for s in spans] == ["checkout", "place_order", "get_cart", "empty_cart"]
    for s in spans:
        assert set(s) == {"traceID", "spanID", "operationName", "references", "startTime", "duration", "tags",
                          "logs", "processID", "warnings"}
        assert s["traceID"] == tid and len(s["spanID"]) == 16
    root, place, _get, empty = spans
    assert root["references"] == []
    assert place["references"] == [{"refType": "CHILD_OF", "traceID": tid, "spanID": root["spanID"]}]
    assert empty["references"][0]["spanID"] == place["spanID"]
    assert (root["startTime"], root["duration"]) == (T0 + 5 * MINUTE + 500, 14000)
    tags = {t["key"]: (t["type"], t["value"]) for t in empty["tags"]}
    assert tags == {"span.kind": ("string", "server"), "http.method": ("string", "POST"),
                    "http.route": ("string", "/empty_cart"), "http.status_code": ("int64", 500),
                    "error": ("bool", True), "otel.status_code": ("string", "ERROR"),
                    "otel.status_description": ("string", "KeyError: 'items'")}
    (log,) = empty["logs"]
    assert log["timestamp"] == empty["startTime"] + empty["duration"]
    fields = {f["key"]: f["value"] for f in log["fields"]}
    assert fields["event"] == "exception" and fields["exception.type"] == "KeyError"
    assert fields["exception.message"] == "KeyError: 'items'" and "cart.py" in fields["exception.stacktrace"]
    assert _get["logs"] == [] and not any(t["key"] == "error" for t in _get["tags"])
    processes = trace["processes"]
    assert sorted(processes) == ["p1", "p2", "p3"]
    cart = processes[empty["processID"]]
    assert cart == {"serviceName": "cart.shop", "tags": [
        {"key": "k8s.namespace.name", "type": "string", "value": "shop"},
        {"key": "k8s.pod.name", "type": "string", "value": CART.pod_name},
        {"key": "host.name", "type": "string", "value": CART.pod_name},
        {"key": "k8s.node.name", "type": "string", "value": "node-a"}]}
    assert _get["processID"] == empty["processID"]


def test_trace_by_id_errors_and_id_forms(world: World) -> None:
    _, q, ids = world
    assert q.handle("GET", "/api/traces/abc123") == (404, {
        "data": None, "total": 0, "limit": 0, "offset": 0, "errors": [{"code": 404, "msg": "trace not found"}]})
    assert q.handle("GET", "/api/traces/xyz")[1]["errors"] == [
        {"code": 400, "msg": 'strconv.ParseUint: parsing "xyz": invalid syntax'}]
    assert q.handle("GET", "/api/traces/" + "a" * 33)[1]["errors"] == [
        {"code": 400, "msg": "TraceID cannot be longer than 32 hex characters: " + "a" * 33}]
    tid = format_trace_id(ids["home-3"])
    assert q.handle("GET", f"/api/traces/{tid.upper()}")[0] == 200  # hex digits of either case
    assert parse_trace_id("00" + tid[2:]) == int(tid[2:], 16)


def test_search_by_trace_ids(world: World) -> None:
    _, q, ids = world
    wanted = format_trace_id(ids["home-1"])
    status, body = search(q, traceID=[wanted, "abcdef"])
    assert status == 200 and trace_ids(body) == [ids["home-1"]]
    assert body["errors"] == [{"msg": "trace not found", "traceID": "abcdef"}]
    assert search(q, traceID="zz")[1]["errors"][0]["msg"].startswith("cannot parse traceID param: ")


def test_dependencies(world: World) -> None:
    _, q, _ = world
    assert q.handle("GET", "/api/dependencies") == (200, {"data": [
        {"parent": "checkout.shop", "child": "cart.shop", "callCount": 20},
        {"parent": "frontend.shop", "child": "checkout.shop", "callCount": 10}], **EMPTY})
    end_ms = (T0 + 3 * MINUTE) // 1000
    recent = q.handle("GET", "/api/dependencies", {"endTs": [str(end_ms)], "lookback": [str(2 * 60_000)]})[1]
    # a trace counts when one of its spans started within (endTs - lookback, endTs): minutes 1 and
    # 2 (their spans start 0.5 ms after the minute), not 3
    assert recent["data"] == [{"parent": "checkout.shop", "child": "cart.shop", "callCount": 4},
                              {"parent": "frontend.shop", "child": "checkout.shop", "callCount": 2}]
    only = q.handle("GET", "/api/dependencies", {"service": ["cart.shop"]})[1]["data"]
    assert only == [{"parent": "checkout.shop", "child": "cart.shop", "callCount": 20}]
    assert q.handle("GET", "/api/dependencies", {"lookback": ["1h"]})[1]["errors"] == [
        {"code": 400, "msg": 'unable to parse param \'lookback\': strconv.ParseInt: parsing "1h": invalid syntax'}]


def test_unknown_paths_and_methods(world: World) -> None:
    _, q, _ = world
    assert q.handle("GET", "/api/nope")[0] == 404
    assert q.handle("GET", "/elsewhere")[0] == 404
    assert q.handle("POST", "/api/services")[0] == 405
    assert q.handle("HEAD", "/api/services")[0] == 200


@pytest.mark.parametrize("text, ns", [
    ("0", 0), ("1ns", 1), ("1us", 1000), ("1\u00b5s", 1000), ("1.5ms", 1_500_000), ("2s", 2 * 10**9),
    ("1m30s", 90 * 10**9), ("1h", 3600 * 10**9), ("-2ms", -2_000_000), (".5s", 500_000_000), ("1.s", 10**9)])
def test_go_durations(text: str, ns: int) -> None:
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize("text", ["", "ms", "1", "1x", "1.2.3s", "--1s"])
def test_go_duration_errors(text: str) -> None:
    with pytest.raises(ValueError, match="^time: "):
        parse_go_duration(text)
