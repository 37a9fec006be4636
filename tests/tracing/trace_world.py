"""A small world of pods and recorded requests for the tracing tests. A module of its own, not
conftest.py: test modules import it by name, and ``conftest`` is every test directory's name."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_sremarathon.tracing import TraceRecorder

T0 = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in µs: the virtual clock of these tests
MINUTE = 60 * 10**6


@dataclass
class Pod:
    """Stands in for the kubelet's Container: the attributes the recorder reads."""

    pod_uid: str
    pod_name: str
    namespace: str
    service: str
    node: str


FRONTEND = Pod("uid-fe", "frontend-6d9f-abcde", "shop", "frontend", "node-a")
CHECKOUT = Pod("uid-co", "checkout-5c8b-fghij", "shop", "checkout", "node-b")
CART = Pod("uid-ca", "cart-7f6d-klmno", "shop", "cart", "node-a")
HOTEL_FRONTEND = Pod("uid-hfe", "frontend-59b7-pqrst", "hotel", "frontend", "node-c")


def checkout_request(rec: TraceRecorder, start_us: int, *, cart_fails: bool = False, cart_ms: float = 2.0) -> int:
    """frontend/checkout -> checkout/place_order -> cart/get_cart, cart/empty_cart, recorded in
    the order the traffic engine ends the spans (callees first). Returns the trace id."""
    t = rec.begin_trace(start_us)
    assert t is not None
    t.span(3, CART, "get_cart", 3.0, cart_ms)
    if cart_fails:
        t.span(3, CART, "empty_cart", 5.0 + cart_ms, 1.0, 500, "KeyError: 'items'", "KeyError",
               'Traceback (most recent call last):\n  File "/app/services/cart.py", line 9, in empty_cart\n'
               "KeyError: 'items'")
        t.span(2, CHECKOUT, "place_order", 1.0, 10.0 + cart_ms, 500, "cart: HTTP 500: Internal Server Error")
        t.span(1, FRONTEND, "checkout", 0.5, 12.0 + cart_ms, 500, "checkout: HTTP 500: Internal Server Error")
    else:
        t.span(3, CART, "empty_cart", 5.0 + cart_ms, 1.0)
        t.span(2, CHECKOUT, "place_order", 1.0, 10.0 + cart_ms)
        t.span(1, FRONTEND, "checkout", 0.5, 12.0 + cart_ms)
    return t.trace_id


def home_request(rec: TraceRecorder, start_us: int, pod: Pod = FRONTEND) -> int:
    t = rec.begin_trace(start_us)
    assert t is not None
    t.span(1, pod, "home", 0.3, 4.0)
    return t.trace_id
