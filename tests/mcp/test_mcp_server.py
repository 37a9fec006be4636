"""The run's MCP server with the official SDK's client: authentication, the tool surface, the
step's submissions, and ``sremarathon mcp`` (stdio) relaying to it. The tools' requests here go to
a server that is not there (their failures are what the client reads); the marathon tests
(tests/mcp/test_mcp_marathon.py) run them against the twin."""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from pytest_sremarathon.agent.protocol import Alert, ObservationWire
from pytest_sremarathon.agent_tools.rules import Game
from pytest_sremarathon.agent_tools.server import TOOLS, McpServer
from pytest_sremarathon.agent_tools.toolbox import Endpoints

TOKEN = "tok-" + "7" * 20
ISSUE_TOOLS = {"kubectl", "promql_query", "promql_query_range", "alerts", "traces_search", "trace_get", "pod_logs",
               "pipeline_changes", "pipeline_diff", "pipeline_revert", "pipeline_deploy", "pipeline_status",
               "report_finding", "claim_resolved"}
T0 = datetime(2026, 1, 5, 0, 30, tzinfo=timezone.utc)


@pytest.fixture
def server() -> Iterator[McpServer]:
    ran: list[list[str]] = []

    def sandboxed(argv: list[str], timeout: float) -> tuple[int, str, str]:
        ran.append(argv)
        return 0, "NAME   READY\ncart-1 1/1\n", ""

    game = Game("smoke", ("shop", "hotel"), 300, 60, "per-request:10", ("no-delete-namespace",), "memory 2Gi")
    srv = McpServer(Endpoints("http://127.0.0.1:9", TOKEN), game, sandboxed).start()
    srv.ran = ran  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def _alert(i: str, status: str) -> Alert:
    return Alert(id=i, name="HighErrorRate", status=status, severity="critical",  # type: ignore[arg-type]
                 labels={"app": "shop", "service": "cart"}, annotations={"summary": "cart 5xx"}, starts_at=T0)


async def _session(url: str, token: str, body: Any) -> Any:
    async with streamable_http_client(url, http_client=create_mcp_http_client(
            headers={"Authorization": f"Bearer {token}"})) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        return await body(s)


def test_the_server_answers_only_with_the_agents_token(server: McpServer) -> None:
    assert server.url.startswith("http://127.0.0.1:")
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        req = urllib.request.Request(server.url, data=b"{}", method="POST", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 401 and b"SREMARATHON_TOKEN" in err.value.read()


def test_tools_resources_and_prompt_as_a_client_sees_them(server: McpServer) -> None:
    async def body(s: ClientSession) -> Any:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        rules = (await s.read_resource("sremarathon://rules")).contents[0].text
        prompt = await s.get_prompt("sre_marathon")
        return tools, rules, prompt

    tools, rules, prompt = anyio.run(_session, server.url, TOKEN, body)
    assert set(tools) == ISSUE_TOOLS == set(TOOLS)
    for t in tools.values():
        assert t.description and t.input_schema["type"] == "object"
    component = tools["report_finding"].input_schema["properties"]["component"]["description"]
    assert "service:<app>/<service>" in component and "node:<node>" in component and "zone:<zone>" in component
    assert "change:" in tools["pipeline_revert"].input_schema["properties"]["change"]["description"]
    assert "every 5 virtual minutes" in rules and "change:<change id>" in rules and "shop, hotel" in rules
    assert "rules of the game" in prompt.messages[0].content.text


def test_findings_and_claims_are_the_open_steps_report(server: McpServer) -> None:
    async def call(s: ClientSession, name: str, **args: Any) -> tuple[bool, str]:
        r = await s.call_tool(name, args)
        return r.is_error, r.content[0].text

    async def outside(s: ClientSession) -> Any:
        return await call(s, "report_finding", incident="x", alerts=[])

    error, text = anyio.run(_session, server.url, TOKEN, outside)
    assert error and "no step is running" in text

    server.submissions.begin(3, ObservationWire(time=T0, step=3, alerts=[_alert("a1", "firing"), _alert("a0", "resolved")],
                                                new_alerts=[_alert("a1", "firing")]))

    async def during(s: ClientSession) -> Any:
        alerts = json.loads((await call(s, "alerts"))[1])
        bad = await call(s, "report_finding", incident="", alerts=[])
        await call(s, "report_finding", incident="cart", alerts=["a1"], component="service:shop/wrong")
        await call(s, "report_finding", incident="cart", alerts=["a1"], component="service:shop/cart",
                   cause="change:abc")
        await call(s, "claim_resolved", incident="cart")
        kubectl = await call(s, "kubectl", command="kubectl get pods -n shop")
        refused = await call(s, "kubectl", command="get pods --server=https://elsewhere")
        shell = await call(s, "kubectl", command="get pods | grep cart")
        traces = await call(s, "traces_search", service="cart")
        return alerts, bad, kubectl, refused, shell, traces

    alerts, bad, kubectl, refused, shell, traces = anyio.run(_session, server.url, TOKEN, during)
    report = server.submissions.end()
    assert [a["id"] for a in alerts["alerts"]] == ["a1"] and alerts["step"] == 3
    assert bad[0]
    assert [(f.incident, f.component, f.cause) for f in report.findings] == [("cart", "service:shop/cart", "change:abc")]
    assert [c.incident for c in report.claims] == ["cart"]
    assert kubectl == (False, "NAME   READY\ncart-1 1/1")
    assert server.ran == [["kubectl", "get", "pods", "-n", "shop"], ["kubectl", "get", "pods", "|", "grep", "cart"]]  # type: ignore[attr-defined]
    assert refused[0] and "--server is not allowed" in refused[1]
    assert traces[0] and "JAEGER_URL" in traces[1]  # this run has no Jaeger query API: a clear tool error


def test_sremarathon_mcp_relays_stdio_to_the_run(server: McpServer, tmp_path) -> None:
    server.submissions.begin(1, ObservationWire(time=T0, step=1, alerts=[], new_alerts=[]))
    params = StdioServerParameters(command=sys.executable, args=["-m", "pytest_sremarathon.cli", "mcp"],
                                   env={"SREMARATHON_MCP_URL": server.url, "SREMARATHON_TOKEN": TOKEN,
                                        "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)})

    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            r = await s.call_tool("report_finding", {"incident": "via-stdio", "alerts": []})
            return names, r.is_error

    names, error = anyio.run(main)
    assert names == ISSUE_TOOLS and not error
    assert [f.incident for f in server.submissions.end().findings] == ["via-stdio"]


def test_sremarathon_mcp_without_a_run_says_what_is_missing() -> None:
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", "mcp"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}, timeout=60)
    assert proc.returncode == 2 and "SREMARATHON_MCP_URL and SREMARATHON_TOKEN not set" in proc.stderr


def test_a_lazy_server_starts_at_its_first_connection() -> None:
    game = Game("smoke", ("shop",), 300, 60, "frozen", (), "memory 2Gi")
    srv = McpServer(Endpoints("http://127.0.0.1:9", TOKEN), game, lambda a, t: (0, "", "")).start(eager=False)
    try:
        assert srv._server is None  # nothing imported or started yet: a run whose agent never connects

        async def body(s: ClientSession) -> Any:
            return [t.name for t in (await s.list_tools()).tools]

        assert set(anyio.run(_session, srv.url, TOKEN, body)) == ISSUE_TOOLS
    finally:
        srv.stop()
    never = McpServer(Endpoints("http://127.0.0.1:9", TOKEN), game, lambda a, t: (0, "", "")).start(eager=False)
    never.stop()  # and one nobody connected to stops at once
