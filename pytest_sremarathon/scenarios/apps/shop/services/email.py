"""Order confirmation e-mails (rendered, then handed to the mail relay)."""


def send_confirmation(ctx, req):
    ctx.work(1.5)
    relay = ctx.config("MAIL_RELAY_ADDR")
    body = f"Order {req['order_id']} confirmed: {len(req.get('items', []))} item(s), total {req['total']}"
    return {"queued": True, "bytes": len(body), "relay": relay}


def ready(ctx):
    return True


ENDPOINTS = {"send_confirmation": send_confirmation}
