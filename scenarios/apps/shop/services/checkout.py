"""Checkout: prices the cart, charges the card, ships, e-mails, empties the cart."""

TEST_CARD = "4432801561520454"


def place_order(ctx, req):
    ctx.work(3)
    user, currency = req["user"], req.get("currency", "USD")
    cart = ctx.call("cart", "get_cart", {"user": user})
    subtotal = 0.0
    for line in cart["items"]:
        item = ctx.call("productcatalog", "get_product", {"id": line["product"]})
        subtotal += item["price_usd"] * line["quantity"]
    quote = ctx.call("shipping", "get_quote", {"items": len(cart["items"])})
    total_usd = round(subtotal + quote["cost_usd"], 2)
    if total_usd <= 0:
        return {"order_id": None, "total": 0.0}
    total = ctx.call("currency", "convert", {"from": "USD", "to": currency, "amount": total_usd})["amount"]
    charge = ctx.call(ctx.config("PAYMENT_ADDR", "payment"), "charge", {"card": TEST_CARD, "amount": total_usd})
    shipment = ctx.call("shipping", "ship_order", {"user": user, "items": len(cart["items"])})
    order_id = f"{charge['transaction_id']}-{shipment['tracking_id']}"
    ctx.call("email", "send_confirmation", {"order_id": order_id, "items": cart["items"], "total": total})
    ctx.call("cart", "empty_cart", {"user": user})
    return {"order_id": order_id, "total": total}


def ready(ctx):
    return True


ENDPOINTS = {"place_order": place_order}
