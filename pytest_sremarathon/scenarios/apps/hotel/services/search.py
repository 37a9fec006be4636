"""Search: nearby hotels that publish a rate for the stay, cheapest first."""


def _nearby(ctx, lat, lon):
    return ctx.call(ctx.config("GEO_ADDR", "geo"), "nearby", {"lat": lat, "lon": lon})["hotel_ids"]


def _rate_plans(ctx, hotel_ids, in_date, out_date):
    request = {"hotel_ids": hotel_ids, "in_date": in_date, "out_date": out_date}
    return ctx.call(ctx.config("RATE_ADDR", "rate"), "get_rates", request)["rate_plans"]


def nearby(ctx, req):
    ctx.work(0.7)
    found = _nearby(ctx, req["lat"], req["lon"])
    if not found:
        return {"hotel_ids": []}

    plans = _rate_plans(ctx, found, req["in_date"], req["out_date"])
    cheapest = {}
    for plan in plans:
        total = plan["room_type"]["total_rate"]
        if total < cheapest.get(plan["hotel_id"], float("inf")):
            cheapest[plan["hotel_id"]] = total
    return {"hotel_ids": sorted(cheapest, key=lambda hotel_id: (cheapest[hotel_id], hotel_id))}


def ready(ctx):
    return True


ENDPOINTS = {"nearby": nearby}
