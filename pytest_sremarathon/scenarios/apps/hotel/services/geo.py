"""Geo: the hotels nearest to a point, from the hotel coordinates kept in the catalog database."""

import json
import math

from lib import haversine_km, hotel, hotel_ids

POINTS_KEY = "geo:points"
RECENT_QUERIES = 256  # answers kept per pod, by query point rounded to ~100 m


def _points(ctx):
    """The (hotel id, lat, lon) index, loaded once per pod from MongoDB."""
    cache = ctx.cache()
    if "points" not in cache:
        db = ctx.store(ctx.config("MONGODB_ADDR", "mongodb-hotels"))
        raw = db.get(POINTS_KEY)
        if raw is None:  # a fresh database: import the bundled coordinates
            raw = json.dumps([[h["id"], h["address"]["lat"], h["address"]["lon"]]
                              for h in map(hotel, hotel_ids())])
            db.put(POINTS_KEY, raw)
        cache["points"] = json.loads(raw)
    return cache["points"]


def _bounding_box(lat, lon, radius_km):
    """A cheap prefilter: the lat/lon rectangle that contains the search circle."""
    dlat = math.degrees(radius_km / 6371.0)
    dlon = math.degrees(radius_km / (6371.0 * max(0.01, math.cos(math.radians(lat)))))
    return lat - dlat, lat + dlat, lon - dlon, lon + dlon


def _nearest(ctx, lat, lon):
    radius = float(ctx.config("MAX_SEARCH_RADIUS_KM", "10"))
    limit = int(ctx.config("NEARBY_LIMIT", "5"))
    lat_lo, lat_hi, lon_lo, lon_hi = _bounding_box(lat, lon, radius)
    candidates = [p for p in _points(ctx) if lat_lo <= p[1] <= lat_hi and lon_lo <= p[2] <= lon_hi]
    ctx.work(0.04 * len(candidates))
    scored = sorted((haversine_km(lat, lon, p[1], p[2]), p[0]) for p in candidates)
    return [(dist, hotel_id) for dist, hotel_id in scored if dist <= radius][:limit]


def _remember(cache, key, hits):
    queries = [k for k in cache if k.startswith("q:")]
    if len(queries) >= RECENT_QUERIES:
        del cache[queries[0]]  # dicts keep insertion order: the first one is the oldest
    cache[key] = hits


def nearby(ctx, req):
    ctx.work(0.8)
    lat, lon = float(req["lat"]), float(req["lon"])
    key = f"q:{lat:.3f},{lon:.3f}"
    cache = ctx.cache()
    hits = cache.get(key)
    if hits is None:
        hits = _nearest(ctx, lat, lon)
        _remember(cache, key, hits)

    return {"hotel_ids": [hotel_id for _dist, hotel_id in hits]}


def ready(ctx):
    return len(_points(ctx)) > 0


ENDPOINTS = {"nearby": nearby}
