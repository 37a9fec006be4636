"""Media attached to posts: checks the kinds and assigns media ids (the bytes go straight from
the client to the object store; this service only keeps the metadata)."""

import hashlib
import itertools

KINDS = ("image", "video", "gif")
_SEQ = itertools.count(1)  # per process; ids also carry the uploader


def upload(ctx, req):
    ctx.work(0.8)
    kinds = req.get("media_types", [])[: int(ctx.config("MAX_MEDIA_PER_POST", "4"))]
    media = []
    for i, kind in enumerate(kinds):
        if kind not in KINDS:
            continue
        seed = f"{req.get('user_id', '')}:{next(_SEQ)}:{i}:{kind}"
        media_id = hashlib.blake2b(seed.encode(), digest_size=8).hexdigest()
        media.append({"media_id": media_id, "media_type": kind})
    return {"media": media}


def ready(ctx):
    return True


ENDPOINTS = {"upload": upload}
