"""User accounts: sign-up, login (signed session tokens), profiles and handle lookups. Accounts
live in the social graph's mongo (the `users` collection)."""

import base64
import hashlib
import hmac
import json

from lib import decode, encode

HASH_ITERATIONS = 1000


def _db(ctx):
    return ctx.store(ctx.config("USER_DB_ADDR", "social-graph-db"))


def _key(username):
    return f"user:{username.lower()}"


def _hash(ctx, password, salt):
    ctx.work(HASH_ITERATIONS * 0.002)  # PBKDF2 rounds dominate sign-up and login
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), HASH_ITERATIONS).hex()


def _token(secret, user_id, ttl):
    claims = base64.urlsafe_b64encode(json.dumps({"sub": user_id, "ttl": ttl}).encode()).decode().rstrip("=")
    signature = hmac.new(secret.encode(), claims.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{claims}.{signature}"


def register(ctx, req):
    ctx.work(1.0)
    secret = ctx.config("JWT_SECRET")
    username = req["username"].lower()
    db = _db(ctx)
    if db.get(_key(username)) is not None:
        return {"ok": False, "error": "username is taken"}
    salt = hashlib.sha256(f"salt:{username}".encode()).hexdigest()[:16]
    profile = {"user_id": username, "username": username, "salt": salt,
               "password_hash": _hash(ctx, req["password"], salt)}
    db.put(_key(username), encode(profile))
    return {"ok": True, "user_id": username, "token": _token(secret, username, ctx.config("TOKEN_TTL_S", "3600"))}


def login(ctx, req):
    ctx.work(1.0)
    secret = ctx.config("JWT_SECRET")
    profile = decode(_db(ctx).get(_key(req["username"])), None)
    if profile is None or not hmac.compare_digest(_hash(ctx, req["password"], profile["salt"]), profile["password_hash"]):
        return {"ok": False, "error": "invalid username or password"}
    return {"ok": True, "token": _token(secret, profile["user_id"], ctx.config("TOKEN_TTL_S", "3600"))}


def get_user(ctx, req):
    """The public profile of a user; accounts not signed up yet get a bare profile."""
    ctx.work(0.5)
    username = req["username"].lower()
    cache = ctx.cache()
    if username in cache:
        return cache[username]
    profile = decode(_db(ctx).get(_key(username)), None)
    public = {"user_id": username, "username": username, "registered": profile is not None}
    if profile is not None:
        cache[username] = public
    return public


def lookup(ctx, req):
    """Which of these handles belong to signed-up users (handle -> user id)."""
    ctx.work(0.3)
    db = _db(ctx)
    users = {}
    for username in req.get("usernames", []):
        profile = decode(db.get(_key(username)), None)
        if profile is not None:
            users[username.lower()] = profile["user_id"]
    return {"users": users}


def ready(ctx):
    _db(ctx).get("readiness-probe")
    return True


ENDPOINTS = {"register": register, "login": login, "get_user": get_user, "lookup": lookup}
