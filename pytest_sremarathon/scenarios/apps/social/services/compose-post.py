"""Composes a post: resolves the creator, processes the text (mentions, short links) and the
media, stores the post, then writes it to the author's timeline and the followers' home
timelines."""


def _creator(ctx, username):
    user = ctx.call(ctx.config("USER_ADDR", "user"), "get_user", {"username": username})
    return {"user_id": user["user_id"], "username": user["username"]}


def compose(ctx, req):
    ctx.work(2)
    creator = _creator(ctx, req["username"])
    text = ctx.call(ctx.config("TEXT_ADDR", "text"), "process", {"text": req["text"]})
    media = []
    if req.get("media_types"):
        media = ctx.call(ctx.config("MEDIA_ADDR", "media"), "upload",
                         {"media_types": req["media_types"], "user_id": creator["user_id"]})["media"]
    post = {
        "creator": creator,
        "text": text["text"],
        "user_mentions": text["user_mentions"],
        "urls": text["urls"],
        "media": media,
        "post_type": req.get("post_type", "POST"),
    }
    stored = ctx.call(ctx.config("POST_STORAGE_ADDR", "post-storage"), "store_post", {"post": post})
    post_id = stored["post_id"]
    ctx.call(ctx.config("USER_TIMELINE_ADDR", "user-timeline"), "write",
             {"user_id": creator["user_id"], "post_id": post_id})
    mentioned = [m["user_id"] for m in text["user_mentions"]]
    ctx.call(ctx.config("HOME_TIMELINE_ADDR", "home-timeline"), "write",
             {"user_id": creator["user_id"], "post_id": post_id, "mentions": mentioned})
    return {"post_id": post_id}


def ready(ctx):
    return True


ENDPOINTS = {"compose": compose}
