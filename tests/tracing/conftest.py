"""The tracing tests' fixtures."""

from __future__ import annotations

import random

import pytest
from trace_world import HOTEL_FRONTEND, MINUTE, T0, checkout_request, home_request

from pytest_sremarathon.tracing import JaegerQuery, TraceRecorder


@pytest.fixture
def world() -> tuple[TraceRecorder, JaegerQuery, dict[str, int]]:
    """Ten minutes of traffic: checkouts every minute (the one at minute 5 fails at cart, the
    one at minute 7 is slow at cart), a home page hit every minute, one hotel request."""
    rec = TraceRecorder(random.Random(42))
    ids: dict[str, int] = {}
    for minute in range(10):
        tid = checkout_request(rec, T0 + minute * MINUTE, cart_fails=minute == 5, cart_ms=250.0 if minute == 7 else 2.0)
        ids[f"checkout-{minute}"] = tid
        ids[f"home-{minute}"] = home_request(rec, T0 + minute * MINUTE + 10 * 10**6)
    ids["hotel"] = home_request(rec, T0 + 9 * MINUTE + 20 * 10**6, HOTEL_FRONTEND)
    rec.flush()
    return rec, JaegerQuery(rec, lambda: T0 + 10 * MINUTE), ids
