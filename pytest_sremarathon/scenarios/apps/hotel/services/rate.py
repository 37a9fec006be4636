"""Rate: the rate plans of hotels for a stay, read through memcached from the catalog database."""

from dateparse import parse_date
from lib import cache_aside, hotel, stay_nights

TAX_RATE = 0.14  # San Francisco transient occupancy tax
ROOM_TYPES = (("KNG", "King sized bed", 1.0), ("QN2", "Two queen sized beds", 1.15))


def _published_plans(hotel_id):
    """Rate plan templates of a hotel; some hotels publish no rates (prices on request)."""
    h = hotel(hotel_id)
    if int(hotel_id) % 7 == 0:
        return []
    return [{"code": "RACK", "room_code": code, "description": description, "nightly": round(h["price"] * factor, 2)}
            for code, description, factor in ROOM_TYPES]


def _plans(ctx, hotel_id):
    return cache_aside(ctx, ctx.config("MEMCACHED_ADDR", "memcached-rate"),
                       ctx.config("MONGODB_ADDR", "mongodb-hotels"),
                       f"rates:{hotel_id}", lambda: _published_plans(hotel_id))


def _quote(template, hotel_id, in_date, out_date, nights, currency):
    total = round(template["nightly"] * len(nights), 2)
    return {
        "hotel_id": hotel_id, "code": template["code"], "in_date": in_date, "out_date": out_date,
        "room_type": {"code": template["room_code"], "description": template["description"],
                      "bookable_rate": template["nightly"], "total_rate": total,
                      "total_rate_inclusive": round(total * (1 + TAX_RATE), 2), "currency": currency},
    }


def get_rates(ctx, req):
    ctx.work(0.6)
    # Channel-manager partners send dates in their own formats; quote on ISO dates.
    in_date, out_date = parse_date(req["in_date"]).isoformat(), parse_date(req["out_date"]).isoformat()
    nights = stay_nights(in_date, out_date)
    currency = ctx.config("RATE_CURRENCY")
    plans = []
    for hotel_id in req["hotel_ids"]:
        for template in _plans(ctx, hotel_id):
            plans.append(_quote(template, hotel_id, in_date, out_date, nights, currency))

    plans.sort(key=lambda p: p["room_type"]["total_rate"])
    return {"rate_plans": plans}


def ready(ctx):
    ctx.store(ctx.config("MEMCACHED_ADDR", "memcached-rate")).get("readiness-probe")
    return True


ENDPOINTS = {"get_rates": get_rates}
