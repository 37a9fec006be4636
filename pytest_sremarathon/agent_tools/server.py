"""The run's MCP server: the :class:`~.toolbox.ToolBox` over streamable HTTP on loopback.

Built on the official MCP Python SDK (``mcp.server.mcpserver.MCPServer``), served by uvicorn on
a thread of the marathon's process, at ``http://127.0.0.1:<port>/mcp``. Every HTTP request must
carry ``Authorization: Bearer <the agent's token>`` (401 otherwise): the same secret the
agent's kubeconfig holds, so the server is no wider a door than the API server. What the tools do
passes the policy point and is recorded because they are requests to the agent's endpoints.

Besides the tools: the resource ``sremarathon://rules`` and the prompt ``sre_marathon`` (the
rules of the game), and ``sremarathon://observation`` (the step's observation as JSON).
"""

from __future__ import annotations

import hmac
import json
import select
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Optional

from .config import PATH, SERVER_NAME, Endpoints
from .rules import Game, rules_text
from .submissions import StepSubmissions

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from .toolbox import Sandboxed, ToolBox

__all__ = ["McpServer", "TOOLS"]

#: The tools, in the order clients list them.
TOOLS = ("kubectl", "pod_logs", "promql_query", "promql_query_range", "alerts", "traces_search", "trace_get",
         "pipeline_changes", "pipeline_diff", "pipeline_revert", "pipeline_deploy", "pipeline_status",
         "report_finding", "claim_resolved")


class _BearerGate:
    """ASGI middleware: HTTP requests without the token are answered 401 (lifespan passes)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = json.dumps({"error": "unauthorized: send Authorization: Bearer <SREMARATHON_TOKEN>"}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="sremarathon"'),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


class McpServer:
    """One run's MCP server. ``start()`` binds a loopback port; ``url`` is the endpoint."""

    def __init__(self, endpoints: Endpoints, game: Game, run_sandboxed: Sandboxed) -> None:
        self.submissions = StepSubmissions()
        self.endpoints = endpoints
        self.game = game
        self._run_sandboxed = run_sandboxed
        self._token = endpoints.token
        self._sdk: Optional[tuple[ToolBox, MCPServer[Any]]] = None  # (see _build)
        self._sdk_lock = threading.Lock()
        self._server: Any = None
        self._sock: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None
        self._closing = threading.Event()
        self._wake: Optional[tuple[socket.socket, socket.socket]] = None  # stop() ends the wait for a client
        self.port = 0

    @property
    def toolbox(self) -> ToolBox:
        return self._build()[0]

    @property
    def mcp(self) -> MCPServer[Any]:
        return self._build()[1]

    def _build(self) -> tuple[ToolBox, MCPServer[Any]]:
        """The tools and the SDK's server, made once, on first use: importing the MCP SDK takes
        a second or more, which a run whose agent never connects (``start(eager=False)``) does
        not pay."""
        with self._sdk_lock:
            if self._sdk is None:
                from mcp.server.mcpserver import MCPServer

                from .toolbox import ToolBox

                toolbox = ToolBox(self.endpoints, self.submissions, self._run_sandboxed)
                mcp: MCPServer[Any] = MCPServer(SERVER_NAME, instructions=rules_text(self.game), log_level="WARNING")
                for name in TOOLS:
                    fn = getattr(toolbox, name)
                    mcp.add_tool(fn, name=name, description=" ".join((fn.__doc__ or "").split()),
                                 structured_output=False)  # plain text: what every client shows a model
                self._add_rules(mcp)
                self._sdk = (toolbox, mcp)
            return self._sdk

    def _add_rules(self, mcp: MCPServer[Any]) -> None:
        text = rules_text(self.game)

        @mcp.resource("sremarathon://rules", name="rules", description="The rules of the game: cadence, "
                           "identifiers, what is scored, the policy", mime_type="text/markdown")
        def rules() -> str:
            return text

        @mcp.resource("sremarathon://observation", name="observation",
                           description="This step's observation: time, step, alerts, new_alerts", mime_type="application/json")
        def observation() -> str:
            obs = self.submissions.observation
            return obs.model_dump_json() if obs is not None else "{}"

        @mcp.prompt(name="sre_marathon", description="Play a step of the SRE marathon: the rules and this step")
        def prompt() -> str:
            obs = self.submissions.observation
            where = f"This is step {obs.step} at {obs.time.isoformat()}." if obs is not None else ""
            return text + f"\n{where} Start with the alerts tool; report with report_finding, claim with claim_resolved."

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{PATH}"

    def start(self, eager: bool = True) -> McpServer:
        """Listen on a loopback port (``url`` is valid from here on). ``eager=False`` defers
        importing and starting the HTTP server to the first connection, which waits in the
        listen queue meanwhile: a run whose agent never speaks MCP does not pay for it."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        self._sock = sock
        self._wake = socket.socketpair()
        if eager:
            self._build()
        self._thread = threading.Thread(target=self._serve, args=(not eager,), name=f"mcp-server:{self.port}",
                                        daemon=True)
        self._thread.start()
        if eager:
            deadline = time.monotonic() + 30
            while self._server is None or not self._server.started:
                if time.monotonic() > deadline or not self._thread.is_alive():
                    raise RuntimeError("the MCP server did not start")
                time.sleep(0.02)
        return self

    def _serve(self, wait_for_a_client: bool) -> None:
        sock, wake = self._sock, self._wake
        assert sock is not None and wake is not None
        while wait_for_a_client and not self._closing.is_set():
            readable, _, _ = select.select([sock, wake[0]], [], [])
            if sock in readable:
                break
        if self._closing.is_set():
            return
        import uvicorn  # the SDK's own server dependency

        app = _BearerGate(self.mcp.streamable_http_app(streamable_http_path=PATH), self._token)
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
        if self._closing.is_set():
            return
        self._server.run(sockets=[sock])

    def stop(self) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._wake is not None:
            self._wake[1].send(b"\0")  # (a wait for the first client returns now, not at a poll)
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._wake is not None:
            for end in self._wake:
                end.close()
            self._wake = None
