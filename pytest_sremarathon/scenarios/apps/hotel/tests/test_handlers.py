"""Unit tests for the hotel services' handlers; the pipeline's build step runs them on every change."""

import json


class FakeCtx:
    """A stand-in for the runtime context: canned downstream answers, in-memory datastores."""

    def __init__(self, answers=None, config=None):
        self.answers = answers or {}
        self.config_data = {"RATE_CURRENCY": "USD", **(config or {})}
        self.data = {}
        self.logs = []
        self.cache_data = {}

    def call(self, service, endpoint, payload=None):
        answer = self.answers[(service, endpoint)]
        return answer(payload or {}) if callable(answer) else answer

    def store(self, name):
        data = self.data.setdefault(name, {})

        class _Store:
            def get(self, key):
                return data.get(key)

            def put(self, key, value):
                data[key] = value

            def incr(self, key, by=1):
                data[key] = int(data.get(key) or 0) + int(by)
                return data[key]

        return _Store()

    def config(self, key, default=None):
        value = self.config_data.get(key, default)
        if value is None:
            raise KeyError(f"missing configuration key {key!r}")
        return value

    def work(self, ms):
        pass

    def log(self, message):
        self.logs.append(message)

    def cache(self):
        return self.cache_data


def test_haversine_matches_a_known_distance(services):
    # Ferry Building to Oracle Park: about 1.9 km as the crow flies.
    km = services["geo"].haversine_km(37.7955, -122.3937, 37.7786, -122.3893)
    assert 1.8 < km < 2.0


def test_stay_nights_counts_check_in_not_check_out(services):
    nights = services["reservation"].stay_nights("2026-04-09", "2026-04-12")
    assert nights == ["2026-04-09", "2026-04-10", "2026-04-11"]
    try:
        services["reservation"].stay_nights("2026-04-12", "2026-04-12")
    except ValueError:
        return
    raise AssertionError("an empty stay was accepted")


def test_geo_puts_the_closest_hotel_first(services):
    ctx = FakeCtx()
    nearest = services["geo"]._nearest(ctx, 37.7867, -122.4112)  # the Clift's own doorstep
    assert nearest[0][1] == "1" and len(nearest) == 5
    assert [d for d, _ in nearest] == sorted(d for d, _ in nearest)
    assert "geo:points" in ctx.data["mongodb-hotels"]  # a fresh database gets seeded


def test_search_ranks_hotels_by_cheapest_plan(services):
    def plan(hotel_id, total):
        return {"hotel_id": hotel_id, "room_type": {"total_rate": total}}

    ctx = FakeCtx({
        ("geo", "nearby"): {"hotel_ids": ["1", "2", "3"]},
        ("rate", "get_rates"): {"rate_plans": [plan("2", 150.0), plan("1", 210.0), plan("3", 99.0), plan("1", 120.0)]},
    })
    found = services["search"].nearby(ctx, {"lat": 37.78, "lon": -122.40, "in_date": "2026-04-09",
                                            "out_date": "2026-04-10"})
    assert found["hotel_ids"] == ["3", "1", "2"]


def test_rate_quotes_the_whole_stay_with_tax(services):
    rate = services["rate"]
    template = rate._published_plans("1")[0]
    quote = rate._quote(template, "1", "2026-04-09", "2026-04-11", ["2026-04-09", "2026-04-10"], "USD")
    assert quote["room_type"]["total_rate"] == round(2 * template["nightly"], 2)
    assert quote["room_type"]["total_rate_inclusive"] > quote["room_type"]["total_rate"]
    assert rate._published_plans("7") == []  # hotel 7 publishes no rates


def test_profile_is_served_through_memcached(services):
    ctx = FakeCtx()
    answer = services["profile"].get_profiles(ctx, {"hotel_ids": ["1"]})
    assert answer["hotels"][0]["name"] == "Clift Hotel"
    assert json.loads(ctx.data["memcached-profile"]["profile:1"])["phone_number"] == "(415) 775-4700"


def test_profile_lookups_need_a_connection_each(services):
    ctx = FakeCtx(config={"MEMCACHED_POOL_SIZE": "2"})
    try:
        services["profile"].get_profiles(ctx, {"hotel_ids": ["1", "2", "3"]})
    except TimeoutError:
        pass
    else:
        raise AssertionError("three concurrent lookups went through a pool of two")
    assert len(services["profile"].get_profiles(ctx, {"hotel_ids": ["1", "2"]})["hotels"]) == 2


def test_reservation_stops_at_capacity(services):
    reservation = services["reservation"]
    ctx = FakeCtx()
    booking = {"customer_name": "user_1", "hotel_id": "9", "in_date": "2026-04-10", "out_date": "2026-04-12",
               "rooms": 2}
    results = [reservation.make_reservation(ctx, booking)["reserved"] for _ in range(5)]
    assert results == [True, True, True, True, False]  # hotel 9 has 8 rooms
    query = {"hotel_ids": ["9", "10"], "in_date": "2026-04-11", "out_date": "2026-04-13", "rooms": 1}
    assert reservation.check_availability(ctx, query)["hotel_ids"] == ["10"]


def test_recommendation_by_price_picks_the_cheapest(services):
    recommendation = services["recommendation"]
    answer = recommendation.get_recommendations(FakeCtx(), {"require": "price"})
    prices = {h: recommendation.hotel(h)["price"] for h in recommendation.hotel_ids()}
    assert answer["hotel_ids"] and all(prices[h] == min(prices.values()) for h in answer["hotel_ids"])


def test_demo_accounts_are_seeded_with_salted_hashes(services):
    user = services["user"]
    account = user._demo_account("user_42")
    assert account["password_hash"] == user.password_hash(account["salt"], user.DEMO_PASSWORD)
    assert user._demo_account("user_42")["salt"] != user._demo_account("user_43")["salt"]
    assert user._demo_account("mallory") is None


def test_frontend_search_returns_geojson(services):
    ctx = FakeCtx({
        ("search", "nearby"): {"hotel_ids": ["3", "1"]},
        ("reservation", "check_availability"): lambda p: {"hotel_ids": p["hotel_ids"][:1]},
        ("profile", "get_profiles"): lambda p: {"hotels": [
            {"id": h, "name": f"Hotel {h}", "phone_number": "-", "address": {"lat": 37.0, "lon": -122.0}}
            for h in p["hotel_ids"]]},
    })
    page = services["frontend"].search_hotels(ctx, {"in_date": "2026-04-09", "nights": 2, "lat": "37.78",
                                                    "lon": "-122.40"})
    assert [f["id"] for f in page["features"]] == ["3"]
    assert page["features"][0]["geometry"]["coordinates"] == [-122.0, 37.0]


def test_frontend_rejects_a_wrong_password(services):
    ctx = FakeCtx({("user", "check_user"): {"correct": False}})
    answer = services["frontend"].reserve(ctx, {"username": "user_1", "password": "nope", "hotel_id": "1",
                                                "in_date": "2026-04-09"})
    assert answer["message"].startswith("Please check")
