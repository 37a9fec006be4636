"""Each user's own posts, newest first: post ids in redis, the posts from post-storage."""

import zlib

from lib import decode, encode, push_front


def _cache(ctx):
    return ctx.store(ctx.config("TIMELINE_CACHE_ADDR", "timeline-cache"))


def _key(user_id):
    return f"user-timeline:{user_id}"


def _in_rollout(ctx, flag, user):
    """Is ``user`` among the share of users a percentage flag is rolled out to? A stable bucket
    per user (0-99), as the flag service buckets them."""
    return zlib.crc32(f"{flag}:{user}".encode()) % 100 < float(ctx.config(flag, "0"))


def _with_pinned(ctx, user_id, ids):
    """Pinned posts (dark launch): a user's pinned post leads their timeline."""
    pinned = decode(_cache(ctx).get(f"pinned:{user_id}"), None)
    return [pinned["post_id"]] + [i for i in ids if i != pinned["post_id"]]


def write(ctx, req):
    ctx.work(0.6)
    cache = _cache(ctx)
    ids = decode(cache.get(_key(req["user_id"])), [])
    ids = push_front(ids, req["post_id"], int(ctx.config("TIMELINE_CAPACITY", "50")))
    cache.put(_key(req["user_id"]), encode(ids))
    return {"ok": True, "length": len(ids)}


def read(ctx, req):
    ctx.work(0.6)
    start, stop = int(req.get("start", 0)), int(req.get("stop", 10))
    ids = decode(_cache(ctx).get(_key(req["user_id"])), [])[start:stop]
    if _in_rollout(ctx, "PINNED_POSTS_PERCENT", req["user_id"]):
        ids = _with_pinned(ctx, req["user_id"], ids)
    if not ids:
        return {"posts": []}
    posts = ctx.call(ctx.config("POST_STORAGE_ADDR", "post-storage"), "read_posts", {"post_ids": ids})["posts"]
    return {"posts": posts}


def ready(ctx):
    _cache(ctx).get("readiness-probe")
    return True


ENDPOINTS = {"write": write, "read": read}
