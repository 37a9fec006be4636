"""Reference agents, from the floor of the scoreboard to a capable heuristic SRE.

Run any of them with ``--agent=pytest_sremarathon.baselines:<Name>``:

==================  ==========================================================================
``NoopAgent``        does nothing and says nothing (the floor: scores 0)
``RollbackAgent``    one incident per alerting service; reverts that service's latest change
``RestartAgent``     one incident per alerting service; ``rollout restart`` of its deployment
``ClaimEverything``  groups nothing, repairs nothing, claims every alert's incident resolved at
                     once: the *declared-done gap* made visible
``HeuristicSRE``     reads the cluster like an on-call engineer: verifies alerts against
                     telemetry, infers the call graph from pod logs, localizes the upstream-most
                     failing component (service, node, zone or external API), picks the repair
                     by symptom (revert the suspect change, cordon and drain, restart, scale,
                     switch on a fallback), checks that it worked and escalates when it did not
``LLMAgent``         a tool-using agent for any OpenAI-compatible ``/v1/chat/completions``
                     endpoint: ``kubectl``, the pipeline, findings and claims as tools
==================  ==========================================================================

Adversarial baselines (:mod:`pytest_sremarathon.baselines.adversarial`), agents that try to
game the score without diagnosing or repairing; the test suite bounds what each earns:

======================  ======================================================================
``SprayComponents``      one finding per candidate component (every deployment of the app,
                         every node, every zone) for each alerting service; no actions
``SprayChanges``         one finding per pipeline change of the app in the last 3 virtual
                         hours (``cause="change:<id>"``); no actions
``RotateCandidates``     one finding per alerting service per step, naming a different
                         candidate component each step; no actions
``TouchWithoutFixing``   the component spray, plus metadata-only patches (an annotation, a
                         label) on every Deployment and Node each step; repairs nothing
``SprayAlerts``          correlation gaming: one finding with every alert id seen, plus one per
                         firing alert padded with 5 random other alert ids
``RestartEverything``    ``rollout restart`` of every Deployment in every alerting namespace
                         each step, and every incident claimed resolved
======================  ======================================================================

They use nothing but the public contract (:mod:`pytest_sremarathon.agent.protocol`) and the
Kubernetes API through the official ``kubernetes`` client (or the real ``kubectl``), exactly
like a third-party agent: no private import of the marathon's internals. Each keeps its state
on the instance (the agent process persists between steps) and in a JSON journal in the
workspace, so a restarted process carries on where the last one stopped.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Optional

from pytest_sremarathon.agent.protocol import (
    Alert,
    Change,
    Claim,
    Environment,
    Finding,
    Observation,
    PipelineError,
    Report,
    ServiceError,
)
from pytest_sremarathon.baselines.alerts import alert_service as _alert_service
from pytest_sremarathon.baselines.alerts import latest_alerts as _latest_alerts
from pytest_sremarathon.baselines.kube_client import APP_LABEL, RESTARTED_AT, ZONE_LABEL, KubeError  # noqa: F401
from pytest_sremarathon.baselines.kube_client import KubeClient as _Kube
from pytest_sremarathon.baselines.times import iso as _iso
from pytest_sremarathon.baselines.times import parse_time as _parse_time
from pytest_sremarathon.baselines.times import utc as _utc
from pytest_sremarathon.baselines.restart import RestartAgent  # noqa: F401
from pytest_sremarathon.baselines.rollback import RollbackAgent  # noqa: F401
from pytest_sremarathon.baselines.heuristic import HeuristicSRE  # noqa: F401
from pytest_sremarathon.baselines.simple import ClaimEverything, NoopAgent  # noqa: F401

__all__ = ["NoopAgent", "RollbackAgent", "RestartAgent", "ClaimEverything", "HeuristicSRE", "LLMAgent",
           # adversarial baselines (pytest_sremarathon.baselines.adversarial, re-exported at the end)
           "SprayComponents", "SprayChanges", "RotateCandidates", "TouchWithoutFixing", "SprayAlerts",
           "RestartEverything"]


# =============================================================================================
# The workspace journal (HeuristicSRE and LLMAgent; the others use journal.Journal)
# =============================================================================================


class _Journal:
    """A JSON file in the workspace holding an agent's state between process incarnations."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path: Optional[Path] = None

    def load(self, workspace: Path) -> Optional[dict[str, Any]]:
        self.path = Path(workspace) / self.name
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def save(self, state: dict[str, Any]) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(state, sort_keys=True, default=str))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a convenience: the in-memory state carries on


# =============================================================================================
# LLMAgent: a tool-using agent on any OpenAI-compatible chat endpoint
# =============================================================================================

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


class LLMError(Exception):
    pass


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
        self._journal = _Journal(self.JOURNAL)
        self.state: dict[str, Any] = {"version": 1, "findings": {}, "claimed": [], "notes": "", "calls": 0}
        self._apps: list[str] = []
        self._kubeconfig: Optional[Path] = None
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
        self._apps = list(env.apps)
        self._kubeconfig = Path(env.kubeconfig)
        state = self._journal.load(Path(env.workspace))
        if state and state.get("version") == 1:
            self.state = state

    def step(self, obs: Observation) -> Report:
        if self._journal.path is None:
            self._journal.load(Path(obs.workspace))
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
        self.state["notes"] = final[:4000]
        findings = []
        for key, fd in sorted(self.state["findings"].items()):
            if key in self.state["claimed"] and key not in self._claims:
                continue
            findings.append(Finding.model_validate(fd))
        report = Report(findings=findings, claims=[Claim(incident=k) for k in self._claims],
                        notes=("\n".join(notes) + ("\n" + final if final else ""))[:20000])
        self._journal.save(self.state)
        return report

    # -- the model --------------------------------------------------------------------------
    def _briefing(self, obs: Observation) -> str:
        firing = [a for a in obs.alerts if a.status == "firing"]
        lines = [f"Time {_iso(obs.time)} (step {obs.step}). {len(firing)} alert(s) firing in total."]
        if self.state.get("notes"):
            lines.append("Your notes from the last step: " + self.state["notes"])
        open_findings = {k: v for k, v in self.state["findings"].items() if k not in self.state["claimed"]}
        if open_findings:
            lines.append("Incidents you reported and have not claimed resolved:")
            for k, v in sorted(open_findings.items()):
                lines.append(f"- {k}: component={v.get('component')} cause={v.get('cause')} "
                             f"alerts={len(v.get('alerts') or [])}")
        lines.append("Alerts that changed since the last step:" if obs.new_alerts else "No alert changed.")
        for a in sorted(obs.new_alerts, key=lambda a: (_utc(a.starts_at), a.id))[:60]:
            labels = ",".join(f"{k}={v}" for k, v in sorted(a.labels.items()))
            lines.append(f"- {a.id} {a.status} {a.severity} {a.name} [{labels}] "
                         f"since {_iso(a.starts_at)}: {a.annotations.get('summary', '')}")
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
        self.state["calls"] = self.state.get("calls", 0) + 1
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
        try:
            if name == "kubectl":
                return self._kubectl(str(args.get("command") or ""))
            if name == "pipeline_changes":
                changes = obs.pipeline.changes(str(args["app"]))
                limit = int(args.get("limit") or 15)
                return json.dumps([{"id": c.id, "service": c.service, "kind": c.kind, "author": c.author,
                                    "message": c.message, "time": _iso(c.time), "diff": c.diff[:1500]}
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
                self.state["findings"][finding.incident] = finding.model_dump(mode="json")
                return f"recorded incident {finding.incident}"
            if name == "claim_resolved":
                incident = str(args["incident"])
                if incident not in self.state["findings"]:
                    return f"error: no incident {incident!r}; report it with report_finding first"
                if incident not in self._claims:
                    self._claims.append(incident)
                if incident not in self.state["claimed"]:
                    self.state["claimed"].append(incident)
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


# =============================================================================================
# Adversarial baselines (their own module; re-exported so ``baselines:<Name>`` loads them)
# =============================================================================================

from pytest_sremarathon.baselines.adversarial import (  # noqa: E402  (needs the helpers above)
    RestartEverything,
    RotateCandidates,
    SprayAlerts,
    SprayChanges,
    SprayComponents,
    TouchWithoutFixing,
)
