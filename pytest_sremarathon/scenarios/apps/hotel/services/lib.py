"""Helpers shared by the hotel services: stay dates, great-circle distances, the bundled hotel
fixtures and the cache-aside read path of the catalog services."""

import json
import math
from datetime import date, timedelta

EARTH_RADIUS_KM = 6371.0088  # IUGG mean radius

# The six hand-written hotels of the original data set; the rest are generated around them.
LANDMARK_HOTELS = (
    ("1", "Clift Hotel", "(415) 775-4700", 37.7867, -122.4112, "495", "Geary St", "94102",
     "A 6-minute walk from Union Square and 4 minutes from a Muni Metro station, this luxury hotel "
     "designed by Philippe Starck features an artsy furniture collection in the lobby."),
    ("2", "W San Francisco", "(415) 777-5300", 37.7854, -122.4005, "181", "3rd St", "94103",
     "Less than a block from the Yerba Buena Center for the Arts, this trendy hotel is a "
     "12-minute walk from Union Square."),
    ("3", "Hotel Zetta", "(415) 543-8555", 37.7834, -122.4071, "55", "5th St", "94103",
     "A 3-minute walk from the Powell Street cable-car turnaround and BART rail station, this hip "
     "hotel combines high-tech lodging with artsy touches."),
    ("4", "Hotel Vitale", "(415) 278-3700", 37.7936, -122.3930, "8", "Mission St", "94105",
     "This waterfront hotel with Bay Bridge views is 3 blocks from the Financial District and a "
     "4-minute walk from the Ferry Building."),
    ("5", "Phoenix Hotel", "(415) 776-1380", 37.7831, -122.4181, "601", "Eddy St", "94109",
     "A retro motor lodge in the Tenderloin that has hosted many rock musicians since the 1950s."),
    ("6", "St. Regis San Francisco", "(415) 284-4000", 37.7863, -122.4015, "125", "3rd St", "94103",
     "A 42-story tower in the South of Market district, adjacent to Yerba Buena Gardens and SFMOMA."),
)
HOTEL_COUNT = 36
_STREETS = ("Mission St", "Market St", "Geary St", "Powell St", "Folsom St", "Howard St", "Post St")
_KINDS = ("Inn", "Hotel", "Suites", "Lodge", "House")


def hotel_ids():
    return [str(i) for i in range(1, HOTEL_COUNT + 1)]


def hotel(hotel_id):
    """The bundled fixture record of one hotel (what a fresh database is seeded with)."""
    i = int(hotel_id)
    if not 1 <= i <= HOTEL_COUNT:
        raise LookupError(f"no hotel with id {hotel_id!r}")
    if i <= len(LANDMARK_HOTELS):
        _id, name, phone, lat, lon, number, street, postal, description = LANDMARK_HOTELS[i - 1]
    else:
        street = _STREETS[i % len(_STREETS)]
        name = f"{street.split()[0]} {_KINDS[i % len(_KINDS)]} {i}"
        phone = f"(415) 555-{1000 + 37 * i:04d}"
        lat = round(37.7700 + (i * 37 % 35) / 1000, 4)
        lon = round(-122.3900 - (i * 53 % 35) / 1000, 4)
        number, postal = str(100 + 7 * i), "94103"
        description = f"A comfortable {_KINDS[i % len(_KINDS)].lower()} on {street}, close to the Moscone Center."
    return {
        "id": str(i), "name": name, "phone_number": phone, "description": description,
        "address": {"street_number": number, "street_name": street, "city": "San Francisco",
                    "state": "CA", "country": "United States", "postal_code": postal, "lat": lat, "lon": lon},
        "rate": round(3.0 + (i * 13 % 21) / 10, 1),     # guest rating, 3.0-5.0
        "price": 109 + (i * 41 % 28) * 10,               # base nightly price in USD
        "capacity": 8 if i % 9 == 0 else 200,            # rooms; boutique hotels are small
    }


def haversine_km(lat1, lon1, lat2, lon2):
    """Great-circle distance between two points given in degrees."""
    phi1, phi2 = math.radians(lat1), math.radians(lat2)
    dphi = phi2 - phi1
    dlambda = math.radians(lon2 - lon1)
    a = math.sin(dphi / 2) ** 2 + math.cos(phi1) * math.cos(phi2) * math.sin(dlambda / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(math.sqrt(a))


def checkout_date(in_date, nights):
    return (date.fromisoformat(in_date) + timedelta(days=int(nights))).isoformat()


MAX_NIGHTS = 14


def stay_nights(in_date, out_date):
    """The nights of a stay as ISO dates: the check-in night counts, the check-out night does not."""
    start, end = date.fromisoformat(in_date), date.fromisoformat(out_date)
    if end <= start:
        raise ValueError(f"check-out {out_date} is not after check-in {in_date}")
    if (end - start).days > MAX_NIGHTS:
        raise ValueError(f"stays are limited to {MAX_NIGHTS} nights")
    return [(start + timedelta(days=n)).isoformat() for n in range((end - start).days)]


def cache_aside(ctx, cache, database, key, load):
    """Read ``key`` through memcached, then MongoDB. A record neither has yet is taken from
    ``load()`` (the bundled fixtures, like DeathStarBench's initializeDatabase) and written
    back to both, so a wiped datastore heals itself."""
    raw = ctx.store(cache).get(key)
    if raw is None:
        raw = ctx.store(database).get(key)
        if raw is None:
            raw = json.dumps(load())
            ctx.store(database).put(key, raw)
        ctx.store(cache).put(key, raw)
    return json.loads(raw)


POOL_TIMEOUT_S = 1.0  # how long a client waits for a free pooled connection


class ConnectionPool:
    """Keep-alive connections to one datastore, shared by the requests a pod serves.
    ``acquire(n)`` takes ``n`` connections at once, one per concurrent query."""

    def __init__(self, upstream, size):
        self.upstream = upstream
        self.size = size
        self.in_use = 0

    def acquire(self, n):
        if self.in_use + n > self.size:
            raise TimeoutError(f"{self.upstream}: connection pool exhausted ({n} wanted, size {self.size}), "
                               f"gave up after {POOL_TIMEOUT_S:.1f}s")
        self.in_use += n

    def release(self, n):
        self.in_use -= n


def pool(ctx, upstream, size_key, default_size):
    """This pod's connection pool to ``upstream``, sized by the ``size_key`` setting."""
    pools = ctx.cache().setdefault("pools", {})
    if upstream not in pools:
        pools[upstream] = ConnectionPool(upstream, int(ctx.config(size_key, default_size)))
    return pools[upstream]
