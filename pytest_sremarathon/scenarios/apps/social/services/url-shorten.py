"""Short links for the URLs in posts. A code is derived from the URL itself, so the same link
always gets the same short form and no table has to be consulted on the write path."""

import hashlib
from urllib.parse import urlsplit

ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _code(url, length):
    n = int.from_bytes(hashlib.sha256(url.encode()).digest()[:12], "big")
    out = ""
    for _ in range(length):
        n, r = divmod(n, len(ALPHABET))
        out += ALPHABET[r]
    return out


def shorten(ctx, req):
    ctx.work(0.4)
    prefix = ctx.config("SHORT_URL_PREFIX", "https://sn.example/")
    length = int(ctx.config("CODE_LENGTH", "10"))
    urls = []
    for url in req.get("urls", []):
        if urlsplit(url).scheme not in ("http", "https"):
            continue
        ctx.work(0.2)
        urls.append({"expanded_url": url, "shortened_url": prefix + _code(url, length)})
    return {"urls": urls}


def ready(ctx):
    return True


ENDPOINTS = {"shorten": shorten}
