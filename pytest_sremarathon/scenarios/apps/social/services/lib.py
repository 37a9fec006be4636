"""Helpers shared by the social network's services: JSON values in the datastores, capped
lists, retries for idempotent calls and the datastore connection pool."""

import json


def decode(raw, default):
    """A JSON value read from a datastore, or ``default`` when the key is absent."""
    if raw is None or raw == "":
        return default
    return json.loads(raw)


def encode(value):
    return json.dumps(value, separators=(",", ":"))


def push_front(items, item, capacity):
    """``item`` first, then ``items`` without it, at most ``capacity`` long (newest first)."""
    return ([item] + [x for x in items if x != item])[:capacity]


def unique(values):
    """The values in first-seen order, without repeats."""
    seen = set()
    out = []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def page(req, default_stop=10, max_page=50):
    """The ``start``/``stop`` window a timeline read asks for, clamped to a sane page."""
    start = max(0, int(req.get("start", 0)))
    stop = int(req.get("stop", start + default_stop))
    return start, max(start, min(stop, start + max_page))


def call_with_retry(ctx, service, endpoint, payload, attempts=2):
    """Call an idempotent endpoint, retrying once on a server-side failure (5xx, timeout).
    Client errors (4xx) are not retried: the same request would fail the same way."""
    for attempt in range(1, attempts + 1):
        try:
            return ctx.call(service, endpoint, payload)
        except Exception as exc:  # noqa: BLE001 - the HTTP client raises one error type per status
            status = getattr(exc, "status", 500)
            if attempt == attempts or status < 500:
                raise
            ctx.log(f"WARN {service}.{endpoint} failed (attempt {attempt}/{attempts}), retrying: {exc}")
    raise AssertionError("unreachable")


class PoolTimeout(Exception):
    """No connection became free within the pool's wait time."""


class ConnectionPool:
    """A client-side pool of datastore connections, shared by the requests of one pod.

    ``checkout(ctx, n)`` takes ``n`` connections at once for a pipelined batch. Connections are
    opened lazily (a TCP + AUTH handshake each) and kept open up to ``size``. A batch that needs
    more connections than the pool may ever hold waits ``wait_ms`` and gives up, as redis-py's
    BlockingConnectionPool does."""

    def __init__(self, name, size, wait_ms=50.0, connect_ms=1.5):
        self.name = name
        self.size = size
        self.wait_ms = wait_ms
        self.connect_ms = connect_ms
        self.open = 0

    def checkout(self, ctx, n):
        if n > self.size:
            ctx.work(self.wait_ms)
            raise PoolTimeout(f"{self.name}: pool limit ({self.size}) reached, connection timed out "
                              f"after {self.wait_ms:.0f}ms waiting for {n} connections")
        if n > self.open:
            ctx.work((n - self.open) * self.connect_ms)
            self.open = n
        return n
