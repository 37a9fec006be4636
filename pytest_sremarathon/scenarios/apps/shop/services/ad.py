"""Contextual text ads."""

ADS = {
    "home": [{"text": "Summer sale: 20% off sunglasses", "url": "/product/OLJCESPC7Z"}],
    "kitchen": [{"text": "Mugs for every morning", "url": "/product/6E92ZMYYFZ"}],
    "accessories": [{"text": "Watches that last", "url": "/product/1YMWWN1N4O"}],
}


def get_ads(ctx, req):
    ctx.work(0.7)
    return {"ads": ADS.get(req.get("context", "home"), ADS["home"])}


def ready(ctx):
    return True


ENDPOINTS = {"get_ads": get_ads}
