"""Unit tests for the social network's handlers; the pipeline's build step runs them on every
change."""

import json


class FakeCtx:
    """A stand-in for the runtime context: canned downstream answers, an in-memory store."""

    def __init__(self, answers=None, config=None):
        self.answers = answers or {}
        self.config_data = config or {}
        self.data = {}
        self.calls = []
        self.logs = []
        self.cache_data = {}

    def call(self, service, endpoint, payload=None):
        self.calls.append((service, endpoint, payload or {}))
        answer = self.answers[(service, endpoint)]
        return answer(payload or {}) if callable(answer) else answer

    def store(self, name):
        ctx = self

        class _Store:
            def get(self, key):
                return ctx.data.get(key)

            def put(self, key, value):
                ctx.data[key] = value

            def incr(self, key, by=1):
                ctx.data[key] = int(ctx.data.get(key) or 0) + by
                return ctx.data[key]

        return _Store()

    def config(self, key, default=None):
        value = self.config_data.get(key, default)
        if value is None:
            raise KeyError(f"missing configuration key {key!r}")
        return value

    def work(self, ms):
        pass

    def log(self, message):
        self.logs.append(message)

    def cache(self):
        return self.cache_data


def test_register_then_login(services):
    ctx = FakeCtx(config={"JWT_SECRET": "test-secret"})
    user = services["user"]
    assert user.register(ctx, {"username": "u1", "password": "pw"})["ok"]
    assert not user.register(ctx, {"username": "U1", "password": "pw"})["ok"]
    assert user.login(ctx, {"username": "u1", "password": "pw"})["token"]
    assert not user.login(ctx, {"username": "u1", "password": "wrong"})["ok"]
    assert user.lookup(ctx, {"usernames": ["u1", "nobody"]})["users"] == {"u1": "u1"}


def test_mentions_and_links(services):
    ctx = FakeCtx({
        ("user-mention", "resolve"): lambda p: {"user_mentions": [{"username": u, "user_id": u}
                                                                 for u in p["usernames"] if u.startswith("u")]},
        ("url-shorten", "shorten"): lambda p: {"urls": [{"expanded_url": u, "shortened_url": "https://s/1"}
                                                        for u in p["urls"]]},
    })
    out = services["text"].process(ctx, {"text": "hi @u3 and @nasa, see https://example.org/a.pdf"})
    assert [m["user_id"] for m in out["user_mentions"]] == ["u3"]
    assert out["text"] == "hi @u3 and @nasa, see https://s/1"


def test_mention_resolution_skips_unknown_handles(services):
    ctx = FakeCtx({("user", "lookup"): {"users": {"u3": "u3"}}})
    out = services["user-mention"].resolve(ctx, {"usernames": ["u3", "ghost"]})
    assert out["user_mentions"] == [{"username": "u3", "user_id": "u3"}]


def test_short_links_are_stable(services):
    ctx = FakeCtx()
    first = services["url-shorten"].shorten(ctx, {"urls": ["https://example.org/papers/dynamo.pdf"]})
    again = services["url-shorten"].shorten(ctx, {"urls": ["https://example.org/papers/dynamo.pdf"]})
    assert first == again and first["urls"][0]["shortened_url"].startswith("https://sn.example/")


def test_media_rejects_unknown_kinds(services):
    out = services["media"].upload(FakeCtx(), {"media_types": ["image", "pdf"], "user_id": "u1"})
    assert [m["media_type"] for m in out["media"]] == ["image"]


def test_post_storage_round_trip(services):
    ctx = FakeCtx()
    storage = services["post-storage"]
    a = storage.store_post(ctx, {"post": {"creator": {"user_id": "u1"}, "text": "first"}})["post_id"]
    b = storage.store_post(ctx, {"post": {"creator": {"user_id": "u1"}, "text": "second"}})["post_id"]
    posts = storage.read_posts(ctx, {"post_ids": [b, a, "u2-1"]})["posts"]
    assert [p["text"] for p in posts] == ["second", "first"]


def test_follow_is_idempotent(services):
    ctx = FakeCtx()
    graph = services["social-graph"]
    assert graph.follow(ctx, {"user_id": "alice", "followee_id": "bob"})["changed"]
    assert not graph.follow(ctx, {"user_id": "alice", "followee_id": "bob"})["changed"]
    assert graph.get_followees(ctx, {"user_id": "alice"})["followees"] == ["bob"]


def test_home_timeline_fans_out_to_followers_and_mentions(services):
    ctx = FakeCtx({("social-graph", "get_followers"): {"followers": ["u2", "u3"]}})
    out = services["home-timeline"].write(ctx, {"user_id": "u1", "post_id": "u1-1", "mentions": ["u9", "u1"]})
    assert out["fanout"] == 3
    assert json.loads(ctx.data["home-timeline:u9"]) == ["u1-1"]


def test_user_timeline_is_newest_first(services):
    ctx = FakeCtx()
    timeline = services["user-timeline"]
    timeline.write(ctx, {"user_id": "u1", "post_id": "u1-1"})
    timeline.write(ctx, {"user_id": "u1", "post_id": "u1-2"})
    assert json.loads(ctx.data["user-timeline:u1"]) == ["u1-2", "u1-1"]


def test_compose_writes_both_timelines(services):
    ctx = FakeCtx({
        ("user", "get_user"): {"user_id": "u1", "username": "u1"},
        ("text", "process"): {"text": "hello @u2", "user_mentions": [{"username": "u2", "user_id": "u2"}], "urls": []},
        ("media", "upload"): {"media": [{"media_id": "m1", "media_type": "image"}]},
        ("post-storage", "store_post"): {"post_id": "u1-7"},
        ("user-timeline", "write"): {"ok": True},
        ("home-timeline", "write"): {"fanout": 1},
    })
    out = services["compose-post"].compose(ctx, {"username": "u1", "text": "hello @u2", "media_types": ["image"]})
    assert out["post_id"] == "u1-7"
    home = [p for s, e, p in ctx.calls if (s, e) == ("home-timeline", "write")][0]
    assert home["mentions"] == ["u2"]


def test_frontend_rejects_empty_posts(services):
    assert services["frontend"].compose_post(FakeCtx(), {"user": "u1", "text": "   "})["ok"] is False
