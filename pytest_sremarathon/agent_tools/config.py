"""Where agents find the run's MCP server: the ``mcpServers`` file (``SREMARATHON_MCP_CONFIG``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

SERVER_NAME = "sremarathon"
PATH = "/mcp"


@dataclass(frozen=True)
class Endpoints:
    """Where the tools send their requests, and as whom (here, not in :mod:`.toolbox`, which
    imports the MCP SDK: the marathon names them before it knows whether anyone connects)."""

    server: str  # the agent's Kubernetes API and /sremarathon/v1/ (plain HTTP on loopback)
    token: str
    prometheus: Optional[str] = None
    jaeger: Optional[str] = None


def write_mcp_config(path: Path, url: str, token: str) -> Path:
    """The ``mcpServers`` file MCP-capable command-line agents read (Claude Code's
    ``--mcp-config``, Cursor's and Gemini CLI's settings): one streamable-HTTP server with the
    bearer header. Written where only the agent reads it (its workspace), mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"mcpServers": {SERVER_NAME: {"type": "http", "url": url,
                                        "headers": {"Authorization": f"Bearer {token}"}}}}
    path.write_text(json.dumps(doc, indent=2) + "\n")
    path.chmod(0o600)
    return path
