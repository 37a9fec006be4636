"""Recommends products the shopper has not looked at yet."""


def list_recommendations(ctx, req):
    ctx.work(2)
    seen = set(req.get("product_ids", []))
    products = ctx.call("productcatalog", "list_products", {})["products"]
    picks = [p["id"] for p in products if p["id"] not in seen]
    return {"product_ids": picks[: int(ctx.config("MAX_RECOMMENDATIONS", "5"))]}


def ready(ctx):
    return True


ENDPOINTS = {"list_recommendations": list_recommendations}
