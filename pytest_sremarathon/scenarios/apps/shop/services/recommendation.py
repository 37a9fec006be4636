"""Recommends products the shopper has not looked at yet."""

import hashlib


def _rank(ctx, product_ids):
    """Order candidates with the shopper-affinity model. CPU-heavy (about 15 ms per candidate):
    it stays behind PERSONALIZED_RANKING until the model is distilled."""
    ctx.work(15 * len(product_ids))
    return sorted(product_ids, key=lambda pid: hashlib.sha256(pid.encode()).hexdigest())


def list_recommendations(ctx, req):
    ctx.work(2)
    seen = set(req.get("product_ids", []))
    products = ctx.call("productcatalog", "list_products", {})["products"]

    picks = [p["id"] for p in products if p["id"] not in seen]
    if ctx.config("PERSONALIZED_RANKING", "off") == "on":
        picks = _rank(ctx, picks)
    return {"product_ids": picks[: int(ctx.config("MAX_RECOMMENDATIONS", "5"))]}


def ready(ctx):
    return True


ENDPOINTS = {"list_recommendations": list_recommendations}
