"""The follow graph. Accounts migrated from the legacy platform keep their old follow edges,
which are derived from the legacy id ring until the backfill job has written them to mongo;
follows made here are stored in the graph's mongo."""

from lib import decode, encode, unique

# Offsets on the legacy id ring: legacy user k followed users k+1, k+2, k+5, ... (mod the ring).
LEGACY_OFFSETS = (1, 2, 5, 11, 23, 37, 51, 67, 89, 101, 127, 149, 173, 199, 229, 263)


def _db(ctx):
    return ctx.store(ctx.config("GRAPH_DB_ADDR", "social-graph-db"))


def _legacy_number(ctx, user_id):
    ring = int(ctx.config("LEGACY_GRAPH_USERS", "300"))
    if user_id[:1] == "u" and user_id[1:].isdigit() and 1 <= int(user_id[1:]) <= ring:
        return int(user_id[1:]), ring
    return None, ring


def _legacy_followees(ctx, user_id):
    k, ring = _legacy_number(ctx, user_id)
    if k is None:
        return []
    return [f"u{(k - 1 + off) % ring + 1}" for off in LEGACY_OFFSETS]


def _legacy_followers(ctx, user_id):
    k, ring = _legacy_number(ctx, user_id)
    if k is None:
        return []
    return [f"u{(k - 1 - off) % ring + 1}" for off in LEGACY_OFFSETS]


def get_followers(ctx, req):
    ctx.work(0.6)
    user_id = req["user_id"]
    stored = decode(_db(ctx).get(f"followers:{user_id}"), [])
    followers = unique(stored + _legacy_followers(ctx, user_id))
    return {"user_id": user_id, "followers": followers}


def get_followees(ctx, req):
    ctx.work(0.6)
    user_id = req["user_id"]
    stored = decode(_db(ctx).get(f"followees:{user_id}"), [])
    return {"user_id": user_id, "followees": unique(stored + _legacy_followees(ctx, user_id))}


def follow(ctx, req):
    ctx.work(0.8)
    user_id, followee = req["user_id"], req["followee_id"]
    db = _db(ctx)
    followees = decode(db.get(f"followees:{user_id}"), [])
    if followee in followees or followee in _legacy_followees(ctx, user_id):
        return {"ok": True, "changed": False}
    db.put(f"followees:{user_id}", encode(followees + [followee]))
    followers = decode(db.get(f"followers:{followee}"), [])
    db.put(f"followers:{followee}", encode(unique(followers + [user_id])))
    return {"ok": True, "changed": True}


def unfollow(ctx, req):
    ctx.work(0.8)
    user_id, followee = req["user_id"], req["followee_id"]
    db = _db(ctx)
    followees = decode(db.get(f"followees:{user_id}"), [])
    if followee not in followees:
        return {"ok": True, "changed": False}
    db.put(f"followees:{user_id}", encode([f for f in followees if f != followee]))
    followers = decode(db.get(f"followers:{followee}"), [])
    db.put(f"followers:{followee}", encode([f for f in followers if f != user_id]))
    return {"ok": True, "changed": True}


def ready(ctx):
    _db(ctx).get("readiness-probe")
    return True


ENDPOINTS = {"get_followers": get_followers, "get_followees": get_followees, "follow": follow, "unfollow": unfollow}
