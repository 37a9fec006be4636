"""Home timelines: the posts of the people a user follows, newest first. Written on compose
(fan-out on write to every follower and every mentioned user), read by the front page."""

from lib import ConnectionPool, decode, encode, push_front, unique


def _cache(ctx):
    return ctx.store(ctx.config("TIMELINE_CACHE_ADDR", "timeline-cache"))


def _key(user_id):
    return f"home-timeline:{user_id}"


def _pool(ctx):
    """The pod's pipelined connections to the timeline cache."""
    pool = ctx.cache().get("timeline-cache-pool")
    if pool is None:
        pool = ConnectionPool("timeline-cache", int(ctx.config("TIMELINE_CACHE_POOL_SIZE", "32")))
        ctx.cache()["timeline-cache-pool"] = pool
    return pool


def write(ctx, req):
    """Fan a new post out to the home timelines of the author's followers and mentioned users."""
    ctx.work(1.0)
    graph = ctx.config("SOCIAL_GRAPH_ADDR", "social-graph")
    followers = ctx.call(graph, "get_followers", {"user_id": req["user_id"]})["followers"]
    targets = unique(followers + list(req.get("mentions", [])))
    targets = [t for t in targets if t != req["user_id"]][: int(ctx.config("FANOUT_LIMIT", "200"))]
    if not targets:
        return {"fanout": 0}
    _pool(ctx).checkout(ctx, min(len(targets), int(ctx.config("FANOUT_PARALLELISM", "24"))))
    cache = _cache(ctx)
    capacity = int(ctx.config("TIMELINE_CAPACITY", "50"))
    for user_id in targets:
        ids = decode(cache.get(_key(user_id)), [])
        cache.put(_key(user_id), encode(push_front(ids, req["post_id"], capacity)))
    return {"fanout": len(targets)}


def read(ctx, req):
    ctx.work(0.6)
    start, stop = int(req.get("start", 0)), int(req.get("stop", 10))
    ids = decode(_cache(ctx).get(_key(req["user_id"])), [])[start:stop]
    if not ids:
        return {"posts": []}
    resp = ctx.call(ctx.config("POST_STORAGE_ADDR", "post-storage"), "read_posts", {"post_ids": ids})
    return {"posts": resp["posts"]}


def ready(ctx):
    _cache(ctx).get("readiness-probe")
    return True


ENDPOINTS = {"write": write, "read": read}
