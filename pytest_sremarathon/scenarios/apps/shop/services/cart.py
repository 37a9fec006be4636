"""Shopping carts, kept in the cart cache (redis)."""

import json


def _key(user):
    return f"cart:{user}"


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
    return {"items": len(items)}


def empty_cart(ctx, req):
    ctx.work(0.5)
    ctx.store(ctx.config("CART_CACHE_ADDR", "cart-cache")).put(_key(req["user"]), "[]")
    return {"ok": True}


def ready(ctx):
    ctx.store(ctx.config("CART_CACHE_ADDR", "cart-cache")).get("readiness-probe")
    return True


ENDPOINTS = {"get_cart": get_cart, "add_item": add_item, "empty_cart": empty_cart}
