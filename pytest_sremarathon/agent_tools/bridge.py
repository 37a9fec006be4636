"""``sremarathon mcp``: the run's MCP server over stdio, for clients that only spawn servers.

A transport relay, not a second server: JSON-RPC messages read on stdin go to the run's
streamable-HTTP endpoint (``SREMARATHON_MCP_URL``, with ``Authorization: Bearer
$SREMARATHON_TOKEN``) and its messages come back on stdout, so the tools, the policy point, the
recording and the step's report are the run's own. It runs wherever the client runs it: inside
the agent's sandbox, as a child of the agent.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import anyio
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared._httpx_utils import create_mcp_http_client


class BridgeError(Exception):
    """The relay cannot start (what is missing, in one line)."""


async def _pump(source: Any, sink: Any) -> None:
    """Forward every message; a transport's exceptions (a malformed line, a failed POST) are
    dropped here: the peer sees them as a request that got no answer, or an error reply."""
    async for message in source:
        if isinstance(message, Exception):
            print(f"sremarathon mcp: {type(message).__name__}: {message}", file=sys.stderr)
            continue
        await sink.send(message)


async def relay(url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with streamable_http_client(url, http_client=create_mcp_http_client(headers=headers)) as (h_read, h_write), \
            stdio_server() as (s_read, s_write), anyio.create_task_group() as tg:
        async def up() -> None:
            await _pump(s_read, h_write)
            tg.cancel_scope.cancel()  # stdin closed: the client is gone

        tg.start_soon(up)
        tg.start_soon(_pump, h_read, s_write)


def main(url: Optional[str] = None, token: Optional[str] = None) -> int:
    url = url or os.environ.get("SREMARATHON_MCP_URL")
    token = token or os.environ.get("SREMARATHON_TOKEN")
    if not url or not token:
        missing = " and ".join(n for n, v in (("SREMARATHON_MCP_URL", url), ("SREMARATHON_TOKEN", token)) if not v)
        raise BridgeError(f"sremarathon mcp: {missing} not set (an agent of a running marathon has them; "
                          "or pass --url and --token-file)")
    anyio.run(relay, url, token)
    return 0
