"""Shopping carts, kept in the cart cache (redis)."""

import json
import zlib


def _key(user):
    return f"cart:{user}"


def _in_rollout(ctx, flag, user):
    """Is ``user`` among the share of shoppers a percentage flag is rolled out to? A stable
    bucket per user (0-99), as the flag service buckets them."""
    return zlib.crc32(f"{flag}:{user}".encode()) % 100 < float(ctx.config(flag, "0"))


def _unsave(store, user, product):
    """Saved for later (dark launch): adding a product to the cart takes it off the list."""
    saved = json.loads(store.get(f"saved:{user}"))
    if product in saved:
        saved.remove(product)
        store.put(f"saved:{user}", json.dumps(saved))


def get_cart(ctx, req):
    ctx.work(0.8)
    raw = ctx.store(ctx.config("CART_CACHE_ADDR", "cart-cache")).get(_key(req["user"]))
    items = json.loads(raw) if raw else []
    return {"user": req["user"], "items": items}


def add_item(ctx, req):
    ctx.work(1.0)
    store = ctx.store(ctx.config("CART_CACHE_ADDR", "cart-cache"))
    raw = store.get(_key(req["user"]))
    items = json.loads(raw) if raw else []
    for line in items:
        if line["product"] == req["product"]:
            line["quantity"] += int(req["quantity"])
            break
    else:
        items.append({"product": req["product"], "quantity": int(req["quantity"])})
    store.put(_key(req["user"]), json.dumps(items))
    if _in_rollout(ctx, "SAVED_FOR_LATER_PERCENT", req["user"]):
        _unsave(store, req["user"], req["product"])
    return {"items": len(items)}


def empty_cart(ctx, req):
    ctx.work(0.5)
    ctx.store(ctx.config("CART_CACHE_ADDR", "cart-cache")).put(_key(req["user"]), "[]")
    return {"ok": True}


def ready(ctx):
    ctx.store(ctx.config("CART_CACHE_ADDR", "cart-cache")).get("readiness-probe")
    return True


ENDPOINTS = {"get_cart": get_cart, "add_item": add_item, "empty_cart": empty_cart}
