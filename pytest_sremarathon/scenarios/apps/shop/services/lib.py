"""Helpers shared by the shop's services."""


def money(units: float, currency: str) -> dict:
    return {"currency": currency, "units": round(units, 2)}


def optional_call(ctx, service, endpoint, payload, default):
    """Call a non-critical dependency; degrade to ``default`` instead of failing the page."""
    try:
        return ctx.call(service, endpoint, payload)
    except Exception as exc:  # noqa: BLE001 - any failure of an optional widget is tolerated
        ctx.log(f"WARN optional dependency {service}.{endpoint} failed: {exc}")
        return default


class ConnectionPool:
    """Keep-alive connections to one upstream, shared by the requests a process serves.
    ``acquire(n)`` takes ``n`` connections at once (one per concurrent call)."""

    def __init__(self, upstream: str, size: int):
        self.upstream = upstream
        self.size = size
        self.in_use = 0

    def acquire(self, n: int) -> None:
        if self.in_use + n > self.size:
            raise TimeoutError(f"{self.upstream} pool limit of size {self.size} reached, "
                               f"connection timed out, timeout 30.00")
        self.in_use += n

    def release(self, n: int) -> None:
        self.in_use -= n
