"""Profile: hotel names, descriptions and addresses, read through memcached from the catalog
database."""

from lib import cache_aside, hotel

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
    hotels = []
    for hotel_id in req["hotel_ids"]:
        ctx.work(0.1)
        hotels.append(_profile(ctx, hotel_id))

    return {"hotels": hotels, "locale": locale}


def ready(ctx):
    ctx.store(ctx.config("MEMCACHED_ADDR", "memcached-profile")).get("readiness-probe")
    return True


ENDPOINTS = {"get_profiles": get_profiles}
