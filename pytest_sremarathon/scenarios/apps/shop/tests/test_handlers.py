"""Unit tests for the shop's handlers; the pipeline's build step runs them on every change."""

import json


class FakeCtx:
    """A stand-in for the runtime context: canned downstream answers, an in-memory store."""

    def __init__(self, answers=None, config=None):
        self.answers = answers or {}
        self.config_data = config or {}
        self.data = {}
        self.logs = []

    def call(self, service, endpoint, payload=None):
        answer = self.answers[(service, endpoint)]
        return answer(payload or {}) if callable(answer) else answer

    def store(self, name):
        ctx = self

        class _Store:
            def get(self, key):
                return ctx.data.get(key)

            def put(self, key, value):
                ctx.data[key] = value

        return _Store()

    def config(self, key, default=None):
        return self.config_data.get(key, default)

    def work(self, ms):
        pass

    def log(self, message):
        self.logs.append(message)

    def cache(self):
        return self.__dict__.setdefault("cache_dict", {})

    def external(self, name, op, payload=None):
        answer = self.answers[(name, op)]
        return answer(payload or {}) if callable(answer) else answer


def test_currency_round_trip(services):
    ctx = FakeCtx()
    usd = services["currency"].convert(ctx, {"from": "EUR", "to": "USD", "amount": 10})["amount"]
    assert usd == 11.3
    back = services["currency"].convert(ctx, {"from": "USD", "to": "EUR", "amount": usd})["amount"]
    assert abs(back - 10) < 0.01


def test_catalog_lookup(services):
    item = services["productcatalog"].get_product(FakeCtx(), {"id": "OLJCESPC7Z"})
    assert item["name"] == "Sunglasses"


def test_cart_adds_quantities(services):
    ctx = FakeCtx()
    services["cart"].add_item(ctx, {"user": "u1", "product": "P1", "quantity": 1})
    services["cart"].add_item(ctx, {"user": "u1", "product": "P1", "quantity": 2})
    assert json.loads(ctx.data["cart:u1"]) == [{"product": "P1", "quantity": 3}]


def test_payment_rejects_bad_card(services):
    try:
        services["payment"].charge(FakeCtx(), {"card": "1234", "amount": 3})
    except ValueError:
        return
    raise AssertionError("an invalid card was charged")


def test_home_page_degrades_without_ads(services):
    def no_ads(_):
        raise RuntimeError("ad service down")

    ctx = FakeCtx({
        ("productcatalog", "list_products"): {"products": [{"id": "A", "price_usd": 2.0}]},
        ("currency", "convert"): lambda p: {"amount": p["amount"]},
        ("ad", "get_ads"): no_ads,
    })
    page = services["frontend"].home(ctx, {"currency": "USD"})
    assert page["products"] == ["A"] and page["ads"] == 0


def test_checkout_charges_the_total(services):
    charged = {}

    def charge(p):
        charged.update(p)
        return {"transaction_id": "tx-1"}

    ctx = FakeCtx({
        ("cart", "get_cart"): {"items": [{"product": "A", "quantity": 2}]},
        ("productcatalog", "get_product"): {"id": "A", "price_usd": 10.0},
        ("shipping", "get_quote"): {"cost_usd": 5.49},
        ("currency", "convert"): lambda p: {"amount": p["amount"]},
        ("payment", "charge"): charge,
        ("shipping", "ship_order"): {"tracking_id": "T"},
        ("email", "send_confirmation"): {"queued": True},
        ("cart", "empty_cart"): {"ok": True},
    })
    order = services["checkout"].place_order(ctx, {"user": "u1"})
    assert charged["amount"] == 25.49 and order["order_id"] == "tx-1-T"


def _provider_down(_):
    raise RuntimeError("payment-provider: HTTP 503: 503 Service Unavailable")


def test_payment_charges_through_the_provider(services):
    sent = {}
    ctx = FakeCtx({("payment-provider", "charges"): lambda p: sent.update(p) or {"id": "ch_1"}})
    result = services["payment"].charge(ctx, {"card": "4432801561520454", "amount": 12.5})
    assert result["status"] == "charged" and sent["amount"] == 1250


def test_payment_fails_when_the_provider_is_down(services):
    ctx = FakeCtx({("payment-provider", "charges"): _provider_down}, config={"PAYMENT_FALLBACK": "none"})
    try:
        services["payment"].charge(ctx, {"card": "4432801561520454", "amount": 3})
    except RuntimeError:
        return
    raise AssertionError("a charge succeeded while the provider was down and no fallback was set")


def test_payment_queues_charges_with_the_fallback(services):
    ctx = FakeCtx({("payment-provider", "charges"): _provider_down}, config={"PAYMENT_FALLBACK": "queue"})
    result = services["payment"].charge(ctx, {"card": "4432801561520454", "amount": 3})
    assert result["status"] == "queued" and result["transaction_id"].startswith("tx-")
