"""Frontend: the booking site's API — search, recommendations, login and reservations."""

from lib import checkout_date


def _features(profiles):
    """Hotels as GeoJSON features, the way the map on the search page draws them."""
    return [{"type": "Feature", "id": p["id"],
             "properties": {"name": p["name"], "phone_number": p["phone_number"]},
             "geometry": {"type": "Point", "coordinates": [p["address"]["lon"], p["address"]["lat"]]}}
            for p in profiles]


def _profiles(ctx, hotel_ids, locale):
    if not hotel_ids:
        return []
    answer = ctx.call(ctx.config("PROFILE_ADDR", "profile"), "get_profiles",
                      {"hotel_ids": hotel_ids, "locale": locale})
    return answer["hotels"]


def search_hotels(ctx, req):
    ctx.work(1.5)
    in_date = req["in_date"]
    out_date = checkout_date(in_date, req.get("nights", 1))
    found = ctx.call(ctx.config("SEARCH_ADDR", "search"), "nearby",
                     {"lat": float(req["lat"]), "lon": float(req["lon"]), "in_date": in_date, "out_date": out_date})
    available = ctx.call(ctx.config("RESERVATION_ADDR", "reservation"), "check_availability",
                         {"hotel_ids": found["hotel_ids"], "in_date": in_date, "out_date": out_date,
                          "rooms": int(req.get("rooms", 1))})
    profiles = _profiles(ctx, available["hotel_ids"], req.get("locale", "en-US"))
    return {"type": "FeatureCollection", "features": _features(profiles)}


def recommend(ctx, req):
    ctx.work(1.2)
    require = req.get("require", "dis")
    if require not in ("dis", "rate", "price"):
        return {"error": "Please specify require params", "features": []}
    picks = ctx.call(ctx.config("RECOMMENDATION_ADDR", "recommendation"), "get_recommendations",
                     {"require": require, "lat": float(req["lat"]), "lon": float(req["lon"])})
    profiles = _profiles(ctx, picks["hotel_ids"], req.get("locale", "en-US"))
    return {"type": "FeatureCollection", "features": _features(profiles)}


def _login_ok(ctx, username, password):
    answer = ctx.call(ctx.config("USER_ADDR", "user"), "check_user", {"username": username, "password": password})
    return bool(answer["correct"])


def user_login(ctx, req):
    ctx.work(0.8)
    if not _login_ok(ctx, req["username"], req["password"]):
        return {"message": "Failed. Please check your username and password."}
    return {"message": "Login successfully!"}


def reserve(ctx, req):
    ctx.work(1.0)
    if not _login_ok(ctx, req["username"], req["password"]):
        return {"message": "Please check your username and password."}
    in_date = req["in_date"]
    booking = {"customer_name": req["username"], "hotel_id": str(req["hotel_id"]), "in_date": in_date,
               "out_date": checkout_date(in_date, req.get("nights", 1)), "rooms": int(req.get("rooms", 1))}
    result = ctx.call(ctx.config("RESERVATION_ADDR", "reservation"), "make_reservation", booking)
    if not result["reserved"]:
        return {"message": "Failed. Already reserved."}
    return {"message": "Reserve successfully!"}


def ready(ctx):
    return True


ENDPOINTS = {"search_hotels": search_hotels, "recommend": recommend, "user_login": user_login,
             "reserve": reserve}
