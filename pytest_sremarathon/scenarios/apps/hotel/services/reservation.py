"""Reservation: room availability per night and bookings. Booked-room counters live in MongoDB
(incremented atomically) and are cached in memcached."""

import json

from lib import hotel, pool, stay_nights


def _cache(ctx):
    return ctx.store(ctx.config("MEMCACHED_ADDR", "memcached-reserve"))


def _db(ctx):
    return ctx.store(ctx.config("MONGODB_ADDR", "mongodb-reservation"))


def _capacity(ctx, hotel_id):
    """Rooms of a hotel; rarely changes, so each pod keeps what it read."""
    cache = ctx.cache()
    key = f"capacity:{hotel_id}"
    if key not in cache:
        raw = _db(ctx).get(key)
        if raw is None:
            raw = str(hotel(hotel_id)["capacity"])
            _db(ctx).put(key, raw)
        cache[key] = int(raw)
    return cache[key]


def _booked(ctx, hotel_id, night):
    key = f"booked:{hotel_id}:{night}"
    cached = _cache(ctx).get(key)
    if cached is not None:
        return int(cached)
    count = int(_db(ctx).get(key) or 0)
    _cache(ctx).put(key, str(count))
    return count


def _has_rooms(ctx, hotel_id, nights, rooms):
    capacity = _capacity(ctx, hotel_id)
    return all(_booked(ctx, hotel_id, night) + rooms <= capacity for night in nights)


def check_availability(ctx, req):
    ctx.work(0.6)
    nights = stay_nights(req["in_date"], req["out_date"])
    rooms = int(req.get("rooms", 1))
    available = [hotel_id for hotel_id in req["hotel_ids"] if _has_rooms(ctx, hotel_id, nights, rooms)]
    return {"hotel_ids": available}


def make_reservation(ctx, req):
    ctx.work(1.2)
    hotel_id, rooms = req["hotel_id"], int(req.get("rooms", 1))
    nights = stay_nights(req["in_date"], req["out_date"])
    if not _has_rooms(ctx, hotel_id, nights, rooms):
        return {"reserved": False, "hotel_id": hotel_id}
    connections = pool(ctx, ctx.config("MONGODB_ADDR", "mongodb-reservation"), "MONGO_POOL_SIZE", "16")
    connections.acquire(len(nights))  # the nights are booked concurrently, one connection each
    try:
        for night in nights:
            key = f"booked:{hotel_id}:{night}"
            count = _db(ctx).incr(key, rooms)
            _cache(ctx).put(key, str(count))
    finally:
        connections.release(len(nights))

    booking = {"hotel_id": hotel_id, "in_date": req["in_date"], "out_date": req["out_date"], "rooms": rooms}
    _db(ctx).put(f"guest:{req['customer_name']}", json.dumps(booking))
    return {"reserved": True, "hotel_id": hotel_id, "nights": len(nights)}


def ready(ctx):
    _cache(ctx).get("readiness-probe")
    return True


ENDPOINTS = {"check_availability": check_availability, "make_reservation": make_reservation}
