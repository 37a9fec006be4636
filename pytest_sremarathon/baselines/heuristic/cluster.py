"""One look at the cluster: nodes, the apps' pods and deployments, as HeuristicSRE reads them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from ..kube_client import APP_LABEL, ZONE_LABEL, KubeClient


def cpu_millicores(value: Any) -> float:
    """A CPU quantity (``250m``, ``2``, ``1500000n``) in millicores; 0 for nothing or garbage."""
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


def memory_bytes(value: Any) -> float:
    """A memory quantity (``512Mi``, ``1G``) in bytes; 0 for nothing or garbage."""
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


def condition(obj: dict[str, Any], type_: str) -> Optional[dict[str, Any]]:
    """The ``status.conditions`` entry of that type, if any."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            found: dict[str, Any] = c
            return found
    return None


def _true(obj: dict[str, Any], type_: str) -> bool:
    return (condition(obj, type_) or {}).get("status") == "True"


@dataclass
class Pod:
    ns: str
    name: str
    service: str
    """Its ``app`` label: the deployment (service) it belongs to."""
    node: str
    """``""`` while unscheduled."""
    zone: str
    ready: bool
    active: bool
    """Neither finished nor being deleted."""
    waiting: str
    """The reason a container waits (``CrashLoopBackOff``, …), ``""`` if none does."""
    restarts: int
    created: str
    phase: str


@dataclass
class NodeInfo:
    zone: str
    ready: bool
    cordoned: bool
    disk: bool
    """Under disk pressure (the condition or its taint)."""
    cpu: float
    """Allocatable CPU, millicores."""


@dataclass
class DeploymentInfo:
    replicas: int
    available: int
    updated: int
    cpu_limit: float
    """Millicores per pod: the sum of its containers' limits."""
    container: str
    """The first container's name (the one ``set env`` targets)."""
    memory_limit: float
    """The first container's memory limit, bytes (0 if none)."""
    env: dict[str, Optional[str]]
    """The first container's literal env values."""
    config: list[str]
    """ConfigMaps the first container takes its env from."""
    image: str


@dataclass
class View:
    """One look at the cluster: nodes, application pods and deployments."""

    nodes: dict[str, NodeInfo] = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    deployments: dict[tuple[str, str], DeploymentInfo] = field(default_factory=dict)
    services: dict[str, list[str]] = field(default_factory=dict)
    """App -> its service names (its deployments)."""

    def zone_of(self, node: str) -> str:
        info = self.nodes.get(node)
        return info.zone if info else ""

    def zone_nodes(self, zone: str) -> list[str]:
        return sorted(n for n, d in self.nodes.items() if d.zone == zone)

    def pods_of(self, app: str, service: str) -> list[Pod]:
        return [p for p in self.pods if p.ns == app and p.service == service and p.active]

    def pods_on(self, nodes: Iterable[str]) -> list[Pod]:
        nodes = set(nodes)
        return [p for p in self.pods if p.node in nodes and p.active]

    def schedulable_ready(self, excluding: Iterable[str] = ()) -> list[str]:
        skip = set(excluding)
        return [n for n, d in self.nodes.items() if d.ready and not d.cordoned and n not in skip]

    def config_owners(self, app: str) -> dict[str, str]:
        """ConfigMap name -> the first deployment of ``app`` taking its env from it."""
        owners: dict[str, str] = {}
        for (a, s), d in self.deployments.items():
            if a == app:
                for name in d.config:
                    owners.setdefault(name, s)
        return owners


def look(kube: KubeClient, apps: list[str]) -> View:
    """Nodes, the pods of ``apps``' namespaces (every namespace while ``apps`` is empty) and the
    apps' deployments. Raises :class:`~pytest_sremarathon.baselines.kube_client.KubeError`."""
    view = View()
    for n in kube.nodes():
        name = n["metadata"]["name"]
        spec = n.get("spec") or {}
        disk = _true(n, "DiskPressure") or any(
            t.get("key") == "node.kubernetes.io/disk-pressure" for t in spec.get("taints") or [])
        view.nodes[name] = NodeInfo(zone=(n["metadata"].get("labels") or {}).get(ZONE_LABEL, ""),
                                    ready=_true(n, "Ready"), cordoned=bool(spec.get("unschedulable")), disk=disk,
                                    cpu=cpu_millicores(((n.get("status") or {}).get("allocatable") or {}).get("cpu")))
    wanted = set(apps)
    for p in kube.pods():
        pod = _pod(p, view, wanted)
        if pod is not None:
            view.pods.append(pod)
    for app in apps:
        for d in kube.deployments(app):
            name = d["metadata"]["name"]
            view.deployments[(app, name)] = _deployment(d, name)
            view.services.setdefault(app, []).append(name)
    return view


def _pod(p: dict[str, Any], view: View, apps: set[str]) -> Optional[Pod]:
    md, spec, status = p["metadata"], p.get("spec") or {}, p.get("status") or {}
    if apps and md.get("namespace") not in apps:
        return None
    svc = (md.get("labels") or {}).get(APP_LABEL, "")
    if not svc:
        return None
    phase = status.get("phase", "")
    active = phase not in ("Succeeded", "Failed") and not md.get("deletionTimestamp")
    waiting, restarts = "", 0
    for cs in status.get("containerStatuses") or []:
        restarts += int(cs.get("restartCount") or 0)
        w = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        if w:
            waiting = w
    node = spec.get("nodeName") or ""
    return Pod(md["namespace"], md["name"], svc, node, view.zone_of(node), _true(p, "Ready"), active, waiting,
               restarts, md.get("creationTimestamp", ""), phase)


def _deployment(d: dict[str, Any], name: str) -> DeploymentInfo:
    containers = d["spec"]["template"]["spec"].get("containers") or [{}]
    first = containers[0]
    status = d.get("status") or {}
    return DeploymentInfo(
        replicas=int(d["spec"].get("replicas") or 0),
        available=int(status.get("availableReplicas") or 0),
        updated=int(status.get("updatedReplicas") or 0),
        cpu_limit=sum(cpu_millicores(((c.get("resources") or {}).get("limits") or {}).get("cpu")) for c in containers),
        container=first.get("name", name),
        memory_limit=memory_bytes(((first.get("resources") or {}).get("limits") or {}).get("memory")),
        env={e.get("name"): e.get("value") for e in first.get("env") or [] if "name" in e},
        config=[ref["configMapRef"]["name"] for ref in first.get("envFrom") or [] if ref.get("configMapRef")],
        image=first.get("image", ""),
    )
