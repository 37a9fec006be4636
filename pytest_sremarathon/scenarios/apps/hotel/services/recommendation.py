"""Recommendation: the best hotels by distance, guest rating or price."""

import json

from lib import haversine_km, hotel, hotel_ids

INDEX_KEY = "recommendation:index"


def _load_index(ctx):
    db = ctx.store(ctx.config("MONGODB_ADDR", "mongodb-hotels"))
    raw = db.get(INDEX_KEY)
    if raw is None:  # a fresh database: import the bundled hotels
        raw = json.dumps([_entry(hotel(hotel_id)) for hotel_id in hotel_ids()])
        db.put(INDEX_KEY, raw)
    return json.loads(raw)


def _entry(record):
    return {"id": record["id"], "lat": record["address"]["lat"], "lon": record["address"]["lon"],
            "rate": record["rate"], "price": record["price"]}


def _load_live(ctx):
    """Every hotel document, read on each request: price and rating edits show up at once."""
    db = ctx.store(ctx.config("MONGODB_ADDR", "mongodb-hotels"))
    docs = []
    for hotel_id in hotel_ids():
        raw = db.get(f"hotel:{hotel_id}")
        docs.append(json.loads(raw) if raw else _entry(hotel(hotel_id)))
    return docs


def _index(ctx):
    if ctx.config("LIVE_INDEX", "false") == "true":
        return _load_live(ctx)
    cache = ctx.cache()
    if "index" not in cache:
        cache["index"] = _load_index(ctx)
    return cache["index"]


def _best(index, score):
    """Every hotel that ties for the best (lowest) score."""
    best = min(score(h) for h in index)
    return sorted(h["id"] for h in index if abs(score(h) - best) < 1e-9)


def get_recommendations(ctx, req):
    ctx.work(0.6)
    index = _index(ctx)
    ctx.work(0.02 * len(index))
    require = req.get("require", "dis")
    if require == "dis":
        lat, lon = float(req["lat"]), float(req["lon"])
        ids = _best(index, lambda h: round(haversine_km(lat, lon, h["lat"], h["lon"]), 3))
    elif require == "rate":
        ids = _best(index, lambda h: -h["rate"])
    elif require == "price":
        ids = _best(index, lambda h: h["price"])
    else:
        raise ValueError(f"unknown recommendation criterion {require!r} (dis, rate or price)")

    return {"hotel_ids": ids}


def ready(ctx):
    return len(_index(ctx)) > 0


ENDPOINTS = {"get_recommendations": get_recommendations}
