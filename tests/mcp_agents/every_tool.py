"""A scripted MCP-client agent that calls every tool once, at the first step where the shop's
pipeline has a change to look at, and reports what each answered in that step's notes
(``{"tool": [is_error, first characters]}``); other steps do nothing. Run by ``--agent-exec``;
the SDK's client, no LLM."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main() -> None:
    done = Path("every-tool.done")
    if done.exists():
        return
    config = json.load(open(os.environ["SREMARATHON_MCP_CONFIG"]))["mcpServers"]["sremarathon"]
    seen: dict[str, list] = {}
    async with streamable_http_client(config["url"], http_client=create_mcp_http_client(
            headers=config["headers"])) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        changes = json.loads((await mcp.call_tool("pipeline_changes", {"app": "shop", "limit": 3})).content[0].text)
        if not changes:
            return
        done.write_text("x")

        async def call(key: str, tool: str, **args) -> str:
            r = await mcp.call_tool(tool, args)
            text = r.content[0].text if r.content else ""
            seen[key] = [r.is_error, text[:600]]
            return text

        pods = (await call("kubectl_get", "kubectl", command="get pods -n shop -o name")).split()
        cart = next(p.split("/", 1)[1] for p in pods if p.startswith("pod/cart-"))
        await call("pod_logs", "pod_logs", namespace="shop", pod=cart, tail_lines=5)
        await call("promql_query", "promql_query", query='sum by (service) (up{namespace="shop"})')
        await call("promql_query_range", "promql_query_range", query='sum(rate(http_requests_total{namespace="shop"}[5m]))',
                   step="5m")
        await call("alerts", "alerts", status="all")
        found = json.loads(await call("traces_search", "traces_search", service="service:shop/cart", lookback="40m")
                           or "[]")
        trace_id = found[0]["trace_id"] if isinstance(found, list) and found else "0123456789abcdef"
        await call("trace_get", "trace_get", trace_id=trace_id)
        await call("trace_unknown", "trace_get", trace_id="0123456789abcdef")
        await call("pipeline_changes", "pipeline_changes", app="shop", limit=3)
        await call("pipeline_diff", "pipeline_diff", app="shop", change=f"change:{changes[-1]['id']}")
        await call("pipeline_status", "pipeline_status", app="shop")
        await call("pipeline_deploy", "pipeline_deploy", app="shop", ref="HEAD")
        await call("pipeline_revert", "pipeline_revert", app="shop", change="no-such-change")
        await call("kubectl_annotate", "kubectl", command="annotate deployment/cart -n shop sremarathon.test/seen=1")
        await call("kubectl_denied", "kubectl", command="delete namespace shop")
        await call("report_finding", "report_finding", incident="probe", alerts=[], component="service:shop/cart")
        await call("claim_resolved", "claim_resolved", incident="probe")
    if seen:
        print(json.dumps({"notes": json.dumps(seen)}))


anyio.run(main)
