"""Storefront: renders pages from the catalog, prices, cart, recommendations and ads."""

from lib import ConnectionPool, optional_call
from moneyparse import to_amount

_POOLS = {}


def _catalog_addr(ctx):
    return ctx.config("PRODUCT_CATALOG_ADDR", "productcatalog")


def _currency_pool(ctx):
    size = int(ctx.config("CURRENCY_POOL_SIZE", "8"))
    if "currency" not in _POOLS or _POOLS["currency"].size != size:
        _POOLS["currency"] = ConnectionPool("currency", size)
    return _POOLS["currency"]


def _prices(ctx, products, currency):
    """Convert the prices concurrently: one pooled currency connection per product."""
    pool = _currency_pool(ctx)
    pool.acquire(len(products))
    try:
        return [ctx.call(ctx.config("CURRENCY_ADDR", "currency"), "convert",
                         {"from": "USD", "to": currency, "amount": p["price_usd"]})["amount"]
                for p in products]
    finally:
        pool.release(len(products))


def home(ctx, req):
    ctx.work(3)
    products = ctx.call(_catalog_addr(ctx), "list_products", {})["products"]
    currency = req.get("currency", "USD")
    shown = products[: int(ctx.config("HOME_PRODUCTS", "4"))]
    prices = _prices(ctx, shown, currency)
    ads = optional_call(ctx, "ad", "get_ads", {"context": "home"}, {"ads": []})
    return {"products": [p["id"] for p in shown], "prices": prices, "ads": len(ads["ads"])}


def product(ctx, req):
    ctx.work(2)
    item = ctx.call(_catalog_addr(ctx), "get_product", {"id": req["product"]})
    price = _prices(ctx, [item], req.get("currency", "USD"))[0]
    recs = optional_call(ctx, "recommendation", "list_recommendations",
                         {"product_ids": [item["id"]]}, {"product_ids": []})
    return {"product": item["id"], "price": price, "recommendations": recs["product_ids"]}


def view_cart(ctx, req):
    ctx.work(2)
    cart = ctx.call("cart", "get_cart", {"user": req["user"]})
    currency = req.get("currency", "USD")
    total = 0.0
    for line in cart["items"]:
        item = ctx.call(_catalog_addr(ctx), "get_product", {"id": line["product"]})
        total += item["price_usd"] * line["quantity"]
    quote = ctx.call("shipping", "get_quote", {"items": len(cart["items"])})
    amount = to_amount(total + quote["cost_usd"])  # to the cent before converting: no float dust
    converted = ctx.call(ctx.config("CURRENCY_ADDR", "currency"), "convert",
                         {"from": "USD", "to": currency, "amount": float(amount)})
    return {"items": len(cart["items"]), "total": converted["amount"]}


def add_to_cart(ctx, req):
    ctx.work(1)
    ctx.call(_catalog_addr(ctx), "get_product", {"id": req["product"]})
    ctx.call("cart", "add_item", {"user": req["user"], "product": req["product"],
                                  "quantity": int(req.get("quantity", 1))})
    return {"ok": True}


def checkout(ctx, req):
    ctx.work(2)
    order = ctx.call("checkout", "place_order", {"user": req["user"], "currency": req.get("currency", "USD")})
    return {"order": order["order_id"], "total": order["total"]}


def ready(ctx):
    return True


ENDPOINTS = {"home": home, "product": product, "view_cart": view_cart,
             "add_to_cart": add_to_cart, "checkout": checkout}
