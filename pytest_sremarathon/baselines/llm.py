"""LLMAgent: a tool-using agent on any OpenAI-compatible ``/v1/chat/completions`` endpoint.

Its tools are the run's MCP tools (issue 17: one vocabulary for every agent the project ships):
each step it connects to ``env.mcp_url`` with the official MCP SDK's client and the run's token,
offers the model exactly the tools the server lists (their names, descriptions and JSON
schemas), and runs the model's calls there: ``kubectl``, PromQL, alerts, traces, pod logs, the
pipeline, ``report_finding``, ``claim_resolved`` (which become the step's report). The model
endpoint is whatever ``SREMARATHON_LLM_URL`` names; nothing is sent anywhere else, and requests
go out without any proxy from the environment.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import anyio
import anyio.to_thread
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from pytest_sremarathon.agent.protocol import Claim, Environment, Finding, Observation, Report

from .journal import Journal
from .times import iso, utc

_LLM_SYSTEM = """You are an autonomous site-reliability engineer on call for a Kubernetes cluster with \
two availability zones running these applications (one namespace each): {apps}.
Every few minutes you get the alerts that changed. Alerts are noisy: most are not actionable. \
Investigate with the tools, find root causes, repair them, and report: report_finding records an \
incident (the alert ids it explains, the root-cause component, the cause), claim_resolved says it is \
repaired - only once it is healthy again. Most faults arrive as code or configuration changes; \
reverting the change that caused one through the pipeline is the usual repair for those. Be brief.

{rules}"""


@dataclass
class LLMState:
    """What the agent remembers between steps (and keeps in its journal)."""

    findings: dict[str, Finding] = field(default_factory=dict)
    """The latest finding the model reported for each of its incidents."""
    claimed: list[str] = field(default_factory=list)
    """Incidents the model has claimed resolved; they are not reported again."""
    notes: str = ""
    """The model's final answer of the last step, shown to it at the next."""
    calls: int = 0
    """Model calls made so far."""

    def to_json(self) -> dict[str, Any]:
        return {"findings": {k: f.model_dump(mode="json") for k, f in self.findings.items()},
                "claimed": self.claimed, "notes": self.notes, "calls": self.calls}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LLMState:
        return cls(findings={k: Finding.model_validate(v) for k, v in (data.get("findings") or {}).items()},
                   claimed=list(data.get("claimed") or []), notes=str(data.get("notes") or ""),
                   calls=int(data.get("calls") or 0))


class LLMError(Exception):
    """The model endpoint failed or answered something that is not a chat completion."""


class LLMAgent:
    """An SRE agent driven by a language model behind an OpenAI-compatible chat endpoint.

    Each step it opens a conversation (system prompt with the server's rules of the game, its own
    notes from the previous step, the incidents it reported, the alerts that changed) and lets the
    model call the run's MCP tools until it answers without a tool call, :attr:`max_turns` is
    reached, or the step's time runs out. The findings it reported persist across steps (in the
    journal) and are reported every step until claimed.

    Settings (constructor arguments, then class attributes of a subclass, then environment):
    ``url`` (``SREMARATHON_LLM_URL``: the endpoint, ``…/v1`` or the full
    ``…/v1/chat/completions``), ``model`` (``SREMARATHON_LLM_MODEL``), ``key``
    (``SREMARATHON_LLM_KEY``, sent as a bearer token), ``step_seconds``
    (``SREMARATHON_LLM_STEP_SECONDS``, wall seconds per step, default 45). The agent host
    passes ``SREMARATHON_LLM_*`` variables through to the agent's process.
    """

    JOURNAL = "llm-agent.json"
    url: Optional[str] = None
    model: Optional[str] = None
    key: Optional[str] = None
    step_seconds: float = 45.0
    max_turns: int = 12
    temperature: float = 0.0
    max_tool_output: int = 6000

    def __init__(self, url: Optional[str] = None, model: Optional[str] = None, key: Optional[str] = None,
                 step_seconds: Optional[float] = None) -> None:
        env = os.environ
        self.url = url or self.url or env.get("SREMARATHON_LLM_URL")
        self.model = model or self.model or env.get("SREMARATHON_LLM_MODEL") or "gpt-4o-mini"
        self.key = key or self.key or env.get("SREMARATHON_LLM_KEY")
        self.step_seconds = float(step_seconds or env.get("SREMARATHON_LLM_STEP_SECONDS") or self.step_seconds)
        self._journal = Journal(self.JOURNAL)
        self.state = LLMState()
        self._apps: list[str] = []
        self._mcp_url: Optional[str] = None
        self._token: Optional[str] = None
        self._claims: list[str] = []
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:  # never show the key
        return f"LLMAgent(url={self.url!r}, model={self.model!r})"

    @property
    def endpoint(self) -> str:
        if not self.url:
            raise LLMError("LLMAgent needs an endpoint: set SREMARATHON_LLM_URL (e.g. http://127.0.0.1:8000/v1)")
        url = self.url.rstrip("/")
        return url if url.endswith("/chat/completions") else url + "/chat/completions"

    # -- contract ---------------------------------------------------------------------------
    def setup(self, env: Environment) -> None:
        self.endpoint  # fail setup with a clear message when unconfigured  # noqa: B018
        if not env.mcp_url or not env.token:
            raise LLMError("LLMAgent needs the run's MCP server (env.mcp_url): this run has none")
        self._apps = list(env.apps)
        self._mcp_url, self._token = env.mcp_url, env.token
        self._restore(Path(env.workspace))

    def _restore(self, workspace: Path) -> None:
        state = self._journal.load(workspace)
        if state is not None:
            self.state = LLMState.from_json(state)

    def step(self, obs: Observation) -> Report:
        if not self._journal.bound:
            self._restore(Path(obs.workspace))
        self._claims = []
        notes: list[str] = []
        try:
            final = anyio.run(self._converse, obs, notes)
        except LLMError as exc:
            notes.append(str(exc))
            final = ""
        self.state.notes = final[:4000]
        findings = [f for k, f in sorted(self.state.findings.items())
                    if k not in self.state.claimed or k in self._claims]
        report = Report(findings=findings, claims=[Claim(incident=k) for k in self._claims],
                        notes=("\n".join(notes) + ("\n" + final if final else ""))[:20000])
        self._journal.save(self.state.to_json())
        return report

    # -- the conversation -------------------------------------------------------------------
    async def _converse(self, obs: Observation, notes: list[str]) -> str:
        """One step's conversation, with the MCP session open throughout."""
        if not self._mcp_url or not self._token:
            raise LLMError("LLMAgent.step before setup: no MCP server to use")
        deadline = time.monotonic() + self.step_seconds
        headers = {"Authorization": f"Bearer {self._token}"}
        try:
            async with streamable_http_client(self._mcp_url, http_client=create_mcp_http_client(headers=headers)) \
                    as (read, write), ClientSession(read, write) as session:
                init = await session.initialize()
                listed = await session.list_tools()
                tools = [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                           "parameters": t.input_schema}} for t in listed.tools]
                system = _LLM_SYSTEM.format(apps=", ".join(self._apps) or "(see namespaces)",
                                            rules=init.instructions or "")
                messages: list[dict[str, Any]] = [{"role": "system", "content": system},
                                                  {"role": "user", "content": self._briefing(obs)}]
                return await self._turns(session, tools, messages, deadline, notes)
        except (OSError, RuntimeError) as exc:  # the server unreachable, the session broken
            raise LLMError(f"MCP session failed: {type(exc).__name__}: {exc}") from None

    async def _turns(self, session: ClientSession, tools: list[dict[str, Any]], messages: list[dict[str, Any]],
                     deadline: float, notes: list[str]) -> str:
        for turn in range(self.max_turns):
            if time.monotonic() > deadline:
                notes.append(f"step time ({self.step_seconds:g} s) used up after {turn} model call(s)")
                return ""
            try:
                message = await anyio.to_thread.run_sync(self._chat, messages, tools, deadline)
            except LLMError as exc:
                notes.append(f"model call failed: {exc}")
                return ""
            calls = message.get("tool_calls") or []
            messages.append({"role": "assistant", "content": message.get("content") or "",
                             **({"tool_calls": calls} if calls else {})})
            if not calls:
                return str(message.get("content") or "")
            for call in calls:
                fn = call.get("function") or {}
                name = str(fn.get("name") or "")
                result = await self._call(session, name, fn.get("arguments"))
                notes.append(f"{name}({_brief(fn.get('arguments'))}) -> {_brief(result, 160)}")
                messages.append({"role": "tool", "tool_call_id": str(call.get("id") or name),
                                 "content": result[: self.max_tool_output]})
        return ""

    async def _call(self, session: ClientSession, name: str, raw_args: Any) -> str:
        """One tool call on the MCP server; what the model reads back (errors included)."""
        try:
            args = json.loads(raw_args or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments are not a JSON object")
        except (ValueError, TypeError) as exc:
            return f"error: bad arguments for {name}: {exc}"
        result = await session.call_tool(name, args)
        text = "\n".join(getattr(c, "text", "") for c in result.content) or "(no output)"
        if result.is_error:
            return f"error: {text}"
        # Remember what the model reported and claimed: the next steps' briefings list them,
        # and open findings are reported again until claimed.
        if name == "report_finding":
            try:
                finding = Finding.model_validate({k: args[k] for k in Finding.model_fields if k in args})
                self.state.findings[finding.incident] = finding
            except ValueError:
                pass
        elif name == "claim_resolved":
            incident = str(args.get("incident") or "")
            if incident and incident not in self._claims:
                self._claims.append(incident)
            if incident and incident not in self.state.claimed:
                self.state.claimed.append(incident)
        return text

    def _briefing(self, obs: Observation) -> str:
        firing = [a for a in obs.alerts if a.status == "firing"]
        lines = [f"Time {iso(obs.time)} (step {obs.step}). {len(firing)} alert(s) firing in total."]
        if self.state.notes:
            lines.append("Your notes from the last step: " + self.state.notes)
        open_findings = {k: v for k, v in self.state.findings.items() if k not in self.state.claimed}
        if open_findings:
            lines.append("Incidents you reported and have not claimed resolved:")
            for k, v in sorted(open_findings.items()):
                lines.append(f"- {k}: component={v.component} cause={v.cause} alerts={len(v.alerts)}")
        lines.append("Alerts that changed since the last step:" if obs.new_alerts else "No alert changed.")
        for a in sorted(obs.new_alerts, key=lambda a: (utc(a.starts_at), a.id))[:60]:
            labels = ",".join(f"{k}={v}" for k, v in sorted(a.labels.items()))
            lines.append(f"- {a.id} {a.status} {a.severity} {a.name} [{labels}] "
                         f"since {iso(a.starts_at)}: {a.annotations.get('summary', '')}")
        if len(obs.new_alerts) > 60:
            lines.append(f"… and {len(obs.new_alerts) - 60} more")
        return "\n".join(lines)

    def _chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], deadline: float) -> dict[str, Any]:
        body = {"model": self.model, "messages": messages, "tools": tools, "tool_choice": "auto",
                "temperature": self.temperature}
        req = urllib.request.Request(self.endpoint, data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if self.key:
            req.add_header("Authorization", f"Bearer {self.key}")
        timeout = max(1.0, deadline - time.monotonic())
        self.state.calls += 1
        try:
            with self._opener.open(req, timeout=timeout) as resp:
                doc = json.loads(resp.read(16 * 1024 * 1024))
        except urllib.error.HTTPError as exc:
            detail = exc.read(2000).decode("utf-8", "replace")
            raise LLMError(f"HTTP {exc.code}: {detail.strip()[:300]}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise LLMError(f"{type(exc).__name__}: {exc}") from None
        try:
            return dict(doc["choices"][0]["message"])
        except (KeyError, IndexError, TypeError):
            raise LLMError(f"answer without choices[0].message: {str(doc)[:200]}") from None


def _brief(value: Any, n: int = 100) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"
