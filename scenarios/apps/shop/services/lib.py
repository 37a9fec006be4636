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
