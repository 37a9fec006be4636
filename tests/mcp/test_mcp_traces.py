"""The trace tools against the Jaeger query API this project serves (``tracing.JaegerQuery`` over
recorded spans, on loopback behind a bearer token, as ``JAEGER_URL`` will name it), through the
run's MCP server and the SDK's client."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import anyio
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from support.trace_world import MINUTE, T0, checkout_request, home_request

from pytest_sremarathon.agent.protocol import ObservationWire
from pytest_sremarathon.agent_tools.rules import Game
from pytest_sremarathon.agent_tools.server import McpServer
from pytest_sremarathon.agent_tools.toolbox import Endpoints
from pytest_sremarathon.tracing import TraceRecorder
from pytest_sremarathon.tracing.jaeger import JaegerQuery

TOKEN = "tok-" + "3" * 20


@pytest.fixture
def jaeger() -> Iterator[tuple[str, dict[str, int]]]:
    rec = TraceRecorder(random.Random(42))
    ids = {f"checkout-{m}": checkout_request(rec, T0 + m * MINUTE, cart_fails=m == 5) for m in range(10)}
    for m in range(10):
        home_request(rec, T0 + m * MINUTE + 10 * 10**6)
    rec.flush()
    api = JaegerQuery(rec, lambda: T0 + 10 * MINUTE)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                status, body = 401, {"error": "unauthorized"}
            else:
                status, body = api.handle("GET", url.path.removeprefix("/jaeger"), parse_qs(url.query))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/jaeger", ids
    server.shutdown()
    server.server_close()


def test_traces_search_and_trace_get_read_the_jaeger_query_api(jaeger: tuple[str, dict[str, int]]) -> None:
    url, ids = jaeger
    game = Game("t", ("shop",), 300, 60, "frozen", (), "memory 2Gi")
    mcp = McpServer(Endpoints("http://127.0.0.1:9", TOKEN, jaeger=url), game, lambda a, t: (0, "", "")).start()
    now = datetime.fromtimestamp((T0 + 10 * MINUTE) / 1e6, timezone.utc)
    mcp.submissions.begin(1, ObservationWire(time=now, step=1, alerts=[], new_alerts=[]))

    async def body() -> Any:
        async with streamable_http_client(mcp.url, http_client=create_mcp_http_client(
                headers={"Authorization": f"Bearer {TOKEN}"})) as (r, w), ClientSession(r, w) as s:
            await s.initialize()

            async def call(name: str, **args: Any) -> Any:
                res = await s.call_tool(name, args)
                assert not res.is_error, res.content[0].text
                return json.loads(res.content[0].text)

            services = await call("traces_search")
            failing = await call("traces_search", service="service:shop/cart", tags={"error": "true"}, lookback="15m")
            recent = await call("traces_search", service="checkout.shop", lookback="3m", limit=50)
            missing = await s.call_tool("trace_get", {"trace_id": "00000000000000000000000000000001"})
            detail = await call("trace_get", trace_id=failing[0]["trace_id"])
            return services, failing, recent, missing, detail

    try:
        services, failing, recent, missing, detail = anyio.run(body)
    finally:
        mcp.stop()
    assert {"frontend.shop", "checkout.shop", "cart.shop"} <= set(services)
    assert len(failing) == 1 and failing[0]["errors"] and "cart.shop/empty_cart" in failing[0]["errors"]
    assert int(failing[0]["trace_id"], 16) == ids["checkout-5"]
    assert failing[0]["root"] == "frontend.shop/checkout" and failing[0]["spans"] >= 4
    assert 1 <= len(recent) <= 4  # the lookback bounds the search, from the step's virtual time
    assert missing.is_error and "not found" in missing.content[0].text
    spans = {s["operation"]: s for s in detail["spans"]}
    assert spans["empty_cart"]["error"] and spans["empty_cart"]["service"] == "cart.shop"
    assert any("KeyError" in str(x) for x in spans["empty_cart"].get("logs", [])), spans["empty_cart"]
    assert spans["place_order"]["parent"] == spans["checkout"]["span"]
