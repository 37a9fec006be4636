"""A scripted MCP-client agent (no LLM): run once per step by ``--agent-exec``.

It knows nothing of this project but its MCP tools: it connects to ``SREMARATHON_MCP_URL`` with
the official SDK's client and the bearer token, asks the ``alerts`` tool for what is firing, and
per alerting service reports a finding and reverts the service's latest change through
``pipeline_revert`` (once), keeping what it did in a file in its workspace (the working
directory), and claims an incident resolved once its alerts are. A rollback agent, spelled in
tool calls.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

STATE = Path("mcp-rollback.json")


def _text(result) -> str:
    if result.is_error:
        raise RuntimeError(result.content[0].text if result.content else "tool error")
    return result.content[0].text


async def step() -> None:
    state = json.loads(STATE.read_text()) if STATE.exists() else {"reverted": {}, "claimed": []}
    headers = {"Authorization": f"Bearer {os.environ['SREMARATHON_TOKEN']}"}
    async with streamable_http_client(os.environ["SREMARATHON_MCP_URL"],
                                      http_client=create_mcp_http_client(headers=headers)) as (read, write):
        async with ClientSession(read, write) as mcp:
            await mcp.initialize()
            every = json.loads(_text(await mcp.call_tool("alerts", {"status": "all", "limit": 5000})))["alerts"]
            by_service: dict[str, list[dict]] = {}
            for a in every:
                labels = a["labels"]
                if labels.get("app") and labels.get("service"):
                    by_service.setdefault(f"{labels['app']}/{labels['service']}", []).append(a)
            for key, alerts in sorted(by_service.items()):
                if key in state["claimed"]:
                    continue
                app, service = key.split("/", 1)
                firing = [a for a in alerts if a["status"] == "firing"]
                if not firing:
                    if key in state["reverted"]:
                        await mcp.call_tool("claim_resolved", {"incident": key})
                        state["claimed"].append(key)
                    continue
                change = state["reverted"].get(key)
                if change is None:
                    changes = json.loads(_text(await mcp.call_tool(
                        "pipeline_changes", {"app": app, "service": service, "limit": 1})))
                    if changes:
                        change = changes[-1]["id"]
                        result = await mcp.call_tool("pipeline_revert", {"app": app, "change": f"change:{change}"})
                        print(f"revert {key} {change}: {result.content[0].text[:200]}", file=sys.stderr)
                        state["reverted"][key] = change
                await mcp.call_tool("report_finding", {
                    "incident": key, "alerts": [a["id"] for a in firing], "component": f"service:{key}",
                    **({"cause": f"change:{change}"} if change else {})})
    STATE.write_text(json.dumps(state))


if __name__ == "__main__":
    anyio.run(step)
