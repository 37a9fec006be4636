"""The tools every agent of the run may call (served by :mod:`.server`).

Each tool is one request, or a few, to the run's own agent-facing endpoints, made with the
agent's token: the Kubernetes API and ``/sremarathon/v1/`` on the agent's server, Prometheus at
``PROMETHEUS_URL``, the Jaeger query API at ``JAEGER_URL``. So a tool passes the policy point, is
recorded and is charged think time exactly as the same request from the agent's own code would
be; nothing here reaches past what the agent could reach itself. ``kubectl`` runs the real binary
inside the agent's sandbox (the host's ``run_sandboxed``): it reads only the files the agent can.

Results are text an LLM can read: compact JSON, or kubectl's own output, capped at
:data:`MAX_RESULT` characters. A failure is a :class:`ToolError` whose message says what to do.
"""

from __future__ import annotations

import json
import re
import shlex
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Annotated, Any, Literal, Optional

from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from ..agent.clients import PipelineClient
from ..agent.protocol import Finding, ServiceError
from .config import Endpoints
from .submissions import NoStep, StepSubmissions

__all__ = ["ToolBox", "ToolError", "Endpoints", "Sandboxed", "KUBECTL_FORBIDDEN_FLAGS", "MAX_RESULT"]

MAX_RESULT = 40_000
KUBECTL_TIMEOUT = 60.0
HTTP_TIMEOUT = 30.0
#: Flags that would point kubectl elsewhere or act as someone else: the tool runs against the
#: agent's kubeconfig, as the agent.
KUBECTL_FORBIDDEN_FLAGS = ("--kubeconfig", "--server", "-s", "--token", "--as", "--as-group", "--as-uid",
                           "--certificate-authority", "--client-certificate", "--client-key", "--username",
                           "--password", "--context", "--cluster", "--user", "--insecure-skip-tls-verify")

#: ``run_sandboxed(argv, timeout) -> (exit code, stdout, stderr)``: a command in the agent's
#: isolation (its namespaces, hidden paths, limits), cwd = the workspace, KUBECONFIG set.
Sandboxed = Callable[[list[str], float], tuple[int, str, str]]

App = Annotated[str, Field(description="an application (its namespace), e.g. 'shop'; the `apps` list is in the rules")]
ChangeId = Annotated[str, Field(description="a pipeline change id as pipeline_changes lists it, with or without "
                                            "the 'change:' prefix (e.g. '3c650305ef3f' or 'change:3c650305ef3f')")]


def _cap(text: str) -> str:
    if len(text) <= MAX_RESULT:
        return text
    return text[:MAX_RESULT] + f"\n… ({len(text) - MAX_RESULT} more characters cut; narrow the request)"


def _json(value: Any) -> str:
    return _cap(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str))


def _change_id(value: str) -> str:
    value = value.strip()
    return value[len("change:"):] if value.startswith("change:") else value


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)?\s*$")


def _seconds(text: str) -> float:
    m = _DURATION.match(text)
    if not m:
        raise ToolError(f"{text!r} is not a duration; write e.g. 15m, 1h")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}[m.group(2)]


def _iso(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ToolBox:
    """The tools, as methods whose signatures are their JSON schemas (see :mod:`.server`)."""

    def __init__(self, endpoints: Endpoints, submissions: StepSubmissions, run_sandboxed: Sandboxed) -> None:
        self.endpoints = endpoints
        self.submissions = submissions
        self.run_sandboxed = run_sandboxed
        self.pipeline = PipelineClient(endpoints.server, endpoints.token, timeout=HTTP_TIMEOUT)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only

    # -- HTTP -----------------------------------------------------------------------------------
    def _get(self, base: str, path: str, query: Optional[dict[str, Any]] = None) -> tuple[int, bytes]:
        url = base.rstrip("/") + path
        params = {k: str(v) for k, v in (query or {}).items() if v is not None and v != ""}
        if params:
            url += "?" + urllib.parse.urlencode(params)
        req = urllib.request.Request(url, method="GET")
        req.add_header("Authorization", f"Bearer {self.endpoints.token}")
        try:
            with self._opener.open(req, timeout=HTTP_TIMEOUT) as resp:
                return resp.status, resp.read(16 * 1024 * 1024)
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, exc.read(1024 * 1024)
            finally:
                exc.close()
        except (urllib.error.URLError, OSError) as exc:
            raise ToolError(f"{path}: unreachable: {getattr(exc, 'reason', exc)}") from None

    def _get_json(self, base: str, path: str, query: Optional[dict[str, Any]] = None) -> Any:
        status, raw = self._get(base, path, query)
        try:
            doc = json.loads(raw) if raw.strip() else {}
        except ValueError:
            doc = None
        if status >= 400:
            msg = None
            if isinstance(doc, dict):
                msg = doc.get("error") or doc.get("message") or (doc.get("errors") or [{}])[0].get("msg")
            raise ToolError(f"HTTP {status}: {msg or raw.decode('utf-8', 'replace')[:500]}")
        if doc is None:
            raise ToolError(f"{path}: the answer is not JSON")
        return doc

    # -- the cluster ------------------------------------------------------------------------------
    def kubectl(self, command: Annotated[str, Field(
            description="one kubectl command line without a shell: no pipes, redirections or $(...); the "
                        "leading 'kubectl' is optional. E.g. 'get pods -n shop -o wide', 'describe deploy/cart "
                        "-n shop', 'logs -n shop deploy/cart --since=10m', 'rollout undo deployment/cart -n shop', "
                        "'cordon worker-a1', 'exec -n shop deploy/cart -- env'")]) -> str:
        """Run one kubectl command against the cluster as the agent (its kubeconfig, the policy point,
        the recording: denied writes come back as 403 Forbidden naming the rule). Node names look like
        'worker-a1'; namespaces are the applications' names."""
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise ToolError(f"cannot split the command line: {exc}") from None
        if argv[:1] == ["kubectl"]:
            argv = argv[1:]
        if not argv:
            raise ToolError("empty command: give kubectl's arguments, e.g. 'get pods -A'")
        for a in argv:
            flag = a.split("=", 1)[0]
            if flag in KUBECTL_FORBIDDEN_FLAGS:
                raise ToolError(f"the flag {flag} is not allowed: kubectl runs with the agent's own kubeconfig")
        code, out, err = self.run_sandboxed(["kubectl", *argv], KUBECTL_TIMEOUT)
        if code == 124:
            raise ToolError(f"kubectl did not finish within {KUBECTL_TIMEOUT:g} s (watch, port-forward and "
                            "interactive commands do not end on their own)")
        text = out.rstrip()
        if code != 0:
            text += ("\n" if text else "") + f"(exit {code}) {err.strip()}"
        return _cap(text or "(no output)")

    def pod_logs(self, namespace: Annotated[str, Field(description="the pod's namespace, e.g. 'shop'")],
                 pod: Annotated[str, Field(description="the pod's name as `kubectl get pods` lists it, e.g. "
                                                       "'cart-7d9f8b6c4-x2x9q'")],
                 container: Annotated[Optional[str], Field(description="the container (default: the pod's only one)")] = None,
                 previous: Annotated[bool, Field(description="the previous, crashed container's log")] = False,
                 tail_lines: Annotated[int, Field(ge=1, le=5000, description="the last N lines")] = 200,
                 since_seconds: Annotated[Optional[int], Field(ge=1, description="only lines this recent")] = None) -> str:
        """A pod's log (kubectl logs): handler tracebacks, start-up errors."""
        path = f"/api/v1/namespaces/{urllib.parse.quote(namespace, safe='')}/pods/{urllib.parse.quote(pod, safe='')}/log"
        status, raw = self._get(self.endpoints.server, path, {
            "container": container, "previous": "true" if previous else None, "tailLines": tail_lines,
            "sinceSeconds": since_seconds})
        text = raw.decode("utf-8", "replace")
        if status >= 400:
            try:
                text = json.loads(text).get("message") or text
            except (ValueError, AttributeError):
                pass
            raise ToolError(f"HTTP {status}: {text[:500]}")
        return _cap(text or "(the log is empty)")

    # -- metrics and alerts -----------------------------------------------------------------------
    def _prometheus(self) -> str:
        if not self.endpoints.prometheus:
            raise ToolError("this run has no Prometheus API (PROMETHEUS_URL is not set on this backend)")
        return self.endpoints.prometheus

    def promql_query(self, query: Annotated[str, Field(description="a PromQL expression, e.g. 'sum by (namespace, "
                                                                   "service) (rate(http_requests_total{code=~\"5..\"}[5m]))'")],
                     time: Annotated[Optional[str], Field(description="evaluation time, RFC 3339 or unix seconds "
                                                                      "(default: now, in virtual time)")] = None) -> str:
        """An instant PromQL query on the cluster's Prometheus (http_requests_total,
        http_request_duration_seconds_bucket, container_*, kube_*, up; labels namespace, service, pod, code).
        Returns Prometheus's `data` ({resultType, result})."""
        doc = self._get_json(self._prometheus(), "/api/v1/query", {"query": query, "time": time})
        return _json(doc.get("data", doc))

    def promql_query_range(self, query: Annotated[str, Field(description="a PromQL expression")],
                           start: Annotated[Optional[str], Field(description="RFC 3339 or unix seconds (default: "
                                                                             "one hour before `end`)")] = None,
                           end: Annotated[Optional[str], Field(description="RFC 3339 or unix seconds (default: "
                                                                           "the step's observation time)")] = None,
                           step: Annotated[str, Field(description="resolution, e.g. '60s', '5m'")] = "60s") -> str:
        """A range PromQL query: a matrix of values over [start, end] every `step`."""
        obs = self.submissions.observation
        end_t = end or (_iso(obs.time) if obs is not None else None)
        if end_t is None:
            raise ToolError("give `end`: no step has run yet")
        if start is None:
            try:
                t = datetime.fromisoformat(end_t.replace("Z", "+00:00")) if not end_t.replace(".", "").isdigit() \
                    else datetime.fromtimestamp(float(end_t), timezone.utc)
            except ValueError:
                raise ToolError(f"cannot read end={end_t!r}: give RFC 3339 or unix seconds") from None
            start = _iso(t - timedelta(hours=1))
        doc = self._get_json(self._prometheus(), "/api/v1/query_range",
                             {"query": query, "start": start, "end": end_t, "step": step})
        return _json(doc.get("data", doc))

    def alerts(self, status: Annotated[Literal["firing", "new", "all"], Field(
                   description="'firing': the alerts firing now; 'new': those that changed since the previous step; "
                               "'all': the whole history since the run began")] = "firing",
               limit: Annotated[int, Field(ge=1, le=5000, description="at most this many, newest first")] = 200) -> str:
        """The alerts as this step's observation carries them (id, name, status, severity, labels such as
        app/service/namespace/pod/node/zone, summary, starts_at, ends_at). Alert ids are what
        report_finding's `alerts` takes."""
        obs = self.submissions.observation
        if obs is None:
            raise ToolError("no step has run yet: alerts come with the step's observation")
        items = obs.new_alerts if status == "new" else obs.alerts
        if status == "firing":
            items = [a for a in items if a.status == "firing"]
        items = sorted(items, key=lambda a: (a.starts_at, a.id), reverse=True)[:limit]
        return _json({"time": _iso(obs.time), "step": obs.step, "count": len(items),
                      "alerts": [{"id": a.id, "name": a.name, "status": a.status, "severity": a.severity,
                                  "labels": a.labels, "summary": a.annotations.get("summary", ""),
                                  "starts_at": _iso(a.starts_at),
                                  "ends_at": _iso(a.ends_at) if a.ends_at else None} for a in items]})

    # -- traces -----------------------------------------------------------------------------------
    def _jaeger(self) -> str:
        if not self.endpoints.jaeger:
            raise ToolError("this run has no Jaeger query API (JAEGER_URL is not set on this backend); use "
                            "pod_logs and promql_query instead")
        return self.endpoints.jaeger

    def traces_search(self, service: Annotated[Optional[str], Field(
                          description="the service as Jaeger names it, '<service>.<app>' (e.g. 'cart.shop'), or as a "
                                      "component ('service:shop/cart'); omit it to list the services")] = None,
                      operation: Annotated[Optional[str], Field(description="an operation (endpoint) of it")] = None,
                      tags: Annotated[Optional[dict[str, str]], Field(
                          description="span tags that must match, e.g. {\"error\": \"true\"}")] = None,
                      min_duration: Annotated[Optional[str], Field(description="e.g. '500ms'")] = None,
                      lookback: Annotated[str, Field(description="how far back from now, e.g. '15m', '1h'")] = "1h",
                      limit: Annotated[int, Field(ge=1, le=100)] = 20) -> str:
        """Search traces (Jaeger query API): one line of summary per trace (id, root operation, duration, span
        count, services, errors). Without `service`, the services Jaeger knows."""
        base = self._jaeger()
        if not service:
            return _json(self._get_json(base, "/api/services").get("data"))
        if service.startswith("service:") and "/" in service:
            app, _, name = service[len("service:"):].partition("/")
            service = f"{name}.{app}"
        obs = self.submissions.observation
        query: dict[str, Any] = {"service": service, "operation": operation, "limit": limit,
                                 "minDuration": min_duration, "tags": json.dumps(tags) if tags else None}
        if obs is not None:
            back = _seconds(lookback)
            end = int(obs.time.timestamp() * 1e6)
            query.update(start=end - int(back * 1e6))
        doc = self._get_json(base, "/api/traces", query)
        return _json([_trace_summary(t) for t in doc.get("data") or []])

    def trace_get(self, trace_id: Annotated[str, Field(description="a trace id as traces_search returns it (hex)")]) -> str:
        """One trace, span by span (service, operation, parent, start offset and duration in ms, error, status
        code, log messages)."""
        doc = self._get_json(self._jaeger(), f"/api/traces/{urllib.parse.quote(trace_id.strip(), safe='')}")
        data = doc.get("data") or []
        if not data:
            raise ToolError(f"trace {trace_id} not found")
        return _json(_trace_detail(data[0]))

    # -- the pipeline -----------------------------------------------------------------------------
    def _pipe(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except ServiceError as exc:
            raise ToolError(str(exc)) from None

    def pipeline_changes(self, app: App,
                         service: Annotated[Optional[str], Field(description="only this service's changes")] = None,
                         limit: Annotated[int, Field(ge=1, le=500, description="the newest N")] = 20) -> str:
        """The changes on the app's main branch, newest last: id, service, kind (code|config|manifest), author,
        message, time, and the first lines of the diff. Most faults arrive as such changes; a fault's cause is
        'change:<id>'."""
        changes = self._pipe(lambda: self.pipeline.changes(app))
        if service:
            changes = [c for c in changes if c.service == service]
        return _json([{"id": c.id, "cause": f"change:{c.id}", "service": c.service, "kind": c.kind,
                       "author": c.author, "message": c.message, "time": _iso(c.time),
                       "diff_head": "\n".join(c.diff.splitlines()[:12])} for c in changes[-limit:]])

    def pipeline_diff(self, app: App, change: ChangeId) -> str:
        """A change's whole diff."""
        cid = _change_id(change)
        for c in self._pipe(lambda: self.pipeline.changes(app)):
            if c.id == cid:
                return _cap(f"change:{c.id} {c.kind} {c.service or ''} by {c.author} at {_iso(c.time)}\n"
                            f"{c.message}\n\n{c.diff}")
        raise ToolError(f"no change {cid!r} in {app}: pipeline_changes lists them")

    def pipeline_revert(self, app: App, change: ChangeId) -> str:
        """Revert a change and deploy the result through the pipeline (a build, then a rollout: see
        pipeline_status). The usual repair of a fault a change introduced."""
        rev = self._pipe(lambda: self.pipeline.revert(app, _change_id(change)))
        return _json({"reverted": _change_id(change), "revert_change": rev.id, "message": rev.message})

    def pipeline_deploy(self, app: App, ref: Annotated[str, Field(
            description="what to deploy: 'HEAD' (main), a commit, or a change id; commit a fix to the app's checkout in "
                        "the workspace and deploy 'HEAD'")] = "HEAD") -> str:
        """Deploy a ref of the app through the pipeline (queued build, then rollout)."""
        return _json(self._pipe(lambda: self.pipeline.deploy(app, _change_id(ref))))

    def pipeline_status(self, app: App) -> str:
        """The app's deployed commit, each service's artifact, and its builds (queued, building, deploying,
        deployed, failed, superseded) with their times."""
        return _json(self._pipe(lambda: self.pipeline.status(app)))

    # -- the report -------------------------------------------------------------------------------
    def report_finding(self, incident: Annotated[str, Field(min_length=1, max_length=200, description=(
                           "your own key for the incident, stable across steps, e.g. 'cart-errors'"))],
                       alerts: Annotated[list[str], Field(description="the ids of the alerts this incident explains "
                                                                      "(as the alerts tool lists them)")],
                       component: Annotated[Optional[str], Field(description=(
                           "the root cause's location: 'service:<app>/<service>' (e.g. 'service:shop/cart'), "
                           "'node:<node>' (e.g. 'node:worker-a1'), 'zone:<zone>' (e.g. 'zone:zone-b') or "
                           "'external:<name>'"))] = None,
                       cause: Annotated[Optional[str], Field(description=(
                           "'change:<change id>' when a pipeline change caused it, else 'kind:<fault kind>'"))] = None,
                       confidence: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0) -> str:
        """Report (or update) an incident in this step's report: the alerts it groups (correlation), where the
        root cause is (localization) and what caused it. Name one component: naming several splits the credit."""
        try:
            finding = Finding(incident=incident, alerts=alerts, component=component, cause=cause,
                              confidence=confidence)
        except ValidationError as exc:
            raise ToolError(f"invalid finding: {exc.errors()[0].get('msg')}") from None
        try:
            step = self.submissions.finding(finding)
        except NoStep as exc:
            raise ToolError(str(exc)) from None
        return f"incident {incident!r} is in step {step}'s report ({len(alerts)} alert(s), component {component}, " \
               f"cause {cause})"

    def claim_resolved(self, incident: Annotated[str, Field(min_length=1, max_length=200, description=(
            "an incident you reported with report_finding"))]) -> str:
        """Claim an incident resolved, in this step's report. Only once it is repaired and healthy: a claim
        while the fault is still active counts as a false resolution."""
        try:
            step = self.submissions.claim(incident)
        except NoStep as exc:
            raise ToolError(str(exc)) from None
        return f"incident {incident!r} is claimed resolved in step {step}'s report"


# -- Jaeger's JSON, made short ----------------------------------------------------------------------

def _tags(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {str(t.get("key")): t.get("value") for t in items or []}


def _trace_summary(trace: dict[str, Any]) -> dict[str, Any]:
    spans = trace.get("spans") or []
    procs = trace.get("processes") or {}
    service = {pid: p.get("serviceName") for pid, p in procs.items()}
    root: dict[str, Any] = min(spans, key=lambda s: s.get("startTime", 0), default={})
    start = min((s.get("startTime", 0) for s in spans), default=0)
    end = max((s.get("startTime", 0) + s.get("duration", 0) for s in spans), default=0)
    errors = sorted({f"{service.get(s.get('processID'))}/{s.get('operationName')}" for s in spans
                     if str(_tags(s.get("tags") or []).get("error", "")).lower() == "true"})
    return {"trace_id": trace.get("traceID"), "root": f"{service.get(root.get('processID'))}/{root.get('operationName')}",
            "start": _iso(datetime.fromtimestamp(start / 1e6, timezone.utc)) if start else None,
            "duration_ms": round((end - start) / 1000, 1), "spans": len(spans),
            "services": sorted({str(v) for v in service.values()}), "errors": errors}


def _trace_detail(trace: dict[str, Any]) -> dict[str, Any]:
    spans = sorted(trace.get("spans") or [], key=lambda s: s.get("startTime", 0))
    procs = trace.get("processes") or {}
    t0 = spans[0].get("startTime", 0) if spans else 0
    out = []
    for s in spans:
        tags = _tags(s.get("tags") or [])
        parent = next((r.get("spanID") for r in s.get("references") or [] if r.get("refType") == "CHILD_OF"), None)
        logs = [f.get("value") for entry in s.get("logs") or [] for f in entry.get("fields") or []
                if f.get("key") in ("message", "event", "error.object", "exception.message")]
        out.append({"span": s.get("spanID"), "parent": parent,
                    "service": (procs.get(s.get("processID")) or {}).get("serviceName"),
                    "operation": s.get("operationName"), "start_ms": round((s.get("startTime", 0) - t0) / 1000, 2),
                    "duration_ms": round(s.get("duration", 0) / 1000, 2),
                    "error": str(tags.get("error", "")).lower() == "true",
                    **({"status": tags["http.status_code"]} if "http.status_code" in tags else {}),
                    **({"logs": logs[:5]} if logs else {})})
    return {"trace_id": trace.get("traceID"), "spans": out}
