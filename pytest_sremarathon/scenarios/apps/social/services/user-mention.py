"""Resolves @handles in a post to the users they name; handles nobody owns are left as text."""


def resolve(ctx, req):
    ctx.work(0.5)
    usernames = [u.lower() for u in req.get("usernames", [])]
    if not usernames:
        return {"user_mentions": []}
    found = ctx.call(ctx.config("USER_ADDR", "user"), "lookup", {"usernames": usernames})["users"]
    mentions = [{"username": u, "user_id": found[u]} for u in usernames if u in found]
    return {"user_mentions": mentions}


def ready(ctx):
    return True


ENDPOINTS = {"resolve": resolve}
