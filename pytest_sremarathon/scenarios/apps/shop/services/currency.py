"""Currency conversion with fixed daily rates (EUR base, like the ECB reference rates)."""

RATES_PER_EUR = {"EUR": 1.0, "USD": 1.1305, "JPY": 126.40, "GBP": 0.85970, "CAD": 1.5128}


def convert(ctx, req):
    ctx.work(0.6)
    src, dst = req["from"], req["to"]
    if src not in RATES_PER_EUR or dst not in RATES_PER_EUR:
        raise ValueError(f"unsupported currency pair {src}->{dst}")
    eur = float(req["amount"]) / RATES_PER_EUR[src]
    return {"amount": round(eur * RATES_PER_EUR[dst], 2), "currency": dst}


def supported(ctx, req):
    ctx.work(0.2)
    return {"currencies": sorted(RATES_PER_EUR)}


def ready(ctx):
    return True


ENDPOINTS = {"convert": convert, "supported": supported}
