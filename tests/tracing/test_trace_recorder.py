"""The span recorder: the tree rebuilt from post-order spans, ids, bounds, determinism."""

from __future__ import annotations

import gc
import random

import pytest
from trace_world import (
    CART,
    CHECKOUT,
    FRONTEND,
    HOTEL_FRONTEND,
    T0,
    checkout_request,
    home_request,
)

from pytest_sremarathon.tracing import CLIENT, SERVER, TraceRecorder, resolve
from pytest_sremarathon.tracing.recorder import format_trace_id


def test_post_order_spans_become_a_tree_with_absolute_times() -> None:
    rec = TraceRecorder(random.Random(1))
    tid = checkout_request(rec, T0)
    trace = rec.get(tid)
    assert trace is not None
    spans = resolve(rec, trace)
    assert [(s.service, s.operation) for s in spans] == [
        ("frontend.shop", "checkout"), ("checkout.shop", "place_order"), ("cart.shop", "get_cart"),
        ("cart.shop", "empty_cart")]  # start order: a parent before its children, siblings as they ran
    root, place, get, empty = spans
    assert root.parent_span_id is None
    assert place.parent_span_id == root.span_id
    assert get.parent_span_id == empty.parent_span_id == place.span_id
    # starts are offsets from the parent's start, resolved to virtual µs
    assert root.start_us == T0 + 500
    assert place.start_us == T0 + 500 + 1000
    assert get.start_us == T0 + 1500 + 3000
    assert empty.start_us == T0 + 1500 + 7000
    assert [s.duration_us for s in spans] == [14000, 12000, 2000, 1000]
    assert len({s.span_id for s in spans}) == 4
    assert all(s.trace_id == tid and s.kind == SERVER and not s.error for s in spans)


def test_an_error_keeps_its_message_type_and_stacktrace() -> None:
    rec = TraceRecorder(random.Random(1))
    trace = rec.get(checkout_request(rec, T0, cart_fails=True))
    assert trace is not None
    by_op = {s.operation: s for s in resolve(rec, trace)}
    failed = by_op["empty_cart"]
    assert failed.error and failed.status_code == 500
    assert failed.message == "KeyError: 'items'" and failed.exception_type == "KeyError"
    assert "cart.py" in failed.stacktrace
    assert by_op["place_order"].error and by_op["place_order"].message.startswith("cart: HTTP 500")
    assert not by_op["get_cart"].error


def test_a_call_that_reached_no_pod_is_the_callers_client_span() -> None:
    rec = TraceRecorder(random.Random(1))
    t = rec.begin_trace(T0)
    assert t is not None
    t.client_error(3, CHECKOUT, "shop", "payment", "charge", 4.0, 1000.0, 504, "payment: HTTP 504: deadline exceeded")
    t.span(2, CHECKOUT, "place_order", 1.0, 1010.0, 500, "payment: HTTP 504: deadline exceeded")
    t.span(1, FRONTEND, "checkout", 0.5, 1012.0, 500, "checkout: HTTP 500")
    spans = resolve(rec, t)
    client = spans[-1]
    assert client.kind == CLIENT and client.service == "checkout.shop" and client.peer_service == "payment.shop"
    assert client.parent_span_id == spans[1].span_id and client.error and client.status_code == 504


def test_the_load_balancer_span_is_the_root_when_recorded() -> None:
    rec = TraceRecorder(random.Random(1))
    t = rec.begin_trace(T0)
    assert t is not None
    t.span(1, FRONTEND, "home", 0.2, 3.0)
    t.span(0, None, "home", 0.0, 3.5)
    root, entry = resolve(rec, t)
    assert root.service == "ingress" and root.parent_span_id is None
    assert entry.parent_span_id == root.span_id
    assert "ingress" in {p.service for p in rec.processes()}


def test_ids_are_deterministic_from_the_given_stream_and_touch_no_other() -> None:
    state = random.getstate()
    recs = [TraceRecorder(random.Random(seed)) for seed in (7, 7, 8)]
    ids = [[checkout_request(r, T0 + i) for i in range(5)] for r in recs]
    assert ids[0] == ids[1] and len(set(ids[0])) == 5
    assert not set(ids[0]) & set(ids[2])
    traces = [r.get(tids[2]) for r, tids in zip(recs, ids)]
    span_ids = [[s.span_id for s in resolve(r, t)] for r, t in zip(recs, traces) if t is not None]
    assert span_ids[0] == span_ids[1]
    assert random.getstate() == state  # the module-level stream is untouched, as is any other
    assert all(len(format_trace_id(t)) in (16, 32) for t in ids[0])


def test_storage_is_bounded_and_drops_the_oldest() -> None:
    rec = TraceRecorder(random.Random(1), max_traces=3)
    ids = [home_request(rec, T0 + i) for i in range(5)]
    rec.flush()
    assert len(rec) == 3
    assert [t.trace_id for t in rec.traces()] == ids[2:]
    assert rec.get(ids[0]) is None and rec.get(ids[1]) is None
    assert rec.get(ids[4]) is not None


def test_the_open_trace_is_visible_before_it_is_stored() -> None:
    rec = TraceRecorder(random.Random(1))
    tid = home_request(rec, T0)
    assert len(rec) == 0  # stored when the next request begins (or on flush)
    assert [t.trace_id for t in rec.traces()] == [tid] and rec.get(tid) is not None
    home_request(rec, T0 + 1)
    assert len(rec) == 1


def test_a_request_that_reached_no_pod_leaves_no_trace() -> None:
    rec = TraceRecorder(random.Random(1), max_traces=2)
    kept = home_request(rec, T0)
    for i in range(5):  # the entry Service has no endpoints: nothing recorded
        rec.begin_trace(T0 + i + 1)
    rec.flush()
    assert [t.trace_id for t in rec.traces()] == [kept]


def test_head_sampling_is_deterministic() -> None:
    def kept(seed: int) -> list[bool]:
        rec = TraceRecorder(random.Random(seed), sample=0.25)
        return [rec.begin_trace(T0 + i) is not None for i in range(400)]

    assert kept(3) == kept(3)
    assert 60 < sum(kept(3)) < 140
    with pytest.raises(ValueError):
        TraceRecorder(random.Random(1), sample=1.5)
    with pytest.raises(ValueError):
        TraceRecorder(random.Random(1), max_traces=0)


def test_processes_are_interned_per_pod_and_named_per_namespace() -> None:
    rec = TraceRecorder(random.Random(1))
    checkout_request(rec, T0)
    checkout_request(rec, T0 + 1)
    home_request(rec, T0 + 2, HOTEL_FRONTEND)
    rec.flush()
    procs = rec.processes()
    assert sorted(p.service for p in procs) == ["cart.shop", "checkout.shop", "frontend.hotel", "frontend.shop"]
    cart = next(p for p in procs if p.service == "cart.shop")
    assert (cart.namespace, cart.pod, cart.node) == ("shop", CART.pod_name, "node-a")
    named = TraceRecorder(random.Random(1), service_name=lambda ns, svc: f"{ns}-{svc}")
    home_request(named, T0)
    assert [p.service for p in named.processes()] == ["shop-frontend"]


def test_stored_spans_are_not_tracked_by_the_garbage_collector() -> None:
    """What keeps recording cheap: the collector never walks the store (see recorder.py)."""
    rec = TraceRecorder(random.Random(1))
    for i in range(50):
        checkout_request(rec, T0 + i, cart_fails=i % 7 == 0)
    rec.flush()
    gc.collect()
    items = [item for t in rec.traces() for item in t.raw]
    assert items and not any(gc.is_tracked(item) for item in items)
