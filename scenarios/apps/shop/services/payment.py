"""Card payments, validated locally and charged through the payment provider."""

import hashlib


def _luhn_ok(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    checksum = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        checksum += d
    return len(digits) >= 12 and checksum % 10 == 0


def charge(ctx, req):
    ctx.work(float(ctx.config("PROVIDER_LATENCY_MS", "8")))
    if not _luhn_ok(req["card"]):
        raise ValueError("credit card number is invalid")
    amount = float(req["amount"])
    if amount <= 0:
        raise ValueError(f"invalid charge amount {amount}")
    digest = hashlib.sha256(f"{req['card'][-4:]}:{amount:.2f}".encode()).hexdigest()
    return {"transaction_id": f"tx-{digest[:10]}"}


def ready(ctx):
    return True


ENDPOINTS = {"charge": charge}
