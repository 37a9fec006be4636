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
# HeuristicSRE
# =============================================================================================

_UPSTREAM = "upstream call failed: "
_CHAIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*): HTTP (\d{3}): ")
_STORE_REPLY = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*): (.*)")
_TIMEOUT = re.compile(r"deadline exceeded after (\d+)\s*ms")
_NO_SUCH_HOST = re.compile(r"lookup ([A-Za-z0-9-]+)(?:\.[A-Za-z0-9-]+)*: no such host")
_DNS_TIMEOUT = re.compile(r"lookup \S+ on [\d.]+:53: .*(?:i/o timeout|server misbehaving)")
_EXTERNAL = re.compile(r"\b(?:GET|POST|PUT|PATCH|DELETE) https?://([A-Za-z0-9.-]+)")
_AUTH = re.compile(r"WRONGPASS|NOAUTH|invalid username-password|authentication failed|access denied", re.I)
_SLOW_IO = re.compile(r"fsync|slow I/O|device busy|took \d{3,}\s*ms", re.I)
_OOM = re.compile(r"out of memory|OOMKilled", re.I)
_SLO = re.compile(r"\bSLO (\d+(?:\.\d+)?)\s*ms")
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}|\d+(?:\.\d+)?")
_STOP = frozenset("""
return self else elif none true false from import with while class lambda yield pass break continue
print format item items value values data request response result error errors config ctx req call
calls work service services string number float len list dict https http json message this that
true false info warning level append update users user name names","" get set put post the and for
""".split())

#: Values tried, in order, for a configuration key that selects a degraded mode (``*FALLBACK*``
#: and similar) when a third-party dependency is down: the usual "degrade gracefully" modes.
FALLBACK_VALUES = ("queue", "cache", "static", "degraded", "on", "true", "enabled")
_FALLBACK_KEY = re.compile(r"FALLBACK|DEGRADED|FAILOVER", re.I)
_OFF_VALUES = {"", "none", "off", "false", "0", "disabled", "no"}


def _tokens(text: str, numbers: bool = False) -> set[str]:
    out = set()
    for tok in _TOKEN.findall(text):
        low = tok.lower()
        if low in _STOP or (not numbers and low[0].isdigit()):
            continue
        out.add(low)
        if "_" in low:
            out.update(p for p in low.split("_") if len(p) >= 4 and p not in _STOP)
    return out


def _diff_tokens(diff: str) -> set[str]:
    lines = [ln[1:] for ln in diff.splitlines()
             if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return _tokens("\n".join(lines), numbers=True)


def _cpu_millicores(value: Any) -> float:
    if value is None:
        return 0.0
    s = str(value).strip()
    try:
        if s.endswith("m"):
            return float(s[:-1])
        if s.endswith("n"):
            return float(s[:-1]) / 1e6
        if s.endswith("u"):
            return float(s[:-1]) / 1e3
        return float(s) * 1000
    except ValueError:
        return 0.0


_MEMORY_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def _memory_bytes(value: Any) -> float:
    if value is None:
        return 0.0
    s = str(value).strip()
    for unit, factor in _MEMORY_UNITS.items():
        if s.endswith(unit):
            try:
                return float(s[: -len(unit)]) * factor
            except ValueError:
                return 0.0
    try:
        return float(s)
    except ValueError:
        return 0.0


def _per_pod_share(cpu: list[float], ready: list[float], limit: float) -> float:
    """CPU used per ready pod as a share of the pod's limit, averaged over the samples (what
    ``kubectl top pods`` against the deployment's limits shows)."""
    if not limit or not cpu or not ready:
        return 0.0
    shares = [c / (max(r, 1.0) * limit) for c, r in zip(cpu, ready)]
    return sum(shares) / len(shares)


def _condition(obj: dict[str, Any], type_: str) -> Optional[dict[str, Any]]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return None


@dataclass
class _Pod:
    ns: str
    name: str
    service: str
    node: str
    zone: str
    ready: bool
    active: bool
    waiting: str
    restarts: int
    created: str
    phase: str


@dataclass
class _View:
    """One look at the cluster: nodes, application pods and deployments."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {zone, ready, cordoned, disk, raw}
    pods: list[_Pod] = field(default_factory=list)
    deployments: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    services: dict[str, list[str]] = field(default_factory=dict)  # app -> service names (from deployments)

    def zone_nodes(self, zone: str) -> list[str]:
        return sorted(n for n, d in self.nodes.items() if d["zone"] == zone)

    def pods_of(self, app: str, service: str) -> list[_Pod]:
        return [p for p in self.pods if p.ns == app and p.service == service and p.active]

    def pods_on(self, nodes: Iterable[str]) -> list[_Pod]:
        nodes = set(nodes)
        return [p for p in self.pods if p.node in nodes and p.active]

    def schedulable_ready(self, excluding: Iterable[str] = ()) -> list[str]:
        skip = set(excluding)
        return [n for n, d in self.nodes.items() if d["ready"] and not d["cordoned"] and n not in skip]


@dataclass
class _Health:
    error_ratio: float = 0.0
    p99: float = 0.0
    cpu: float = 0.0
    ready: float = 0.0
    rps: float = 0.0
    rps_before: float = 0.0
    utilisation: float = 0.0
    sick: bool = False
    why: str = ""


@dataclass
class _Evidence:
    """What a service's pod logs say about its failures."""

    lines: int = 0
    own: int = 0  # its own exceptions (tracebacks)
    chains: dict[tuple[tuple[str, ...], str], int] = field(default_factory=dict)
    timeout_ms: dict[str, int] = field(default_factory=dict)  # callee -> timeout seen
    dns_zones: dict[str, int] = field(default_factory=dict)
    timeout_zones: dict[str, int] = field(default_factory=dict)
    slow_io: int = 0
    oom: int = 0
    text: list[str] = field(default_factory=list)
    sampled_zones: set[str] = field(default_factory=set)  # zones of the pods whose logs were read

    def add_chain(self, names: tuple[str, ...], reason: str) -> None:
        self.chains[(names, reason)] = self.chains.get((names, reason), 0) + 1


@dataclass
class _Hypothesis:
    component: str
    kind: str  # change | node | zone | external | credential | datastore | surge | pods
    app: Optional[str]
    services: set[tuple[str, str]] = field(default_factory=set)  # (app, service) showing symptoms
    nodes: list[str] = field(default_factory=list)
    fix_service: Optional[str] = None  # the service whose configuration or pods the repair touches
    clients: list[str] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)  # evidence text for change blame
    require: set[str] = field(default_factory=set)  # a suspect change must contain one of these
    slow_burn: bool = False  # symptoms that take long to show (OOM, crash loops, unready pods)
    why: str = ""


def _parse_chain(text: str) -> tuple[tuple[str, ...], str]:
    """``a: HTTP 500: b: HTTP 503: <reason>`` -> (("a", "b"), reason class)."""
    names: list[str] = []
    pos = 0
    while True:
        m = _CHAIN.match(text, pos)
        if m is None:
            break
        names.append(m.group(1))
        pos = m.end()
    rest = text[pos:]
    m = _STORE_REPLY.match(rest)
    if m and _AUTH.search(m.group(2)):
        if not names or names[-1] != m.group(1):
            names.append(m.group(1))
        return tuple(names), "auth"
    if _AUTH.search(rest):
        return tuple(names), "auth"
    if _DNS_TIMEOUT.search(rest):
        return tuple(names), "dns"
    host = _NO_SUCH_HOST.search(rest)
    if host:
        if not names or names[-1] != host.group(1):
            names.append(host.group(1))
        return tuple(names), "nohost"
    if _EXTERNAL.search(rest):
        return tuple(names), "external"
    if _TIMEOUT.search(rest):
        return tuple(names), "timeout"
    if "no healthy upstream" in rest or "connection refused" in rest:
        return tuple(names), "unavailable"
    if m and not names:
        names.append(m.group(1))
    return tuple(names), "error"


class HeuristicSRE:
    """An on-call engineer's heuristics, automated.

    Every step it looks at the cluster (nodes, pods, deployments), the telemetry of every
    service that alerts, and the logs of the services that are really failing, then:

    1. **Verifies** alerts: a service counts as failing only if its telemetry or its pods say so
       (error ratio, p99 latency against its own baseline, CPU saturation, pods not ready or
       crash looping). Alerts on healthy services are noise and are grouped with nothing.
    2. **Infers the call graph** from the evidence the cluster offers: error log lines such as
       ``upstream call failed: payment: HTTP 503: …`` (an edge and a failing callee), the
       ``*_ADDR`` settings of the services' ConfigMaps, and ``ctx.call("…")`` in change diffs.
    3. **Localizes** the upstream-most failing component: machines first (nodes NotReady, under
       disk pressure or robbed of CPU by a co-tenant; a whole zone down, its DNS failing or its
       network slow), then for each failing service the end of its error chain — a callee that
       fails on its own, a name that does not resolve (the caller's configuration), an external
       API (``POST https://…: 503``), a datastore refusing credentials, a timeout shorter than a
       healthy callee needs — and finally app-wide load (a traffic surge).
    4. **Blames** a change for service faults: the app's pipeline changes before the symptoms
       began, ranked by the service they touched (the root, its callees, its callers), by how
       recent they are and by how much of their diff shows up in the error logs (a traceback's
       source line, a host name, a timeout value).
    5. **Repairs by symptom**: revert the suspect change; cordon and drain a failing node or zone;
       uncordon nodes when pods cannot be scheduled; scale out saturated deployments; restart a
       wedged datastore or the clients holding a stale credential; switch on a degraded-mode
       setting (``*_FALLBACK``) when a third-party API is down.
    6. **Checks** that the repair worked: a service fault still failing a while after a revert
       gets the next suspect change; a drain is repeated while pods remain on the node.
    7. **Claims** an incident resolved only after it acted on it and the failure has been gone for
       two consecutive steps with every alert of the incident resolved.

    One incident per localized component (``service:<app>/<svc>``, ``node:<n>``, ``zone:<z>``,
    ``external:<name>``); its finding lists the alerts of the services it explains. Firing
    alerts that no diagnosis explains are grouped per service (``watch:<app>/<svc>``) and
    reported, never acted on or claimed. Incidents are alert-driven: a failure nobody was paged
    for is watched, not touched.
    """

    JOURNAL = "heuristic-sre.json"
    ERROR_RATIO = 0.04  # a failing service: share of failed requests
    LATENCY_FACTOR = 1.8  # … or p99 this many times its healthy baseline (and +25 ms)
    SATURATED = 0.7  # CPU per ready pod, as a share of its limit
    VERIFY_AFTER = timedelta(minutes=15)  # a revert that has not helped by then was the wrong one
    MAX_REVERTS = 3
    HEALTHY_STEPS_TO_CLAIM = 2
    ABSENT_STEPS_TO_CLOSE = 3
    LOG_WINDOW = 600  # seconds of pod logs read per failing service
    CHANGE_HORIZON = timedelta(hours=8)  # changes older than this are not suspects

    def __init__(self) -> None:
        self.state: dict[str, Any] = self._fresh()
        self._journal = _Journal(self.JOURNAL)
        self._kube: Optional[_Kube] = None
        self._apps: list[str] = []
        self._changes: dict[str, list[Change]] = {}
        self._notes: list[str] = []
        self._view_services: dict[str, list[str]] = {}

    @staticmethod
    def _fresh() -> dict[str, Any]:
        return {"version": 1, "incidents": {}, "open": {}, "generation": {}, "edges": {}, "baseline": {},
                "reverted": [], "cordoned": [], "owner": {}, "config_edges_for": []}

    # -- contract ---------------------------------------------------------------------------
    def setup(self, env: Environment) -> None:
        self._apps = list(env.apps)
        state = self._journal.load(Path(env.workspace))
        if state and state.get("version") == 1:
            self.state = {**self._fresh(), **state}

    def step(self, obs: Observation) -> Report:
        if self._journal.path is None:
            state = self._journal.load(Path(obs.workspace))
            if state and state.get("version") == 1:
                self.state = {**self._fresh(), **state}
        self._notes = []
        self._changes = {}
        if self._kube is None:
            self._kube = _Kube(Path(obs.kubeconfig))
        latest = _latest_alerts(obs)
        try:
            view = self._look(obs)
        except KubeError as exc:
            self._notes.append(f"cannot read the cluster: {exc}")
            return self._report(obs, latest, set(), {})
        if not self._apps:
            self._apps = sorted(view.services)
        self._view_services = view.services
        self._learn_config_edges(view)
        health = self._health(obs, view, latest)
        sick = {k for k, h in health.items() if h.sick}
        evidence = {k: self._evidence(view, k) for k in sorted(sick)}
        hypotheses = self._diagnose(obs, view, health, sick, evidence)
        present = self._reconcile(obs, hypotheses, latest, view)
        self._assign_alerts(latest, {present[k]: hypotheses[present[k]] for k in present}, view)
        self._watch(latest)
        for key in self._act_order(obs, present, hypotheses):
            self._act(obs, view, health, self.state["incidents"][key], hypotheses[present[key]])
        self._follow_up(obs, view, health, present)
        report = self._report(obs, latest, set(present), health)
        self._journal.save(self.state)
        return report

    # -- looking ----------------------------------------------------------------------------
    def _look(self, obs: Observation) -> _View:
        assert self._kube is not None
        view = _View()
        for n in self._kube.nodes():
            name = n["metadata"]["name"]
            ready = (_condition(n, "Ready") or {}).get("status") == "True"
            disk = (_condition(n, "DiskPressure") or {}).get("status") == "True" or any(
                t.get("key") == "node.kubernetes.io/disk-pressure" for t in (n.get("spec") or {}).get("taints") or [])
            view.nodes[name] = {"zone": (n["metadata"].get("labels") or {}).get(ZONE_LABEL, ""), "ready": ready,
                                "cordoned": bool((n.get("spec") or {}).get("unschedulable")), "disk": disk,
                                "cpu": _cpu_millicores(((n.get("status") or {}).get("allocatable") or {}).get("cpu"))}
        apps = set(self._apps)
        for p in self._kube.pods():
            md, spec, status = p["metadata"], p.get("spec") or {}, p.get("status") or {}
            if apps and md.get("namespace") not in apps:
                continue
            svc = (md.get("labels") or {}).get(APP_LABEL, "")
            if not svc:
                continue
            phase = status.get("phase", "")
            active = phase not in ("Succeeded", "Failed") and not md.get("deletionTimestamp")
            ready = (_condition(p, "Ready") or {}).get("status") == "True"
            waiting, restarts = "", 0
            for cs in status.get("containerStatuses") or []:
                restarts += int(cs.get("restartCount") or 0)
                w = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
                if w:
                    waiting = w
            node = spec.get("nodeName") or ""
            view.pods.append(_Pod(md["namespace"], md["name"], svc, node, view.nodes.get(node, {}).get("zone", ""),
                                  ready, active, waiting, restarts, md.get("creationTimestamp", ""), phase))
        for app in self._apps:
            for d in self._kube.deployments(app):
                name = d["metadata"]["name"]
                containers = d["spec"]["template"]["spec"].get("containers") or [{}]
                limit = sum(_cpu_millicores(((c.get("resources") or {}).get("limits") or {}).get("cpu"))
                            for c in containers)
                view.deployments[(app, name)] = {
                    "replicas": int(d["spec"].get("replicas") or 0),
                    "available": int((d.get("status") or {}).get("availableReplicas") or 0),
                    "updated": int((d.get("status") or {}).get("updatedReplicas") or 0),
                    "cpu_limit": limit, "container": containers[0].get("name", name),
                    "memory_limit": _memory_bytes(((containers[0].get("resources") or {}).get("limits") or {})
                                                  .get("memory")),
                    "env": {e.get("name"): e.get("value") for e in containers[0].get("env") or [] if "name" in e},
                    "config": [ref["configMapRef"]["name"] for ref in containers[0].get("envFrom") or []
                               if ref.get("configMapRef")],
                    "image": containers[0].get("image", ""),
                }
                view.services.setdefault(app, []).append(name)
        return view

    def _learn_config_edges(self, view: _View) -> None:
        """``*_ADDR: <service>`` settings in an app's ConfigMaps are call edges (once per app)."""
        assert self._kube is not None
        done = self.state["config_edges_for"]
        for app in self._apps:
            if app in done:
                continue
            done.append(app)
            names = set(view.services.get(app, []))
            try:
                maps = self._kube.configmaps(app)
            except KubeError:
                continue
            for cm in maps:
                owner = next((s for (a, s), d in view.deployments.items()
                              if a == app and cm["metadata"]["name"] in d["config"]), None)
                if owner is None:
                    continue
                for key, value in (cm.get("data") or {}).items():
                    target = str(value).split(":")[0].split(".")[0]
                    if key.upper().endswith(("_ADDR", "_HOST", "_URL", "_SERVICE")) and target in names:
                        self._edge(app, owner, target)

    def _edge(self, app: str, caller: str, callee: str) -> None:
        if caller == callee:
            return
        edges = self.state["edges"].setdefault(app, {}).setdefault(caller, [])
        if callee not in edges:
            edges.append(callee)
            edges.sort()

    def _callees(self, app: str, svc: str) -> list[str]:
        return list(self.state["edges"].get(app, {}).get(svc, []))

    def _callers(self, app: str, svc: str) -> list[str]:
        return sorted(c for c, cs in self.state["edges"].get(app, {}).items() if svc in cs)

    def _transitive_callers(self, app: str, svc: str) -> set[str]:
        out: set[str] = set()
        todo = [svc]
        while todo:
            for c in self._callers(app, todo.pop()):
                if c not in out:
                    out.add(c)
                    todo.append(c)
        return out

    # -- telemetry --------------------------------------------------------------------------
    def _metric(self, obs: Observation, app: str, svc: str, name: str, minutes: float) -> list[float]:
        try:
            series = obs.telemetry.metrics(app, svc, name, since=obs.time - timedelta(minutes=minutes))
        except ServiceError:
            return []
        return [v for _, v in series]

    def _health(self, obs: Observation, view: _View, latest: dict[str, Alert]) -> dict[tuple[str, str], _Health]:
        """Telemetry of every service worth a look: those alerting, those in open incidents,
        those whose pods are unhealthy, and (every half hour) everyone, to keep baselines."""
        keys: set[tuple[str, str]] = set()
        slos: dict[tuple[str, str], float] = {}
        for a in latest.values():
            k = _alert_service(a)
            if a.status == "firing" and k and k[0] in view.services and k[1] in view.services[k[0]]:
                keys.add(k)
                m = _SLO.search(a.annotations.get("description", ""))
                if m:  # a latency alert that states its objective
                    slos[k] = float(m.group(1))
        for inc in self.state["incidents"].values():
            if not inc.get("closed"):
                keys |= {tuple(s) for s in inc.get("services", [])}  # type: ignore[misc]
        for p in view.pods:
            if p.active and (not p.ready or p.waiting):
                keys.add((p.ns, p.service))
        for (app, svc), d in view.deployments.items():
            if d["available"] < d["replicas"]:
                keys.add((app, svc))
        refresh = obs.step % 6 == 1
        if refresh:
            keys |= set(view.deployments)
        out: dict[tuple[str, str], _Health] = {}
        for app, svc in sorted(keys):
            if (app, svc) not in view.deployments:
                continue
            out[(app, svc)] = self._service_health(obs, view, app, svc, refresh, slos.get((app, svc)))
        return out

    def _service_health(self, obs: Observation, view: _View, app: str, svc: str, refresh: bool,
                        slo_ms: Optional[float] = None) -> _Health:
        h = _Health()
        err = self._metric(obs, app, svc, "error_ratio", 2.5)
        p99 = self._metric(obs, app, svc, "latency_p99_ms", 2.5)
        cpu = self._metric(obs, app, svc, "cpu_millicores", 2.5)
        ready = self._metric(obs, app, svc, "ready_pods", 2.5)
        h.error_ratio = sum(err) / len(err) if err else 0.0
        h.p99 = sorted(p99)[len(p99) // 2] if p99 else 0.0
        h.cpu = sum(cpu) / len(cpu) if cpu else 0.0
        h.ready = min(ready) if ready else 0.0
        d = view.deployments[(app, svc)]
        h.utilisation = _per_pod_share(cpu, ready, d["cpu_limit"])
        base = self.state["baseline"].get(f"{app}/{svc}")
        reasons = []
        if h.error_ratio >= self.ERROR_RATIO:
            reasons.append(f"errors {h.error_ratio:.0%}")
        if base and h.p99 > self.LATENCY_FACTOR * base["p99"] and h.p99 > base["p99"] + 8:
            reasons.append(f"p99 {h.p99:.0f}ms vs {base['p99']:.0f}ms")
        elif slo_ms and h.p99 > slo_ms:
            reasons.append(f"p99 {h.p99:.0f}ms over its {slo_ms:.0f}ms SLO")
        if h.utilisation >= 0.95:
            reasons.append(f"cpu {h.utilisation:.0%} of limit")
        if not reasons:  # slower-burning trouble: restarts, memory at the limit
            restarts = self._metric(obs, app, svc, "restarts", 12)
            if restarts and restarts[-1] > restarts[0]:
                reasons.append(f"{restarts[-1] - restarts[0]:.0f} restart(s) in 12 min")
            memory = self._metric(obs, app, svc, "memory_bytes", 2.5)
            if memory and d.get("memory_limit") and max(memory) >= 0.9 * d["memory_limit"]:
                reasons.append(f"memory at {max(memory) / d['memory_limit']:.0%} of its limit")
        pods = view.pods_of(app, svc)
        bad = [p for p in pods if not p.ready or p.waiting]
        if bad:
            reasons.append(f"{len(bad)}/{len(pods)} pods unhealthy")
        if d["replicas"] == 0:
            reasons.append("scaled to zero")
        elif d["available"] == 0:
            reasons.append("no available replicas")
        elif d["available"] < d["replicas"]:
            reasons.append(f"{d['available']}/{d['replicas']} replicas available")
        h.sick = bool(reasons)
        h.why = ", ".join(reasons)
        if not h.sick and p99 and (refresh or base is None):
            key = f"{app}/{svc}"
            if base is None:
                self.state["baseline"][key] = {"p99": max(h.p99, 1.0), "n": 1}
            else:  # slow-moving: a healthy sample moves the baseline a fifth of the way
                base["p99"] = round(0.8 * base["p99"] + 0.2 * max(h.p99, 1.0), 2)
                base["n"] += 1
        return h

    # -- logs -------------------------------------------------------------------------------
    def _evidence(self, view: _View, key: tuple[str, str]) -> _Evidence:
        assert self._kube is not None
        app, svc = key
        ev = _Evidence()
        pods = sorted(view.pods_of(app, svc), key=lambda p: (p.ready and not p.waiting, p.zone, p.name))
        picked: list[_Pod] = []
        for zone in sorted({p.zone for p in pods}):  # one pod per zone, unhealthy ones first
            picked += [p for p in pods if p.zone == zone][:1]
        picked += [p for p in pods if p.waiting and p not in picked][:1]
        known = {s for a, ss in view.services.items() for s in ss}
        for pod in picked[:4]:
            if pod.zone and pod.ready:
                ev.sampled_zones.add(pod.zone)
            text = self._kube.log(app, pod.name, since_seconds=self.LOG_WINDOW)
            if pod.waiting or pod.restarts:
                text += "\n" + self._kube.log(app, pod.name, since_seconds=self.LOG_WINDOW, previous=True)
            self._read_log(app, svc, pod, text, known, ev)
        if not ev.lines and picked and not self._callees(app, svc):
            # A quiet leaf (a datastore?): its storage complaints may be older than the window.
            longer = self._kube.log(app, picked[0].name, since_seconds=4 * self.LOG_WINDOW)
            ev.slow_io += sum(1 for line in longer.splitlines() if _SLOW_IO.search(line))
        return ev

    def _read_log(self, app: str, svc: str, pod: _Pod, text: str, known: set[str], ev: _Evidence) -> None:
        in_traceback = False
        for line in text.splitlines()[-600:]:
            if _SLOW_IO.search(line):
                ev.slow_io += 1
            if _OOM.search(line):
                ev.oom += 1
            idx = line.find(_UPSTREAM)
            if idx >= 0:
                in_traceback = False
                names, reason = _parse_chain(line[idx + len(_UPSTREAM):])
                if not names:
                    continue
                ev.lines += 1
                ev.add_chain(names, reason)
                chain = (svc, *names)
                for a, b in zip(chain, chain[1:]):
                    if a in known and b in known:
                        self._edge(app, a, b)
                m = _TIMEOUT.search(line)
                if m:
                    ev.timeout_ms[names[-1]] = int(m.group(1))
                    if len(names) == 1:
                        ev.timeout_zones[pod.zone] = ev.timeout_zones.get(pod.zone, 0) + 1
                if reason == "dns" and len(names) == 1:
                    ev.dns_zones[pod.zone] = ev.dns_zones.get(pod.zone, 0) + 1
                if len(ev.text) < 200:
                    ev.text.append(line[idx:])
                continue
            if line.startswith("Traceback"):
                in_traceback = True
                ev.own += 1
                ev.lines += 1
                continue
            if in_traceback:
                if len(ev.text) < 200:
                    ev.text.append(line)
                if not line.startswith(" "):
                    in_traceback = False
                continue
            if line.startswith(("ERROR", "FATAL", "fatal", "panic")) or _AUTH.search(line):
                ev.lines += 1
                if _AUTH.search(line):
                    m = _STORE_REPLY.search(line.split(": ", 1)[-1]) if ": " in line else None
                    target = m.group(1) if m else ""
                    ev.add_chain((target,) if target else (), "auth")
                if len(ev.text) < 200:
                    ev.text.append(line)

    # -- diagnosis --------------------------------------------------------------------------
    def _diagnose(self, obs: Observation, view: _View, health: dict[tuple[str, str], _Health],
                  sick: set[tuple[str, str]], evidence: dict[tuple[str, str], _Evidence]) -> dict[str, _Hypothesis]:
        hyps: dict[str, _Hypothesis] = {}
        explained: set[tuple[str, str]] = set()
        for h in self._machines(obs, view, sick, evidence):
            hyps[h.component] = h
            explained |= h.services
        for h in self._surges(obs, view, health, sick, evidence):
            if h.component not in hyps:
                hyps[h.component] = h
                explained |= h.services
        roots: dict[tuple[str, str], _Hypothesis] = {}
        for key in sorted(sick - explained):
            h = self._root(view, health, sick, evidence, key, set())
            if h is None:
                continue
            h.services.add(key)
            if h.component in hyps:
                hyps[h.component].services |= h.services
                hyps[h.component].tokens |= h.tokens
                hyps[h.component].clients = sorted(set(hyps[h.component].clients) | set(h.clients))
            else:
                hyps[h.component] = h
            roots[key] = hyps[h.component]
        return hyps

    def _machines(self, obs: Observation, view: _View, sick: set[tuple[str, str]],
                  evidence: dict[tuple[str, str], _Evidence]) -> list[_Hypothesis]:
        out: list[_Hypothesis] = []
        down = sorted(n for n, d in view.nodes.items() if not d["ready"])
        zones = sorted({d["zone"] for d in view.nodes.values() if d["zone"]})
        done: set[str] = set()
        for zone in zones:
            nodes = view.zone_nodes(zone)
            if len(nodes) > 1 and all(n in down for n in nodes):
                out.append(self._machine_hypothesis(f"zone:{zone}", "zone", view, nodes, sick, evidence,
                                                    f"every node of {zone} is NotReady"))
                done |= set(nodes)
        for node in down:
            if node not in done:
                out.append(self._machine_hypothesis(f"node:{node}", "node", view, [node], sick, evidence,
                                                    f"{node} is NotReady"))
                done.add(node)
        for node, d in sorted(view.nodes.items()):
            if node not in done and d["disk"]:
                out.append(self._machine_hypothesis(f"node:{node}", "node", view, [node], sick, evidence,
                                                    f"{node} reports DiskPressure"))
                done.add(node)
        for node, why in self._robbed_nodes(view):
            if node not in done:
                out.append(self._machine_hypothesis(f"node:{node}", "node", view, [node], sick, evidence, why))
                done.add(node)
        # A zone whose pods cannot resolve names, or whose pods alone time out: judged per
        # service, comparing its pods in different zones (a zone that holds every pod because
        # the others are cordoned proves nothing).
        clean = not out and all(d["ready"] and not d["cordoned"] for d in view.nodes.values())
        for what in ("dns", "timeout"):
            if what == "timeout" and not clean:
                continue
            by_zone: dict[str, set[tuple[str, str]]] = {}
            lines: dict[str, int] = {}
            for key, ev in evidence.items():
                counts = ev.dns_zones if what == "dns" else ev.timeout_zones
                if len(ev.sampled_zones) < 2:
                    continue
                hit = [z for z in ev.sampled_zones if counts.get(z)]
                if len(hit) == 1:
                    by_zone.setdefault(hit[0], set()).add(key)
                    lines[hit[0]] = lines.get(hit[0], 0) + counts[hit[0]]
            if not by_zone:
                continue
            zone, services = max(sorted(by_zone.items()), key=lambda kv: len(kv[1]))
            if f"zone:{zone}" in {h.component for h in out} or any(view.nodes[x]["zone"] == zone for x in done):
                continue
            enough = lines[zone] >= 2 if what == "dns" else len(services) >= 3 and lines[zone] >= 6
            if what == "timeout" and enough:  # timeouts only matter if the callees look healthy
                enough = not any(self._callee_failing(k, evidence, sick) for k in services)
            if enough:
                label = "DNS lookups time out" if what == "dns" else "calls time out"
                h = self._machine_hypothesis(f"zone:{zone}", "zone", view, view.zone_nodes(zone), sick, evidence,
                                             f"in {zone} {label} for {len(services)} service(s) whose pods "
                                             f"elsewhere are fine")
                h.services = services & sick  # what the zone's evidence covers, not all it hosts
                if what == "timeout":
                    # Slow or cut-off networks show only as timeouts: localize, but do not move
                    # half the cluster on evidence this indirect.
                    h.kind = "zone-watch"
                out.append(h)
        return out

    def _callee_failing(self, key: tuple[str, str], evidence: dict[tuple[str, str], _Evidence],
                        sick: set[tuple[str, str]]) -> bool:
        app, _ = key
        ev = evidence.get(key)
        if ev is None:
            return False
        for (names, reason), _n in ev.chains.items():
            if reason == "timeout" and names and (app, names[-1]) in sick and (app, names[-1]) != key:
                callee_ev = evidence.get((app, names[-1]))
                if callee_ev is not None and callee_ev.own:
                    return True
        return False

    def _robbed_nodes(self, view: _View) -> list[tuple[str, str]]:
        """Nodes whose CPU is used up by something other than their pods (a noisy neighbour)."""
        assert self._kube is not None
        try:
            nodes = self._kube.node_metrics()
            pods = self._kube.pod_metrics()
        except KubeError:
            return []
        where = {(p.ns, p.name): p.node for p in view.pods}
        pod_cpu: dict[str, float] = {}
        for pm in pods:
            node = where.get((pm["metadata"].get("namespace"), pm["metadata"].get("name")))
            if node:
                pod_cpu[node] = pod_cpu.get(node, 0.0) + sum(_cpu_millicores((c.get("usage") or {}).get("cpu"))
                                                             for c in pm.get("containers") or [])
        out = []
        for nm in nodes:
            name = nm["metadata"]["name"]
            info = view.nodes.get(name)
            if not info or not info["ready"] or not info["cpu"]:
                continue
            used = _cpu_millicores((nm.get("usage") or {}).get("cpu"))
            steal = used - pod_cpu.get(name, 0.0)
            if used >= 0.85 * info["cpu"] and steal >= 0.5 * info["cpu"]:
                out.append((name, f"{name} CPU at {used / info['cpu']:.0%}, {steal:.0f}m of it outside its pods"))
        return out

    def _machine_hypothesis(self, component: str, kind: str, view: _View, nodes: list[str],
                            sick: set[tuple[str, str]], evidence: dict[tuple[str, str], _Evidence],
                            why: str) -> _Hypothesis:
        """What failing machines explain: the failing services they host (or hosted when the
        incident opened), and failing services whose errors are timeouts or unavailability of
        those — never a service that raises its own exceptions."""
        h = _Hypothesis(component=component, kind=kind, app=None, nodes=nodes, why=why)
        hosted = {(p.ns, p.service) for p in view.pods_on(nodes)}
        prior = self.state["open"].get(component)
        if prior:  # what the machines hosted when the incident opened
            hosted |= {tuple(s) for s in self.state["incidents"][prior].get("hosted", [])}  # type: ignore[misc]
        explained = set()
        for key in sick:
            ev = evidence.get(key) or _Evidence()
            if ev.own and ev.own >= sum(ev.chains.values()):
                continue  # its own code fails
            app = key[0]
            if ev.chains:
                (names, reason), _ = max(sorted(ev.chains.items()), key=lambda kv: kv[1])
                if reason in ("timeout", "unavailable") and (key in hosted or (names and (app, names[-1]) in hosted)):
                    explained.add(key)
                continue  # errors that point somewhere else (a credential, a name, an API, a bug)
            if key in hosted:
                bad = [p for p in view.pods_of(*key) if not p.ready or p.waiting]
                if bad and not all(p.node in nodes for p in bad):
                    continue  # its unhealthy pods are elsewhere (or unscheduled): its own trouble
                explained.add(key)
        h.services = explained
        h.clients = sorted(f"{a}/{s}" for a, s in hosted)
        return h

    def _surges(self, obs: Observation, view: _View, health: dict[tuple[str, str], _Health],
                sick: set[tuple[str, str]], evidence: dict[tuple[str, str], _Evidence]) -> list[_Hypothesis]:
        """An app whose whole traffic jumped (entry rate several times what it was half an
        hour ago) while its deployments saturate their CPU."""
        out = []
        for app in self._apps:
            saturated = sorted(s for (a, s), h in health.items() if a == app and h.utilisation >= self.SATURATED)
            if not saturated:
                continue
            entry = self._entry(app, view)
            if entry is None:
                continue
            now = self._metric(obs, app, entry, "requests_per_second", 3)
            before = self._metric(obs, app, entry, "requests_per_second", 45)[:6]
            if not now or not before:
                continue
            ratio = (sum(now) / len(now)) / max(sum(before) / len(before), 1e-6)
            ongoing = f"service:{app}/{entry}" in self.state["open"] and \
                self.state["incidents"][self.state["open"][f"service:{app}/{entry}"]]["kind"] == "surge"
            if ratio < 2.0 and not ongoing:
                continue
            h = _Hypothesis(component=f"service:{app}/{entry}", kind="surge", app=app, fix_service=entry,
                            why=f"{app} traffic {ratio:.1f}x in 45 min; saturated: {', '.join(saturated)}")
            h.clients = saturated
            # What the surge explains: failing services of the app whose own traffic jumped too
            # and that do not fail on their own (a bad change can ship during a surge).
            h.services = {(a, s) for (a, s) in sick if a == app and not (evidence.get((a, s)) or _Evidence()).own
                          and (s == entry or self._rate_ratio(obs, a, s) >= 2.0)}
            out.append(h)
        return out

    def _rate_ratio(self, obs: Observation, app: str, svc: str) -> float:
        """Request rate now against three quarters of an hour ago."""
        now = self._metric(obs, app, svc, "requests_per_second", 3)
        before = self._metric(obs, app, svc, "requests_per_second", 45)[:6]
        if not now or not before:
            return 0.0
        return (sum(now) / len(now)) / max(sum(before) / len(before), 1e-6)

    def _entry(self, app: str, view: _View) -> Optional[str]:
        names = view.services.get(app, [])
        if "frontend" in names:
            return "frontend"
        called = {c for cs in self.state["edges"].get(app, {}).values() for c in cs}
        roots = [s for s in names if s not in called and self._callees(app, s)]
        return roots[0] if len(roots) == 1 else None

    def _root(self, view: _View, health: dict[tuple[str, str], _Health], sick: set[tuple[str, str]],
              evidence: dict[tuple[str, str], _Evidence], key: tuple[str, str],
              seen: set[tuple[str, str]]) -> Optional[_Hypothesis]:
        """Follow a failing service's errors to where they start."""
        app, svc = key
        seen = seen | {key}
        ev = evidence.get(key) or _Evidence()
        known = set(view.services.get(app, []))
        chain_total = sum(ev.chains.values())
        own_pods = [p for p in view.pods_of(app, svc) if p.waiting or not p.ready]
        if ev.oom or (own_pods and not ev.chains):
            # Its own pods crash, run out of memory or never get ready: the trouble is here.
            h = _Hypothesis(component=f"service:{app}/{svc}", kind="change", app=app, fix_service=svc,
                            why=f"{svc}'s own pods are failing ({len(own_pods)} unhealthy"
                                + (", out of memory" if ev.oom else "") + ")", slow_burn=True)
            h.tokens = _tokens("\n".join(ev.text))
            return h
        if ev.own and ev.own >= chain_total:
            h = _Hypothesis(component=f"service:{app}/{svc}", kind="change", app=app, fix_service=svc,
                            why=f"{svc} raises its own exceptions")
            h.tokens = _tokens("\n".join(ev.text))
            h.slow_burn = bool(ev.oom) or any(p.waiting or p.restarts for p in view.pods_of(app, svc))
            if ev.oom:
                h.why += " and runs out of memory"
            return h
        if chain_total:
            (names, reason), _ = max(sorted(ev.chains.items()), key=lambda kv: kv[1])
            target = names[-1] if names else svc
            caller = names[-2] if len(names) >= 2 else svc
            text = _tokens("\n".join(ev.text))
            if reason == "nohost":
                h = _Hypothesis(component=f"service:{app}/{caller}", kind="change", app=app, fix_service=caller,
                                why=f"{caller} calls {target}, a name that does not resolve")
                h.tokens = text | {target.lower()}
                return h
            if reason == "external" and target not in known:
                return _Hypothesis(component=f"external:{target}", kind="external", app=app, fix_service=caller,
                                   why=f"{caller}'s calls to the third-party API {target} fail")
            if reason == "auth" and target:
                clients = sorted({s for (a, s), e in evidence.items() if a == app
                                  and any(r == "auth" and n and n[-1] == target for (n, r) in e.chains)} | {caller})
                h = _Hypothesis(component=f"service:{app}/{target}", kind="credential", app=app, fix_service=target,
                                why=f"{target} refuses the credentials of {', '.join(clients)}")
                h.clients = [c for c in clients if c != target]
                return h
            if reason == "dns":
                return None  # a zone-wide cause; _machines decides
            nxt = (app, target)
            if target in known and nxt != key and nxt not in seen:
                if nxt in sick:
                    deeper = self._root(view, health, sick, evidence, nxt, seen)
                    if deeper is not None:
                        deeper.services.add(nxt)
                        return deeper
                elif reason == "timeout":
                    h = _Hypothesis(component=f"service:{app}/{caller}", kind="change", app=app, fix_service=caller,
                                    why=f"{caller} times out on {target} although {target} is healthy")
                    h.require = {str(v) for v in ev.timeout_ms.values()}
                    h.tokens = text | h.require
                    return h
                h = _Hypothesis(component=f"service:{app}/{target}", kind="change", app=app, fix_service=target,
                                why=f"calls to {target} fail ({reason})")
                h.tokens = text
                return h
        # No error lines of its own: slow, saturated or short of pods.
        if ev.slow_io:
            return _Hypothesis(component=f"service:{app}/{svc}", kind="datastore", app=app, fix_service=svc,
                               why=f"{svc} logs slow storage I/O")
        for callee in self._callees(app, svc):
            nxt = (app, callee)
            if nxt in sick and nxt not in seen:
                deeper = self._root(view, health, sick, evidence, nxt, seen)
                if deeper is not None:
                    deeper.services.add(nxt)
                    return deeper
        h = _Hypothesis(component=f"service:{app}/{svc}", kind="change", app=app, fix_service=svc,
                        why=f"{svc} is failing ({health[key].why if key in health else 'pods'})")
        h.tokens = _tokens("\n".join(ev.text))
        pods = view.pods_of(app, svc)
        h.slow_burn = bool(ev.oom) or any(p.waiting or p.restarts or not p.ready for p in pods)
        if ev.oom:
            h.why += ", out of memory"
        return h

    # -- incidents --------------------------------------------------------------------------
    def _alerting(self, h: _Hypothesis, latest: dict[str, Alert], view: _View) -> bool:
        """Is some alert firing on what the hypothesis explains? (Incidents are alert-driven: a
        failure nobody was paged for is watched, not acted on.)"""
        services = set(h.services)
        if h.app and h.fix_service:
            services |= {(h.app, h.fix_service)} | {(h.app, c) for c in self._transitive_callers(h.app, h.fix_service)}
        zones = {view.nodes[n]["zone"] for n in h.nodes if n in view.nodes}
        for a in latest.values():
            if a.status != "firing":
                continue
            svc = _alert_service(a)
            if svc is not None and svc in services:
                return True
            if svc is None and (a.labels.get("node") in h.nodes or (a.labels.get("zone") and a.labels["zone"] in zones
                                                                     and not a.labels.get("node"))):
                return True
        return False

    def _reconcile(self, obs: Observation, hyps: dict[str, _Hypothesis], latest: dict[str, Alert],
                   view: _View) -> dict[str, str]:
        """Open an incident per new, alert-backed component; returns incident key -> component
        present now."""
        present: dict[str, str] = {}
        for comp in sorted(hyps):
            h = hyps[comp]
            key = self.state["open"].get(comp)
            if key is not None and self.state["incidents"][key]["kind"] != h.kind \
                    and "zone" not in (h.kind + self.state["incidents"][key]["kind"]):
                # Same component, a different failure (a surge after a bad config, say): a new incident.
                old = self.state["incidents"][key]
                old["closed"], old["closed_at"] = True, _iso(obs.time)
                del self.state["open"][comp]
                key = None
            if key is None and not self._alerting(h, latest, view):
                continue
            if key is None:
                n = self.state["generation"].get(comp, 0) + 1
                self.state["generation"][comp] = n
                key = comp if n == 1 else f"{comp}#{n}"
                self.state["open"][comp] = key
                self.state["incidents"][key] = {
                    "component": comp, "kind": h.kind, "app": h.app, "opened": _iso(obs.time), "alerts": [],
                    "services": [], "hosted": [], "cause": None, "tried": [], "actions": [], "last_action": None,
                    "healthy": 0, "absent": 0, "closed": False, "claimed": False, "why": h.why}
                self._notes.append(f"{key}: opened ({h.why})")
            inc = self.state["incidents"][key]
            inc["kind"] = h.kind
            inc["why"] = h.why
            inc["absent"] = 0
            inc["nodes"] = sorted(set(inc.get("nodes") or []) | set(h.nodes))
            inc["services"] = sorted({tuple(s) for s in inc["services"]} | h.services)  # type: ignore[misc]
            if h.kind in ("node", "zone") and not inc["hosted"]:
                inc["hosted"] = sorted(tuple(c.split("/", 1)) for c in h.clients)  # type: ignore[misc]
            present[key] = comp
        return present

    def _assign_alerts(self, latest: dict[str, Alert], hyps: dict[str, _Hypothesis], view: _View) -> None:
        """Each alert belongs to the incident whose failure explains it: a service's alerts to
        the hypothesis covering that service (the most specific one), else to an open incident
        whose root it calls; a node's alerts to the machine incident of that node. Firing
        alerts follow a re-diagnosis; resolved ones stay where they are."""
        owner: dict[str, str] = self.state["owner"]
        layers: list[tuple[dict[tuple[str, str], str], dict[str, str]]] = [({}, {}), ({}, {}), ({}, {})]
        for comp, key in sorted(self.state["open"].items()):  # open incidents that are not failing now
            if comp in hyps:
                continue
            inc = self.state["incidents"][key]
            services, nodes = layers[0]
            root = comp.split("/", 1)[1] if comp.startswith("service:") and "/" in comp else None
            app = inc.get("app")
            for svc in inc["services"]:
                services.setdefault(tuple(svc), key)  # type: ignore[arg-type]
            if app and root:
                for c in sorted(self._transitive_callers(app, root) | {root}):
                    services.setdefault((app, c), key)
            for n in inc.get("nodes") or []:
                nodes.setdefault(n, key)
        rank = {"change": 0, "credential": 0, "datastore": 0, "external": 1, "surge": 2, "node": 3, "zone": 4,
                "zone-watch": 4}
        for comp in sorted(hyps, key=lambda c: (rank.get(hyps[c].kind, 5), c), reverse=True):
            h = hyps[comp]
            key = self.state["open"][comp]
            if h.app and h.fix_service:
                for c in sorted(self._transitive_callers(h.app, h.fix_service)):
                    layers[1][0][(h.app, c)] = key
            for svc in h.services:
                layers[2][0][svc] = key
            for n in h.nodes:
                layers[2][1][n] = key
        by_service: dict[tuple[str, str], str] = {}
        by_node: dict[str, str] = {}
        for services, nodes in layers:
            by_service.update(services)
            by_node.update(nodes)
        for alert in sorted(latest.values(), key=lambda a: (_utc(a.starts_at), a.id)):
            current = owner.get(alert.id)
            if current is not None and self.state["incidents"][current].get("closed"):
                if alert.status == "firing":
                    del owner[alert.id]  # outlived its incident: up for grabs again
                current = None if alert.id not in owner else current
            if current is not None and alert.status != "firing":
                continue
            target = None
            svc = _alert_service(alert)
            if svc is not None:
                target = by_service.get(svc)
            elif alert.labels.get("node"):
                target = by_node.get(alert.labels["node"])
            elif alert.labels.get("zone"):
                target = next((k for n, k in sorted(by_node.items())
                               if view.nodes.get(n, {}).get("zone") == alert.labels["zone"]), None)
            if target is None or target == current:
                continue
            inc = self.state["incidents"][target]
            opened = _parse_time(inc["opened"]) or alert.starts_at
            on_root = svc is not None and inc["component"] == f"service:{svc[0]}/{svc[1]}"
            if _utc(alert.starts_at) < opened - timedelta(minutes=30) and not (on_root and alert.status == "firing"):
                continue  # older than the failure: another story (unless the root itself still fires)
            if alert.status != "firing" and current is None and _utc(alert.starts_at) < opened - timedelta(minutes=10):
                continue
            if current is not None:
                old = self.state["incidents"][current]["alerts"]
                if alert.id in old:
                    old.remove(alert.id)
            owner[alert.id] = target
            inc["alerts"].append(alert.id)
            start = _iso(alert.starts_at)
            if not inc.get("onset") or start < inc["onset"]:
                inc["onset"] = start

    def _watch(self, latest: dict[str, Alert]) -> None:
        """Alerts on a service that no diagnosis explains (yet) are grouped per service, as a
        pager groups them, so that nothing firing goes unreported; these incidents are watched
        and reported, never acted on or claimed."""
        watch: dict[str, dict[str, Any]] = self.state.setdefault("watch", {})
        owner: dict[str, str] = self.state["owner"]
        for svc_key, w in list(watch.items()):  # drop alerts a diagnosis has taken over
            w["alerts"] = [a for a in w["alerts"] if a not in owner]
            if w["open"] and w["alerts"] and all(latest[a].status != "firing" for a in w["alerts"] if a in latest):
                w["open"] = False
        for alert in sorted(latest.values(), key=lambda a: (_utc(a.starts_at), a.id)):
            svc = _alert_service(alert)
            if svc is None or alert.id in owner or alert.status != "firing":
                continue
            svc_key = f"{svc[0]}/{svc[1]}"
            w = watch.get(svc_key)
            if w is None or not w["open"]:
                n = (w or {}).get("n", 0) + 1
                w = watch[svc_key] = {"n": n, "open": True, "alerts": [],
                                      "key": f"watch:{svc_key}" if n == 1 else f"watch:{svc_key}#{n}"}
            if alert.id not in w["alerts"]:
                w["alerts"].append(alert.id)

    def _act_order(self, obs: Observation, present: dict[str, str], hyps: dict[str, _Hypothesis]) -> list[str]:
        """Machines first (their symptoms mask everything else), then the rest by component."""
        order = {"node": 0, "zone": 0, "zone-watch": 0, "surge": 1, "external": 2, "credential": 2, "datastore": 2,
                 "change": 3}
        return sorted(present, key=lambda k: (order.get(hyps[present[k]].kind, 4), k))

    # -- repairs ----------------------------------------------------------------------------
    def _act(self, obs: Observation, view: _View, health: dict[tuple[str, str], _Health],
             inc: dict[str, Any], h: _Hypothesis) -> None:
        kind = h.kind
        if kind in ("node", "zone"):
            self._drain(obs, view, inc, h.nodes)
        elif kind == "change":
            self._revert(obs, view, inc, h)
        elif kind == "credential":
            self._restart_once(obs, inc, h.app or "", h.clients or [], "restart the clients for the new credential")
        elif kind == "datastore":
            self._restart_once(obs, inc, h.app or "", [h.fix_service or ""], "restart the slow datastore")
        elif kind == "surge":
            self._scale(obs, view, health, inc, h)
        elif kind == "external":
            self._fallback(obs, view, inc, h)
        self._uncordon_if_starved(obs, view, inc)

    def _record(self, obs: Observation, inc: dict[str, Any], what: str) -> None:
        inc["actions"].append({"t": _iso(obs.time), "what": what})
        inc["last_action"] = _iso(obs.time)
        inc["healthy"] = 0
        self._notes.append(f"{self._key_of(inc)}: {what}")

    def _key_of(self, inc: dict[str, Any]) -> str:
        return next((k for k, v in self.state["incidents"].items() if v is inc), inc["component"])

    def _drain(self, obs: Observation, view: _View, inc: dict[str, Any], nodes: list[str]) -> None:
        assert self._kube is not None
        if not self._room_elsewhere(view, nodes):
            self._free_capacity(obs, view, inc, nodes)
            if not self._room_elsewhere(view, nodes):
                if not inc.get("no_room_noted"):
                    inc["no_room_noted"] = True
                    self._notes.append(f"{self._key_of(inc)}: not draining {', '.join(nodes)}: "
                                       "not enough healthy nodes elsewhere")
                return
        for node in nodes:
            info = view.nodes.get(node)
            if info is None:
                continue
            if not info["cordoned"]:
                try:
                    self._kube.cordon(node)
                    self.state["cordoned"].append(node)
                    self._record(obs, inc, f"cordoned {node}")
                except KubeError as exc:
                    self._notes.append(f"cordon {node} failed: {exc}")
                    continue
            for pod in view.pods_on([node]):
                try:
                    self._kube.evict(pod.ns, pod.name)
                    self._record(obs, inc, f"evicted {pod.ns}/{pod.name} from {node}")
                except KubeError as exc:
                    if exc.status != 404:
                        self._notes.append(f"evict {pod.ns}/{pod.name} failed: {exc}")

    def _room_elsewhere(self, view: _View, nodes: list[str]) -> bool:
        """Draining ``nodes`` leaves enough: a whole zone only if every other node is healthy and
        schedulable; one node only if two healthy schedulable nodes remain."""
        others = [n for n in view.nodes if n not in nodes]
        healthy = view.schedulable_ready(excluding=nodes)
        if len(nodes) > 1:
            return bool(others) and len(healthy) == len(others)
        return len(healthy) >= min(2, len(others))

    def _free_capacity(self, obs: Observation, view: _View, inc: dict[str, Any], keep: list[str]) -> None:
        """Uncordon healthy nodes we cordoned for incidents that are over."""
        assert self._kube is not None
        active = {n for i in self.state["incidents"].values() if not i.get("closed") and i is not inc
                  for n in i.get("nodes") or []}
        for node, info in sorted(view.nodes.items()):
            if (info["cordoned"] and info["ready"] and not info["disk"] and node not in keep and node not in active
                    and node in self.state["cordoned"]):
                try:
                    self._kube.cordon(node, on=False)
                    info["cordoned"] = False
                    self._record(obs, inc, f"uncordoned {node} (its incident is over) to make room")
                except KubeError as exc:
                    self._notes.append(f"uncordon {node} failed: {exc}")

    def _uncordon_if_starved(self, obs: Observation, view: _View, inc: dict[str, Any]) -> None:
        """Pods that cannot be scheduled while healthy nodes sit cordoned (not by us, or by us
        for an incident that is over): uncordon those nodes."""
        assert self._kube is not None
        pending = [p for p in view.pods if p.active and not p.node]
        if not pending:
            return
        busy = set()
        for i in self.state["incidents"].values():
            if i["kind"] in ("node", "zone"):
                closed = _parse_time(i.get("closed_at"))
                if not i.get("closed") or closed is None or obs.time - closed < timedelta(minutes=30):
                    busy |= set(i.get("nodes") or [])
        for node, info in sorted(view.nodes.items()):
            if info["cordoned"] and info["ready"] and not info["disk"] and node not in busy:
                try:
                    self._kube.cordon(node, on=False)
                    info["cordoned"] = False
                    self._record(obs, inc, f"uncordoned {node}: {len(pending)} pod(s) cannot be scheduled")
                except KubeError as exc:
                    self._notes.append(f"uncordon {node} failed: {exc}")

    def _restart_once(self, obs: Observation, inc: dict[str, Any], app: str, deployments: list[str], why: str) -> None:
        assert self._kube is not None
        done = set(inc.setdefault("restarted", []))
        for d in sorted(set(deployments) - done):
            if not d:
                continue
            try:
                self._kube.restart(app, d, obs.time)
                inc["restarted"].append(d)
                self._record(obs, inc, f"{why}: rollout restart {app}/{d}")
            except KubeError as exc:
                self._notes.append(f"restart {app}/{d} failed: {exc}")

    def _scale(self, obs: Observation, view: _View, health: dict[tuple[str, str], _Health],
               inc: dict[str, Any], h: _Hypothesis) -> None:
        """Scale out every deployment of the app that runs hot (CPU per ready pod over
        :attr:`SATURATED` of its limit), to about 45% — at most doubling per step. A deploy
        that resets a scaled deployment (manifests carry replica counts) is scaled back at once."""
        assert self._kube is not None and h.app
        app = h.app
        targets = inc.setdefault("scale_targets", {})
        for svc, want in sorted(targets.items()):
            d = view.deployments.get((app, svc))
            if d and d["replicas"] < want:
                try:
                    self._kube.scale(app, svc, want)
                    self._record(obs, inc, f"scaled {app}/{svc} back to {want} (a deploy reset it to {d['replicas']})")
                    d["replicas"] = want
                except KubeError as exc:
                    self._notes.append(f"scale {app}/{svc} failed: {exc}")
        last = _parse_time(inc.get("last_scaled"))
        if last is not None and obs.time - last < timedelta(minutes=4):
            return  # let the new pods warm up before judging again
        for (a, svc), d in sorted(view.deployments.items()):
            if a != app:
                continue
            hl = health.get((a, svc))
            util = hl.utilisation if hl is not None else self._utilisation(obs, view, a, svc)
            if util < self.SATURATED * 0.85:
                continue
            current = max(d["replicas"], 1)
            want = min(max(current + 1, math.ceil(current * util / 0.45)), current * 2, 20)
            if want <= d["replicas"]:
                continue
            try:
                self._kube.scale(app, svc, want)
                targets[svc] = want
                inc["last_scaled"] = _iso(obs.time)
                self._record(obs, inc, f"scaled {app}/{svc} {d['replicas']} -> {want} "
                                       f"(CPU {util:.0%} of its limit per pod)")
            except KubeError as exc:
                self._notes.append(f"scale {app}/{svc} failed: {exc}")

    def _utilisation(self, obs: Observation, view: _View, app: str, svc: str) -> float:
        return _per_pod_share(self._metric(obs, app, svc, "cpu_millicores", 2.5),
                              self._metric(obs, app, svc, "ready_pods", 2.5),
                              view.deployments[(app, svc)]["cpu_limit"])

    def _fallback(self, obs: Observation, view: _View, inc: dict[str, Any], h: _Hypothesis) -> None:
        """Switch the calling service to its degraded mode: a ``*FALLBACK*`` setting (in its
        ConfigMap or env) set to the next of :data:`FALLBACK_VALUES`, via ``set env``. A value
        that a deploy wiped is set again; the next value is tried only when the last one is
        live and the calls still fail."""
        assert self._kube is not None
        app, svc = h.app or "", h.fix_service or ""
        d = view.deployments.get((app, svc))
        if d is None:
            return
        key, value = inc.get("fallback_key"), inc.get("fallback_value")
        if key and value and d["env"].get(key) != value:
            try:
                self._kube.set_env(app, svc, d["container"], key, value)
                self._record(obs, inc, f"set {key}={value} on {app}/{svc} again (a deploy reset it)")
            except KubeError as exc:
                self._notes.append(f"set env {key} on {app}/{svc} failed: {exc}")
            return
        last = _parse_time(inc.get("last_action"))
        if last is not None and (obs.time - last < timedelta(minutes=10) or d["updated"] < d["replicas"]):
            return
        settings: dict[str, str] = {}
        try:
            for cm in self._kube.configmaps(app):
                if cm["metadata"]["name"] in d["config"]:
                    settings.update({k: str(v) for k, v in (cm.get("data") or {}).items()})
        except KubeError:
            pass
        settings.update({k: str(v) for k, v in d["env"].items() if v is not None})
        keys = sorted(k for k in settings if _FALLBACK_KEY.search(k))
        if not keys:
            if not inc.get("no_fallback_noted"):
                inc["no_fallback_noted"] = True
                self._notes.append(f"{self._key_of(inc)}: {svc} has no fallback setting to switch on")
            return
        key = keys[0]
        tried = inc.setdefault("fallback_tried", [])
        value = next((v for v in FALLBACK_VALUES if v not in tried and v != settings.get(key)), None)
        if value is None:
            return
        tried.append(value)
        inc["fallback_key"], inc["fallback_value"] = key, value
        try:
            self._kube.set_env(app, svc, d["container"], key, value)
            self._record(obs, inc, f"set {key}={value} on {app}/{svc} (third-party API down)")
        except KubeError as exc:
            self._notes.append(f"set env {key} on {app}/{svc} failed: {exc}")

    def _known_services(self, app: str) -> set[str]:
        edges = self.state["edges"].get(app, {})
        return set(edges) | {c for cs in edges.values() for c in cs} | set(self._view_services.get(app, []))

    def _app_changes(self, obs: Observation, app: str) -> list[Change]:
        if app not in self._changes:
            try:
                self._changes[app] = obs.pipeline.changes(app)
            except PipelineError as exc:
                self._notes.append(f"changes({app}) failed: {exc}")
                self._changes[app] = []
        return self._changes[app]

    def _suspects(self, obs: Observation, inc: dict[str, Any], h: _Hypothesis) -> list[tuple[float, Change, str, bool]]:
        """Changes that may have caused a service fault, best first: (score, change, why, strong).

        A change is a suspect if it shipped before the symptoms began and not too long before.
        Its score grows with how close it is to the failing service (the service itself, a
        callee — a changed contract —, a caller — a retry storm —, app-wide), how recent it is,
        and how many of its diff's *distinctive* tokens (rare among the app's changes) appear
        in the failing service's errors. ``strong`` suspects are acted on at once."""
        app, root = h.app or "", h.fix_service or ""
        onset = _parse_time(inc["opened"]) or obs.time
        first_alert = _parse_time(inc.get("onset"))
        if first_alert is not None:
            onset = min(onset, first_alert)
        if inc["tried"]:  # the first suspect was not it: whatever shipped since is a suspect too
            onset = obs.time
        callees, callers = set(self._callees(app, root)), set(self._callers(app, root))
        changes = self._app_changes(obs, app)
        names = {n.lower() for n in self._known_services(app)}
        evidence_tokens = (h.tokens - names) | h.require
        diffs = {ch.id: _diff_tokens(ch.diff) for ch in changes}
        df: dict[str, int] = {}
        for toks in diffs.values():
            for t in toks:
                df[t] = df.get(t, 0) + 1
        common = max(3, len(changes) // 5)
        out = []
        for ch in changes:
            if ch.id in self.state["reverted"] or ch.id in inc["tried"] or "sre-agent" in ch.author:
                continue
            if ch.message.startswith('Revert "'):
                continue
            t = _utc(ch.time)
            if t > onset + timedelta(minutes=1) or onset - t > self.CHANGE_HORIZON:
                continue
            age = max((onset - t).total_seconds() / 60, 0.0)
            for callee in re.findall(r"""ctx\.call\(\s*["']([\w.-]+)["']""", ch.diff):
                if ch.service:
                    self._edge(app, ch.service, callee)
            if ch.service == root:
                rel, how = 3.0, "the failing service"
            elif ch.service in callees:
                rel, how = 1.6, "a service it calls"
            elif ch.service in callers:
                rel, how = 1.3, "a service that calls it"
            elif ch.service is None:
                rel, how = 1.0, "app-wide"
            else:
                rel, how = 0.25, "another service"
            distinctive = {tok for tok in diffs[ch.id] if df.get(tok, 0) <= common}
            if root and root.lower() in distinctive and ch.service != root:
                rel = max(rel, 1.5)
            if h.require and not (diffs[ch.id] & h.require):
                continue
            matched = sorted(distinctive & evidence_tokens | (diffs[ch.id] & h.require))
            evidence = min(len(matched), 4)
            score = rel * (1 + evidence) / (1 + age / 30)
            strong = (rel >= 3 and (age <= 20 or (h.slow_burn and age <= 120))) or (evidence >= 2 and rel >= 1) \
                or (evidence >= 1 and rel >= 3)
            if rel >= 1.0 or evidence >= 2:
                why = f"{ch.kind} change to {how}, {age:.0f} min before the symptoms"
                if matched:
                    why += f"; its diff matches the errors ({', '.join(matched[:4])})"
                out.append((score, ch, why, strong))
        out.sort(key=lambda x: (-x[0], x[1].id))
        return out

    def _revert(self, obs: Observation, view: _View, inc: dict[str, Any], h: _Hypothesis) -> None:
        last = _parse_time(inc.get("last_action"))
        if last is not None and obs.time - last < self.VERIFY_AFTER:
            return  # give the last repair time to roll out
        recent = [t for t in inc.get("tried_at", []) if obs.time - (_parse_time(t) or obs.time) < timedelta(hours=1)]
        if len(recent) >= self.MAX_REVERTS or not inc["alerts"]:
            return  # (a long-lived incident gets a fresh budget for a new episode)
        suspects = self._suspects(obs, inc, h)
        if not suspects:
            if inc["tried"] or not h.fix_service:
                return
            pods = view.pods_of(h.app or "", h.fix_service)
            leaf = not self._callees(h.app or "", h.fix_service)
            opened = _parse_time(inc["opened"]) or obs.time
            if pods and all(p.waiting == "" for p in pods) and any(not p.ready for p in pods):
                self._restart_once(obs, inc, h.app or "", [h.fix_service], "no suspect change; restart unready pods")
            elif leaf and obs.time - opened >= timedelta(minutes=10):
                # A slow dependency with no change behind it (a datastore whose storage stalls):
                # fresh pods are the cheapest thing to try.
                self._restart_once(obs, inc, h.app or "", [h.fix_service], "no suspect change; restart the slow leaf")
            return
        score, change, why, strong = suspects[0]
        if not strong and "matches the errors" not in why:
            return  # nothing points at it but the calendar
        if not strong:
            # A weak suspect: let the failure settle (it may be a symptom of another incident
            # being repaired in the same app) before touching anything.
            opened = _parse_time(inc["opened"]) or obs.time
            recent = [i for i in self.state["incidents"].values() if i is not inc and i.get("app") == h.app
                      and i.get("last_action") and obs.time - (_parse_time(i["last_action"]) or obs.time) < self.VERIFY_AFTER]
            if obs.time - opened < timedelta(minutes=10) or recent:
                return
        inc["tried"].append(change.id)
        inc.setdefault("tried_at", []).append(_iso(obs.time))
        inc["cause"] = change.id
        try:
            revert = obs.pipeline.revert(h.app or "", change.id)
        except PipelineError as exc:
            self._notes.append(f"{self._key_of(inc)}: revert of {change.id} refused: {exc}")
            return
        self.state["reverted"].append(change.id)
        self._record(obs, inc, f"reverted {change.id} ({change.message!r}; {why}) as {revert.id}")

    # -- after the repairs ------------------------------------------------------------------
    def _follow_up(self, obs: Observation, view: _View, health: dict[tuple[str, str], _Health],
                   present: dict[str, str]) -> None:
        """Incidents whose failure is gone: claim the ones we repaired once they stay healthy,
        close the others."""
        for comp, key in sorted(self.state["open"].items()):
            inc = self.state["incidents"][key]
            if key in present:
                inc["healthy"] = 0
                inc["ready_to_claim"] = False
                continue
            inc["absent"] = inc.get("absent", 0) + 1
            acted = bool(inc["actions"])
            # (A machine incident that is no longer diagnosed has its machines back: pods
            # landing on them again are fine.)
            still = [s for s in inc["services"] if health.get(tuple(s), _Health()).sick]  # type: ignore[arg-type]
            inc["healthy"] = inc.get("healthy", 0) + 1 if not still else 0
            if acted and inc["healthy"] >= self.HEALTHY_STEPS_TO_CLAIM:
                inc["ready_to_claim"] = True
            if inc.get("ready_to_claim") or (not acted and inc["absent"] >= self.ABSENT_STEPS_TO_CLOSE):
                if not acted:
                    inc["closed"] = True
                    inc["closed_at"] = _iso(obs.time)
                    del self.state["open"][comp]

    def _report(self, obs: Observation, latest: dict[str, Alert], present: set[str],
                health: dict[tuple[str, str], _Health]) -> Report:
        findings: list[Finding] = []
        claims: list[Claim] = []
        for key, inc in sorted(self.state["incidents"].items()):
            if inc.get("closed") and not inc.get("ready_to_claim"):
                continue
            if inc.get("claimed"):
                continue
            comp = inc["component"]
            recent = obs.time - timedelta(hours=3)
            alerts = [a for a in inc["alerts"] if a in latest
                      and (latest[a].status == "firing" or _utc(latest[a].starts_at) >= recent)]
            cause = f"change:{inc['cause']}" if inc.get("cause") else None
            confidence = 0.9 if inc["actions"] else 0.6
            findings.append(Finding(incident=key, alerts=alerts, component=comp, cause=cause, confidence=confidence))
            if inc.get("ready_to_claim"):
                firing = [a for a in alerts if latest[a].status == "firing"]
                if alerts and not firing:
                    claims.append(Claim(incident=key))
                    inc["claimed"] = True
                    self._notes.append(f"{key}: repaired and healthy for {inc['healthy']} steps; claiming resolved")
                if not firing or inc.get("healthy", 0) >= 6:
                    inc["closed"] = True
                    inc["closed_at"] = _iso(obs.time)
                    self.state["open"].pop(comp, None)
        for svc_key, w in sorted(self.state.get("watch", {}).items()):
            if w["open"] and w["alerts"]:
                findings.append(Finding(incident=w["key"], alerts=list(w["alerts"]), component=f"service:{svc_key}",
                                        confidence=0.3))
        return Report(findings=findings, claims=claims, notes="\n".join(self._notes)[:20000])


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
