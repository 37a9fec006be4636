"""Product catalog: the list of products and their prices in USD."""

PRODUCTS = [
    {"id": "OLJCESPC7Z", "name": "Sunglasses", "price_usd": 19.99, "categories": ["accessories"]},
    {"id": "66VCHSJNUP", "name": "Tank Top", "price_usd": 18.99, "categories": ["clothing", "tops"]},
    {"id": "1YMWWN1N4O", "name": "Watch", "price_usd": 109.99, "categories": ["accessories"]},
    {"id": "L9ECAV7KIM", "name": "Loafers", "price_usd": 89.99, "categories": ["footwear"]},
    {"id": "2ZYFJ3GM2N", "name": "Hairdryer", "price_usd": 24.99, "categories": ["hair", "beauty"]},
    {"id": "0PUK6V6EV0", "name": "Candle Holder", "price_usd": 18.99, "categories": ["decor", "home"]},
    {"id": "LS4PSXUNUM", "name": "Salt & Pepper Shakers", "price_usd": 18.49, "categories": ["kitchen"]},
    {"id": "9SIQT8TOJO", "name": "Bamboo Glass Jar", "price_usd": 5.49, "categories": ["kitchen"]},
    {"id": "6E92ZMYYFZ", "name": "Mug", "price_usd": 8.99, "categories": ["kitchen"]},
]
_BY_ID = {p["id"]: p for p in PRODUCTS}


def list_products(ctx, req):
    ctx.work(1.5)
    return {"products": PRODUCTS}


def get_product(ctx, req):
    ctx.work(0.8)
    item = _BY_ID.get(req["id"])
    if item is None:
        raise LookupError(f"no product with ID {req['id']}")
    return item


def search_products(ctx, req):
    ctx.work(2.5)
    q = req.get("query", "").lower()
    return {"results": [p["id"] for p in PRODUCTS if q in p["name"].lower()]}


def ready(ctx):
    return len(PRODUCTS) > 0


ENDPOINTS = {"list_products": list_products, "get_product": get_product, "search_products": search_products}
