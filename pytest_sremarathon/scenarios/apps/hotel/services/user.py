"""User: checks a customer's password against the salted hash kept in MongoDB."""

import hashlib
import hmac
import json
import zlib

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



def _in_rollout(ctx, flag, user):
    """Is ``user`` among the share of users a percentage flag is rolled out to? A stable bucket
    per user (0-99), as the flag service buckets them."""
    return zlib.crc32(f"{flag}:{user}".encode()) % 100 < float(ctx.config(flag, "0"))


def _argon2_expected(account, password):
    """Accounts migrated to argon2 (dark launch): verify against the new hash."""
    return password_hash(account["argon2_salt"], password)


def check_user(ctx, req):
    ctx.work(0.8)
    username = req["username"]
    account = _account(ctx, username)
    if account is None:
        return {"correct": False}
    ctx.work(1.5)  # hashing
    expected = password_hash(account["salt"], req["password"])
    if _in_rollout(ctx, "ARGON2_VERIFY_PERCENT", username):
        expected = _argon2_expected(account, req["password"])
    return {"correct": hmac.compare_digest(expected, account["password_hash"])}


def ready(ctx):
    ctx.store(ctx.config("MONGODB_ADDR", "mongodb-user")).get("readiness-probe")
    return True


ENDPOINTS = {"check_user": check_user}
