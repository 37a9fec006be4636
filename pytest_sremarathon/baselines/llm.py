"""LLMAgent: a tool-using agent on any OpenAI-compatible ``/v1/chat/completions`` endpoint.

This module holds the agent, its system prompt and its tools (``kubectl``, the pipeline,
findings and claims). The endpoint is whatever ``SREMARATHON_LLM_URL`` names; nothing is sent
anywhere else, and requests go out without any proxy from the environment.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pytest_sremarathon.agent.protocol import Claim, Environment, Finding, Observation, Report, ServiceError

from .journal import Journal
from .times import iso, utc

#: kubectl verbs the LLM agent may run: reads, plus the mutating verbs an SRE uses. Everything
#: mutating still passes the marathon's policy point.
KUBECTL_READ = ("get", "describe", "logs", "top", "events", "explain", "api-resources", "api-versions",
                "version", "cluster-info", "auth")
KUBECTL_WRITE = ("rollout", "scale", "cordon", "uncordon", "drain", "delete", "patch", "set", "annotate", "label")
#: Flags that would point kubectl somewhere else or act as someone else.
KUBECTL_FORBIDDEN_FLAGS = ("--kubeconfig", "--server", "-s", "--token", "--as", "--as-group", "--as-uid",
                           "--certificate-authority", "--client-certificate", "--client-key", "--username",
                           "--password", "--context", "--cluster", "--user", "--insecure-skip-tls-verify")

_LLM_SYSTEM = """You are an autonomous site-reliability engineer on call for a Kubernetes cluster with \
two availability zones running these applications (one namespace each): {apps}.
Every few minutes you get the alerts that changed. Alerts are noisy: most are not actionable. \
Investigate with tools, find root causes, repair them, and report.

Tools:
- kubectl: run a kubectl command (without the word "kubectl"), e.g. "get pods -n shop -o wide", \
"logs -n shop deploy/cart --since=10m", "top pods -n shop", "rollout restart deployment/cart -n shop", \
"cordon worker-a1", "drain worker-a1 --ignore-daemonsets --delete-emptydir-data", \
"scale deployment/frontend -n shop --replicas=6", "set env deployment/payment -n shop KEY=value".
- pipeline_changes / pipeline_revert / pipeline_deploy: the deploy pipeline of an app. Most faults \
arrive as code or configuration changes; reverting the change that caused a fault (through the \
pipeline) is the usual repair for those.
- report_finding: record an incident: the ids of the alerts it explains, the root-cause component \
("service:<app>/<service>", "node:<node>", "zone:<zone>" or "external:<name>") and the cause \
("change:<change id>" when a pipeline change caused it).
- claim_resolved: say an incident is resolved - only once you repaired it and it is healthy again.

Never delete namespaces or nodes, never touch the monitoring or sremarathon-system namespaces, never \
scale everything to zero and never read Secrets: those are refused and recorded. Be brief."""

_LLM_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "kubectl", "description": "Run kubectl against the cluster and return its output.",
        "parameters": {"type": "object", "properties": {
            "command": {"type": "string", "description": "the kubectl arguments, e.g. 'get pods -A'"}},
            "required": ["command"]}}},
    {"type": "function", "function": {
        "name": "pipeline_changes", "description": "List the pipeline changes of an app (id, service, kind, "
                                                   "author, message, time, diff), newest last.",
        "parameters": {"type": "object", "properties": {"app": {"type": "string"},
                                                         "limit": {"type": "integer", "default": 15}},
                       "required": ["app"]}}},
    {"type": "function", "function": {
        "name": "pipeline_revert", "description": "Revert a change of an app and deploy the result.",
        "parameters": {"type": "object", "properties": {"app": {"type": "string"}, "change_id": {"type": "string"}},
                       "required": ["app", "change_id"]}}},
    {"type": "function", "function": {
        "name": "pipeline_deploy", "description": "Deploy a ref (a change id, a commit, or HEAD) of an app.",
        "parameters": {"type": "object", "properties": {"app": {"type": "string"}, "ref": {"type": "string"}},
                       "required": ["app", "ref"]}}},
    {"type": "function", "function": {
        "name": "report_finding", "description": "Record (or update) an incident: its alerts, root-cause "
                                                 "component and cause.",
        "parameters": {"type": "object", "properties": {
            "incident": {"type": "string", "description": "your own key for the incident"},
            "alerts": {"type": "array", "items": {"type": "string"}},
            "component": {"type": "string"}, "cause": {"type": "string"},
            "confidence": {"type": "number"}}, "required": ["incident", "alerts"]}}},
    {"type": "function", "function": {
        "name": "claim_resolved", "description": "Claim that an incident you reported is resolved.",
        "parameters": {"type": "object", "properties": {"incident": {"type": "string"}},
                       "required": ["incident"]}}},
]


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

    Each step it opens a conversation (system prompt, its own notes from the previous step, the
    incidents it reported, the alerts that changed) and lets the model call tools until it
    answers without a tool call, :attr:`max_turns` is reached, or the step's time runs out.

    Tools: ``kubectl`` (the real binary, with the run's kubeconfig; the read verbs plus
    :data:`KUBECTL_WRITE`), ``pipeline_changes``, ``pipeline_revert``, ``pipeline_deploy``,
    ``report_finding`` and ``claim_resolved``. Findings persist across steps (in the journal)
    and are reported every step until claimed.

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
        self._kubeconfig: Optional[Path] = None
        self._claims: list[str] = []
        self._obs: Optional[Observation] = None
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
        self._apps = list(env.apps)
        self._kubeconfig = Path(env.kubeconfig)
        self._restore(Path(env.workspace))

    def _restore(self, workspace: Path) -> None:
        state = self._journal.load(workspace)
        if state is not None:
            self.state = LLMState.from_json(state)

    def step(self, obs: Observation) -> Report:
        if not self._journal.bound:
            self._restore(Path(obs.workspace))
        if self._kubeconfig is None:
            self._kubeconfig = Path(obs.kubeconfig)
        self._claims = []
        self._obs = obs
        deadline = time.monotonic() + self.step_seconds
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": _LLM_SYSTEM.format(apps=", ".join(self._apps) or "(see namespaces)")},
            {"role": "user", "content": self._briefing(obs)},
        ]
        notes: list[str] = []
        final = ""
        for turn in range(self.max_turns):
            if time.monotonic() > deadline:
                notes.append(f"step time ({self.step_seconds:g} s) used up after {turn} model call(s)")
                break
            try:
                message = self._chat(messages, deadline)
            except LLMError as exc:
                notes.append(f"model call failed: {exc}")
                break
            calls = message.get("tool_calls") or []
            messages.append({"role": "assistant", "content": message.get("content") or "",
                             **({"tool_calls": calls} if calls else {})})
            if not calls:
                final = str(message.get("content") or "")
                break
            for call in calls:
                fn = (call.get("function") or {})
                name = str(fn.get("name") or "")
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                    if not isinstance(args, dict):
                        raise ValueError("arguments are not a JSON object")
                    result = self._tool(name, args)
                except (ValueError, TypeError) as exc:
                    result = f"error: bad arguments for {name}: {exc}"
                notes.append(f"{name}({_brief(fn.get('arguments'))}) -> {_brief(result, 160)}")
                messages.append({"role": "tool", "tool_call_id": str(call.get("id") or name),
                                 "content": result[: self.max_tool_output]})
        self.state.notes = final[:4000]
        findings = []
        for key, finding in sorted(self.state.findings.items()):
            if key in self.state.claimed and key not in self._claims:
                continue
            findings.append(finding)
        report = Report(findings=findings, claims=[Claim(incident=k) for k in self._claims],
                        notes=("\n".join(notes) + ("\n" + final if final else ""))[:20000])
        self._journal.save(self.state.to_json())
        return report

    # -- the model --------------------------------------------------------------------------
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

    def _chat(self, messages: list[dict[str, Any]], deadline: float) -> dict[str, Any]:
        body = {"model": self.model, "messages": messages, "tools": _LLM_TOOLS, "tool_choice": "auto",
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

    # -- tools ------------------------------------------------------------------------------
    def _tool(self, name: str, args: dict[str, Any]) -> str:
        obs = self._obs
        assert obs is not None, "tools run inside a step"
        try:
            if name == "kubectl":
                return self._kubectl(str(args.get("command") or ""))
            if name == "pipeline_changes":
                changes = obs.pipeline.changes(str(args["app"]))
                limit = int(args.get("limit") or 15)
                return json.dumps([{"id": c.id, "service": c.service, "kind": c.kind, "author": c.author,
                                    "message": c.message, "time": iso(c.time), "diff": c.diff[:1500]}
                                   for c in changes[-limit:]], indent=1)
            if name == "pipeline_revert":
                change = obs.pipeline.revert(str(args["app"]), str(args["change_id"]))
                return f"reverted as change {change.id} ({change.message}); deployed"
            if name == "pipeline_deploy":
                return json.dumps(obs.pipeline.deploy(str(args["app"]), str(args.get("ref") or "HEAD")))
            if name == "report_finding":
                finding = Finding(incident=str(args["incident"]), alerts=[str(a) for a in args.get("alerts") or []],
                                  component=args.get("component") or None, cause=args.get("cause") or None,
                                  confidence=float(args.get("confidence", 1.0)))
                self.state.findings[finding.incident] = finding
                return f"recorded incident {finding.incident}"
            if name == "claim_resolved":
                incident = str(args["incident"])
                if incident not in self.state.findings:
                    return f"error: no incident {incident!r}; report it with report_finding first"
                if incident not in self._claims:
                    self._claims.append(incident)
                if incident not in self.state.claimed:
                    self.state.claimed.append(incident)
                return f"claimed {incident} resolved"
        except ServiceError as exc:
            return f"error: {exc}"
        except KeyError as exc:
            return f"error: missing argument {exc}"
        except ValueError as exc:
            return f"error: {str(exc).splitlines()[0]}"
        return f"error: no tool named {name!r}"

    def _kubectl(self, command: str) -> str:
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return f"error: cannot parse the command: {exc}"
        if argv[:1] == ["kubectl"]:
            argv = argv[1:]
        if not argv:
            return "error: empty command"
        verb = argv[0]
        if verb not in KUBECTL_READ + KUBECTL_WRITE:
            return (f"error: kubectl {verb} is not available here; use one of "
                    f"{', '.join(KUBECTL_READ + KUBECTL_WRITE)}")
        for a in argv:
            flag = a.split("=", 1)[0]
            if flag in KUBECTL_FORBIDDEN_FLAGS:
                return f"error: the flag {flag} is not allowed"
        binary = shutil.which("kubectl")
        if binary is None:
            return "error: kubectl is not installed"
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": os.environ.get("HOME", "/tmp"),
               "KUBECONFIG": str(self._kubeconfig or ""), "LANG": "C.UTF-8"}
        try:
            proc = subprocess.run([binary, *argv], capture_output=True, text=True, timeout=30, env=env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return "error: kubectl timed out after 30 s"
        except OSError as exc:
            return f"error: cannot run kubectl: {exc}"
        out = proc.stdout
        if proc.returncode != 0:
            out += ("\n" if out else "") + f"(exit {proc.returncode}) " + proc.stderr.strip()
        out = out.strip() or "(no output)"
        if len(out) > self.max_tool_output:
            out = out[: self.max_tool_output] + f"\n… ({len(out) - self.max_tool_output} more characters)"
        return out


def _brief(value: Any, n: int = 100) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


