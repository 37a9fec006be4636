"""Order confirmation e-mails (rendered, then handed to the mail relay)."""


def send_confirmation(ctx, req):
    ctx.work(1.5)
    body = f"Order {req['order_id']} confirmed: {len(req.get('items', []))} item(s), total {req['total']}"
    return {"queued": True, "bytes": len(body)}


def ready(ctx):
    return True


ENDPOINTS = {"send_confirmation": send_confirmation}
