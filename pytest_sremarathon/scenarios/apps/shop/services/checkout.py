"""Checkout: prices the cart, charges the card, ships, e-mails, empties the cart."""

TEST_CARD = "4432801561520454"


class _Pool:
    """Keep-alive connections to one upstream, shared by the requests of this process."""

    def __init__(self, upstream, size):
        self.upstream = upstream
        self.size = size
        self.in_use = 0

    def acquire(self, n):
        if self.in_use + n > self.size:
            raise TimeoutError(f"{self.upstream} pool limit of size {self.size} reached, "
                               f"connection timed out, timeout 30.00")
        self.in_use += n

    def release(self, n):
        self.in_use -= n


_POOLS = {}


def _pool(ctx, upstream, key):
    size = int(ctx.config(key, "8"))
    if upstream not in _POOLS or _POOLS[upstream].size != size:
        _POOLS[upstream] = _Pool(upstream, size)
    return _POOLS[upstream]


def _price_lines(ctx, lines):
    """Look up every cart line's product concurrently, one pooled connection per lookup."""
    pool = _pool(ctx, "productcatalog", "CATALOG_POOL_SIZE")
    pool.acquire(len(lines))
    try:
        items = [ctx.call("productcatalog", "get_product", {"id": line["product"]}) for line in lines]
    finally:
        pool.release(len(lines))
    return sum(item["price_usd"] * line["quantity"] for item, line in zip(items, lines))


def place_order(ctx, req):
    ctx.work(3)
    user, currency = req["user"], req.get("currency", "USD")
    cart = ctx.call("cart", "get_cart", {"user": user})
    subtotal = _price_lines(ctx, cart["items"])
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
