"""Profile: hotel names, descriptions and addresses, read through memcached from the catalog
database."""

from lib import cache_aside, hotel, pool

PROFILE_FIELDS = ("id", "name", "phone_number", "description", "address")


def _profile(ctx, hotel_id):
    def load():
        record = hotel(hotel_id)
        return {field: record[field] for field in PROFILE_FIELDS}

    return cache_aside(ctx, ctx.config("MEMCACHED_ADDR", "memcached-profile"),
                       ctx.config("MONGODB_ADDR", "mongodb-hotels"), f"profile:{hotel_id}", load)


def get_profiles(ctx, req):
    ctx.work(0.5)
    locale = req.get("locale", "en-US")
    hotel_ids = req["hotel_ids"]
    # One memcached connection per hotel: the lookups of a page go out concurrently.
    connections = pool(ctx, ctx.config("MEMCACHED_ADDR", "memcached-profile"), "MEMCACHED_POOL_SIZE", "8")
    connections.acquire(len(hotel_ids))
    try:
        hotels = [_profile(ctx, hotel_id) for hotel_id in hotel_ids]
    finally:
        connections.release(len(hotel_ids))
    ctx.work(0.1 * len(hotels))

    return {"hotels": hotels, "locale": locale}


def ready(ctx):
    ctx.store(ctx.config("MEMCACHED_ADDR", "memcached-profile")).get("readiness-probe")
    return True


ENDPOINTS = {"get_profiles": get_profiles}
