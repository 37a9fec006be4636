"""User: checks a customer's password against the salted hash kept in MongoDB."""

import hashlib
import hmac
import json

DEMO_PASSWORD = "hotel-demo"  # every load-test account (user_1 ... user_500) has this password
DEMO_ACCOUNTS = 500


def password_hash(salt, password):
    return hashlib.sha256(f"{salt}:{password}".encode()).hexdigest()


def _demo_account(username):
    """The bundled load-test accounts a fresh database is seeded with; None for anyone else."""
    prefix, _, number = username.partition("_")
    if prefix != "user" or not number.isdigit() or not 1 <= int(number) <= DEMO_ACCOUNTS:
        return None
    salt = hashlib.md5(username.encode()).hexdigest()[:12]
    return {"username": username, "salt": salt, "password_hash": password_hash(salt, DEMO_PASSWORD)}


def _account(ctx, username):
    db = ctx.store(ctx.config("MONGODB_ADDR", "mongodb-user"))
    raw = db.get(f"user:{username}")
    if raw is None:
        account = _demo_account(username)
        if account is not None:
            db.put(f"user:{username}", json.dumps(account))
        return account
    return json.loads(raw)


def check_user(ctx, req):
    ctx.work(0.8)
    username = req["username"]
    account = _account(ctx, username)
    if account is None:
        return {"correct": False}
    ctx.work(1.5)  # hashing
    expected = password_hash(account["salt"], req["password"])
    return {"correct": hmac.compare_digest(expected, account["password_hash"])}


def ready(ctx):
    ctx.store(ctx.config("MONGODB_ADDR", "mongodb-user")).get("readiness-probe")
    return True


ENDPOINTS = {"check_user": check_user}
