"""Post storage: each author's recent posts, in mongo, with memcached in front.

Posts are stored per author in a capped bucket (newest first), the layout the timelines read
best: a page of a timeline touches a handful of authors. Posts that fell out of the bucket are
archived and no longer served."""

from lib import decode, encode, unique


def _cache(ctx):
    return ctx.store(ctx.config("POST_CACHE_ADDR", "post-storage-cache"))


def _db(ctx):
    return ctx.store(ctx.config("POST_DB_ADDR", "post-storage-db"))


def _author(post_id):
    return post_id.rsplit("-", 1)[0]


def _bucket(ctx, author):
    """An author's recent posts: memcached first, mongo on a miss (and fill the cache). The cache
    is an optimisation: if it is down, read through to mongo."""
    key = f"posts:{author}"
    try:
        cached = _cache(ctx).get(key)
    except Exception as exc:  # noqa: BLE001 - a cache outage must not fail reads
        ctx.log(f"WARN post cache unavailable, reading through: {exc}")
        return decode(_db(ctx).get(key), [])
    if cached is not None:
        return decode(cached, [])
    bucket = decode(_db(ctx).get(key), [])
    _cache(ctx).put(key, encode(bucket))
    return bucket


def store_post(ctx, req):
    ctx.work(1.2)
    post = dict(req["post"])
    author = post["creator"]["user_id"]
    db = _db(ctx)
    seq = db.incr(f"seq:{author}")
    post["post_id"] = f"{author}-{seq}"
    post["seq"] = seq
    key = f"posts:{author}"
    bucket = [post] + decode(db.get(key), [])
    bucket = bucket[: int(ctx.config("POSTS_PER_AUTHOR", "10"))]
    db.put(key, encode(bucket))
    _cache(ctx).put(key, encode(bucket))
    return {"post_id": post["post_id"]}


def read_posts(ctx, req):
    ctx.work(0.8)
    post_ids = list(req.get("post_ids", []))[: int(ctx.config("MAX_BATCH", "50"))]
    wanted = set(post_ids)
    found = {}
    for author in unique(_author(p) for p in post_ids):
        for post in _bucket(ctx, author):
            if post["post_id"] in wanted:
                found[post["post_id"]] = post
    ctx.work(0.05 * len(found))
    posts = [found[p] for p in post_ids if p in found]
    return {"posts": posts, "missing": [p for p in post_ids if p not in found]}


def ready(ctx):
    _db(ctx).get("readiness-probe")
    return True


ENDPOINTS = {"store_post": store_post, "read_posts": read_posts}
