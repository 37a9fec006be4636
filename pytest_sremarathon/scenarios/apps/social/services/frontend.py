"""Front door of the social network (the nginx/OpenResty tier): validates requests and routes
them to the services behind it."""

from lib import page


def compose_post(ctx, req):
    ctx.work(1.5)
    text = (req.get("text") or "").strip()
    if not text:
        return {"ok": False, "error": "a post needs some text"}
    if len(text) > int(ctx.config("MAX_POST_LENGTH", "280")):
        return {"ok": False, "error": "post is too long"}
    media = list(req.get("media") or [])
    post = ctx.call(ctx.config("COMPOSE_POST_ADDR", "compose-post"), "compose",
                    {"username": req["user"], "text": text, "media_types": media, "post_type": "POST"})
    return {"ok": True, "post_id": post["post_id"]}


def read_home_timeline(ctx, req):
    ctx.work(1.0)
    start, stop = page(req, int(ctx.config("DEFAULT_PAGE_SIZE", "10")))
    timeline = ctx.call(ctx.config("HOME_TIMELINE_ADDR", "home-timeline"), "read",
                        {"user_id": req["user"], "start": start, "stop": stop})
    return {"posts": timeline["posts"], "count": len(timeline["posts"])}


def read_user_timeline(ctx, req):
    ctx.work(1.0)
    start, stop = page(req, int(ctx.config("DEFAULT_PAGE_SIZE", "10")))
    timeline = ctx.call(ctx.config("USER_TIMELINE_ADDR", "user-timeline"), "read",
                        {"user_id": req["user"], "start": start, "stop": stop})
    return {"posts": timeline["posts"], "count": len(timeline["posts"])}


def follow(ctx, req):
    ctx.work(0.8)
    if req["user"] == req["followee"]:
        return {"ok": False, "error": "you cannot follow yourself"}
    ctx.call(ctx.config("SOCIAL_GRAPH_ADDR", "social-graph"), "follow",
             {"user_id": req["user"], "followee_id": req["followee"]})
    return {"ok": True}


def register(ctx, req):
    ctx.work(1.0)
    answer = ctx.call(ctx.config("USER_ADDR", "user"), "register",
                      {"username": req["user"], "password": req["password"]})
    return {"ok": answer["ok"], "error": answer.get("error")}


def login(ctx, req):
    ctx.work(1.0)
    answer = ctx.call(ctx.config("USER_ADDR", "user"), "login",
                      {"username": req["user"], "password": req["password"]})
    return {"ok": answer["ok"], "token": answer.get("token")}


def ready(ctx):
    return True


ENDPOINTS = {"compose_post": compose_post, "read_home_timeline": read_home_timeline,
             "read_user_timeline": read_user_timeline, "follow": follow, "register": register, "login": login}
