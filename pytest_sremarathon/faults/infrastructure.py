"""Infrastructure and capacity faults: the machines, the network and the load under the
applications.

Injection flips a knob of the twin (a node's power, a zone's network, a co-tenant's CPU, a
filling disk, the traffic at an app's ingress). Mitigation reads only what the cluster shows:
cordons, where pods are bound, which pods are ready, the usage the pods report. Cleanup is
what the on-call human does when the window ends: the machine or the network comes back and
the nodes cordoned for the incident are uncordoned.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, Optional

from ..cluster import diurnal
from ..k8s.objects import pod_is_active, pod_is_ready, service_workload
from ..k8s.quantity import cpu_millicores
from ..k8s.store import iso
from ..provenance import EvidenceRef
from .base import Fault, FaultKind, World, node_evidence, workload_evidence

RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


# -- evidence helpers (shared with the dependency kinds) ---------------------------------------

def app_pods(world: World) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(namespace, service, pod) for every active pod of an application service."""
    for ns, app in world.apps.items():
        for pod in world.cluster.store.list("Pod", ns):
            svc = (pod["metadata"].get("labels") or {}).get("app", "")
            if svc in app.services and pod_is_active(pod):
                yield ns, svc, pod


def zone_nodes(world: World, zone: str) -> list[str]:
    return sorted(n for n, z in world.cluster.network.node_zone.items() if z == zone)


def pod_zone(world: World, pod: dict[str, Any]) -> str:
    return world.cluster.network.node_zone.get(pod["spec"].get("nodeName") or "", "")


def serving(world: World, pod: dict[str, Any]) -> bool:
    """Ready, on a node that is up: the pod answers requests."""
    return pod_is_ready(pod) and world.cluster.network.node_up.get(pod["spec"].get("nodeName") or "", False)


def ready_zones(world: World) -> dict[tuple[str, str], set[str]]:
    """(namespace, service) -> zones where the service has a serving pod."""
    out: dict[tuple[str, str], set[str]] = {(ns, s): set() for ns, app in world.apps.items() for s in app.services}
    for ns, svc, pod in app_pods(world):
        if serving(world, pod):
            out[(ns, svc)].add(pod_zone(world, pod))
    return out


def cordoned(world: World, node: str) -> bool:
    obj = world.cluster.store.get("Node", None, node)
    return obj is not None and bool(obj["spec"].get("unschedulable"))


def drained(world: World, nodes: set[str]) -> bool:
    """Every node cordoned and no active application pod bound to any of them."""
    if not all(cordoned(world, n) for n in nodes):
        return False
    return not any(pod["spec"].get("nodeName") in nodes for _, _, pod in app_pods(world))


def uncordon(world: World, node_name: str) -> None:
    node = world.cluster.store.get("Node", None, node_name)
    if node is not None and node["spec"].get("unschedulable"):
        node["spec"].pop("unschedulable")
        node["spec"]["taints"] = [t for t in node["spec"].get("taints") or [] if t["key"] != UNSCHEDULABLE_TAINT]
        if not node["spec"]["taints"]:
            node["spec"].pop("taints")
        world.cluster.store.touch(node)


def impact_on_nodes(kind: FaultKind, world: World, nodes: set[str],
                    services: set[tuple[str, str]] | None = None) -> set[tuple[str, str]]:
    """Symptoms of losing the application pods bound to ``nodes`` (optionally only those of
    ``services``): the services themselves and their callers."""
    out: set[tuple[str, str]] = set()
    for ns, svc, pod in app_pods(world):
        if pod["spec"].get("nodeName") in nodes and (services is None or (ns, svc) in services):
            out |= kind.symptoms_from(world, ns, svc)
    return out


def created_since(pod: dict[str, Any], t: datetime) -> bool:
    return pod["metadata"].get("creationTimestamp", "") >= iso(t)


def rollout_restart(world: World, ns: str, name: str) -> None:
    """``kubectl rollout restart deployment/<name>``: a new template annotation rolls the pods."""
    d = service_workload(world.cluster.store, ns, name)
    if d is None:
        return
    template_md = d["spec"]["template"].setdefault("metadata", {})
    template_md.setdefault("annotations", {})[RESTARTED_AT] = iso(world.cluster.store.clock())
    world.cluster.store.touch(d, spec_changed=True)


def services_have_ready_pods(world: World, services: set[tuple[str, str]]) -> bool:
    ready = ready_zones(world)
    return all(ready.get(key) for key in services if key in ready)


# -- machines ---------------------------------------------------------------------------------

def _daemon_pod(pod: dict[str, Any]) -> bool:
    return any(r.get("controller") and r.get("kind") == "DaemonSet" for r in pod["metadata"].get("ownerReferences") or [])


class NodeFailure(FaultKind):
    """A worker stops (kernel panic, hardware): its kubelet stops reporting, its pods stop
    answering. Kubernetes evicts the pods after five minutes; the repair an SRE owes is to
    cordon the node and move the work off it, so nothing new lands on a machine that is gone."""

    name = "node-failure"
    family = "infrastructure"
    description = "a worker node goes down"
    component_form = "node:<node>"
    repair = "cordon the node and drain it (kubectl cordon/drain)"
    judge = "the node is cordoned and no active application pod is bound to it"

    def inject(self, world: World, fault: Fault) -> None:
        node = fault.params["node"]
        world.cluster.network.node_up[node] = False
        fault.component = f"node:{node}"
        fault.nodes = {node}
        fault.zones = {world.cluster.network.node_zone[node]}
        fault.description = f"node {node} ({world.cluster.network.node_zone[node]}) went down"
        fault.impact = impact_on_nodes(self, world, {node})

    def mitigated(self, world: World, fault: Fault) -> bool:
        node = world.cluster.store.get("Node", None, fault.params["node"])
        if node is None or not node["spec"].get("unschedulable"):
            return False
        # A DaemonSet's pod stays bound to its node through a drain (kubectl drain
        # --ignore-daemonsets), as it does on a real cluster: it is not the workload to move.
        return not any(p["spec"].get("nodeName") == fault.params["node"] and pod_is_active(p)
                       and not _daemon_pod(p) for p in world.cluster.store.list("Pod"))

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return node_evidence({fault.params["node"]})

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.network.node_up[fault.params["node"]] = True
        uncordon(world, fault.params["node"])


class ZoneOutage(FaultKind):
    """Every node of one availability zone stops at once (power or uplink loss in the zone).
    The nodes go NotReady within a minute and Kubernetes evicts their pods after five.

    Repair: cordon every node of the zone and drain them (``kubectl drain``), so that no
    workload stays bound to, or is scheduled onto, machines that are gone.
    Mitigated when every node of the zone is cordoned and no active application pod is bound
    to any of them. Cleanup: the zone comes back and its nodes are uncordoned."""

    name = "zone-outage"
    family = "infrastructure"
    description = "every node of one zone goes down"
    component_form = "zone:<zone>"
    repair = "cordon and drain every node of the zone"
    judge = "every node of the zone is cordoned and no active application pod is bound to any of them"

    def inject(self, world: World, fault: Fault) -> None:
        zone = fault.params["zone"]
        nodes = zone_nodes(world, zone)
        for n in nodes:
            world.cluster.network.node_up[n] = False
        fault.component = f"zone:{zone}"
        fault.nodes = set(nodes)
        fault.zones = {zone}
        fault.description = f"zone {zone} went dark: nodes {', '.join(nodes)} stopped responding"
        fault.impact = impact_on_nodes(self, world, set(nodes))

    def mitigated(self, world: World, fault: Fault) -> bool:
        return drained(world, set(zone_nodes(world, fault.params["zone"])))

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return node_evidence(zone_nodes(world, fault.params["zone"]))

    def cleanup(self, world: World, fault: Fault) -> None:
        for n in zone_nodes(world, fault.params["zone"]):
            world.cluster.network.node_up[n] = True
            uncordon(world, n)


class CpuNoisyNeighbour(FaultKind):
    """A co-tenant on the same host (another VM, a runaway system daemon) steals most of one
    node's CPU. ``kubectl top node`` shows the node saturated while its pods use little; every
    pod on it slows down.

    Repair: cordon the node and drain it, moving the pods to healthy machines.
    Mitigated when the node is cordoned and no active application pod is bound to it.
    Cleanup: the neighbour is gone (the host's operator migrated it) and the node is uncordoned."""

    name = "cpu-noisy-neighbour"
    family = "infrastructure"
    description = "a noisy neighbour steals a node's CPU"
    component_form = "node:<node>"
    repair = "cordon the node and drain it (kubectl cordon/drain)"
    judge = "the node is cordoned and no active application pod is bound to it"

    def inject(self, world: World, fault: Fault) -> None:
        node = fault.params["node"]
        obj = world.cluster.store.get("Node", None, node)
        capacity = cpu_millicores((obj or {}).get("status", {}).get("allocatable", {}).get("cpu", "4"))
        world.cluster.network.node_cpu_noise[node] = float(fault.params.get("steal", 0.92)) * capacity
        zone = world.cluster.network.node_zone.get(node, "")
        fault.component = f"node:{node}"
        fault.nodes = {node}
        fault.zones = {zone}
        fault.description = (f"a co-tenant on the host of {node} ({zone}) is using "
                             f"{float(fault.params.get('steal', 0.92)):.0%} of its CPU")
        fault.impact = impact_on_nodes(self, world, {node})

    def mitigated(self, world: World, fault: Fault) -> bool:
        return drained(world, {fault.params["node"]})

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return node_evidence({fault.params["node"]})

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.network.node_cpu_noise.pop(fault.params["node"], None)
        uncordon(world, fault.params["node"])


class DiskPressure(FaultKind):
    """Something outside the pods (container logs, image layers, a stuck journal) fills a
    node's root disk. The kubelet reports ``DiskPressure``, the node gets the
    ``node.kubernetes.io/disk-pressure:NoSchedule`` taint, and the eviction manager evicts pods
    one by one (status ``Failed``, reason ``Evicted``) while the disk stays full.

    Repair: cordon the node and drain what is left on it.
    Mitigated when the node is cordoned and no active application pod is bound to it.
    Cleanup: the disk is cleaned up (the condition and taint clear) and the node uncordoned."""

    name = "disk-pressure"
    family = "infrastructure"
    description = "a node's disk fills up and its kubelet evicts pods"
    component_form = "node:<node>"
    repair = "cordon the node and drain it (kubectl cordon/drain)"
    judge = "the node is cordoned and no active application pod is bound to it"

    def inject(self, world: World, fault: Fault) -> None:
        node = fault.params["node"]
        world.cluster.kubelet.disk_pressure.add(node)
        zone = world.cluster.network.node_zone.get(node, "")
        fault.component = f"node:{node}"
        fault.nodes = {node}
        fault.zones = {zone}
        fault.description = f"the root disk of {node} ({zone}) is filling up; the kubelet is evicting pods"
        fault.impact = impact_on_nodes(self, world, {node})

    def mitigated(self, world: World, fault: Fault) -> bool:
        return drained(world, {fault.params["node"]})

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return node_evidence({fault.params["node"]})

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.kubelet.disk_pressure.discard(fault.params["node"])
        uncordon(world, fault.params["node"])


# -- network ----------------------------------------------------------------------------------

def placed_zones(world: World) -> dict[tuple[str, str], set[str]]:
    """(namespace, service) -> zones where the service has an active pod on a node that is up
    (ready or not: a pod kept unready by its own cross-zone calls is still a caller there)."""
    out: dict[tuple[str, str], set[str]] = {(ns, s): set() for ns, app in world.apps.items() for s in app.services}
    for ns, svc, pod in app_pods(world):
        if world.cluster.network.node_up.get(pod["spec"].get("nodeName") or "", False):
            out[(ns, svc)].add(pod_zone(world, pod))
    return out


def partition_gaps(world: World, zones: set[str]) -> list[tuple[str, str, str, str]]:
    """(namespace, caller, callee, zone): a caller running in ``zone`` whose callee has no
    ready pod there, so its calls must cross zones. Callees ready nowhere are skipped:
    whatever took them down, it is not the network between the zones."""
    ready, placed = ready_zones(world), placed_zones(world)
    gaps = []
    for ns, app in world.apps.items():
        for svc, spec in app.services.items():
            for zone in sorted(placed[(ns, svc)] & zones):
                for callee in spec.calls:
                    if ready[(ns, callee)] and zone not in ready[(ns, callee)]:
                        gaps.append((ns, svc, callee, zone))
    return gaps


class ZonePartition(FaultKind):
    """The interconnect between two zones fails (a bad route, a firewall change in one zone):
    pods in one zone cannot reach pods in the other. Calls that stay inside a zone work;
    calls that cross time out. The load balancer still reaches both zones.

    Repair: keep every call zone-local — scale each callee so it has a ready pod in every zone
    where its callers serve (``kubectl scale``), or cordon and drain one side.
    Mitigated when, for every call edge of every app, each zone of the pair where the caller
    runs a pod also has a ready pod of the callee. Cleanup: the link is restored and
    nodes cordoned on either side are uncordoned."""

    name = "zone-partition"
    family = "infrastructure"
    description = "the network between two zones is cut"
    component_form = "zone:<zone>"
    repair = (
        "keep calls zone-local: scale each callee to a ready pod in every zone its callers "
        "serve from, or cordon and drain one side"
    )
    judge = (
        "for every call edge, each zone of the pair where the caller runs a pod also has a "
        "ready pod of the callee"
    )

    def inject(self, world: World, fault: Fault) -> None:
        zone, peer = fault.params["zone"], fault.params["peer"]
        world.cluster.network.partitions.add(frozenset((zone, peer)))
        fault.component = f"zone:{zone}"
        fault.nodes = set(zone_nodes(world, zone))
        fault.zones = {zone, peer}
        fault.description = f"{zone} lost connectivity to {peer}: cross-zone calls time out"
        for ns, caller, _, _ in partition_gaps(world, {zone, peer}):
            fault.impact |= self.symptoms_from(world, ns, caller)

    def mitigated(self, world: World, fault: Fault) -> bool:
        return not partition_gaps(world, {fault.params["zone"], fault.params["peer"]})

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The zones' cordons and the placement of the services that call across them."""
        nodes = set(zone_nodes(world, fault.params["zone"])) | set(zone_nodes(world, fault.params["peer"]))
        return node_evidence(nodes) + [r for ns, svc in sorted(fault.impact) for r in workload_evidence(world, ns, svc)]

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.network.partitions.discard(frozenset((fault.params["zone"], fault.params["peer"])))
        for zone in (fault.params["zone"], fault.params["peer"]):
            for n in zone_nodes(world, zone):
                uncordon(world, n)


class NetworkLatency(FaultKind):
    """One zone's network degrades (a flapping top-of-rack switch, a congested uplink): every
    packet to or from its nodes is delayed, inside the zone and across it. Tight client
    timeouts turn the delay into errors.

    Repair: move the workloads out of the zone — cordon its nodes and drain them (or pin the
    deployments to the other zones with node affinity).
    Mitigated when no active application pod is bound to a node of the zone and every
    affected service still has a ready pod. Cleanup: the network recovers and the zone's
    nodes are uncordoned."""

    name = "network-latency"
    family = "infrastructure"
    description = "one zone's network adds latency to every packet"
    component_form = "zone:<zone>"
    repair = "move the workloads out of the zone (cordon and drain its nodes, or pin the deployments elsewhere)"
    judge = (
        "no active application pod is bound to a node of the zone, and every affected service "
        "has a ready pod"
    )

    def inject(self, world: World, fault: Fault) -> None:
        zone, ms = fault.params["zone"], float(fault.params.get("latency_ms", 300))
        world.cluster.network.zone_latency_ms[zone] = ms
        nodes = zone_nodes(world, zone)
        fault.component = f"zone:{zone}"
        fault.nodes = set(nodes)
        fault.zones = {zone}
        fault.description = f"the network of {zone} adds {ms:.0f} ms to every packet"
        fault.impact = impact_on_nodes(self, world, set(nodes))

    def mitigated(self, world: World, fault: Fault) -> bool:
        nodes = set(zone_nodes(world, fault.params["zone"]))
        if any(pod["spec"].get("nodeName") in nodes for _, _, pod in app_pods(world)):
            return False
        return services_have_ready_pods(world, fault.impact)

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The zone's cordons and the placement of the services it hosted."""
        return node_evidence(zone_nodes(world, fault.params["zone"])) + \
            [r for ns, svc in sorted(fault.impact) for r in workload_evidence(world, ns, svc)]

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.network.zone_latency_ms.pop(fault.params["zone"], None)
        for n in zone_nodes(world, fault.params["zone"]):
            uncordon(world, n)


# -- load -------------------------------------------------------------------------------------

SATURATED = 0.7  # share of the CPU limit above which a deployment counts as saturated
UTILISATION_TICKS = 4  # samples averaged (two virtual minutes at the default tick)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _replicas(world: World, ns: str, svc: str) -> int:
    d = service_workload(world.cluster.store, ns, svc)
    return int(d["spec"].get("replicas", 1)) if d else 0


def typical(world: World, ns: str, svc: str, metric: str, now: datetime, hours: float = 1.0) -> float:
    """The median over the last hour of a service's metric, each sample carried to ``now``'s
    point of the daily traffic curve: what the service usually does at this hour, unmoved by
    a fault that started (or ended) a few minutes ago."""
    values = sorted(v * diurnal(now) / diurnal(t)
                    for t, v in world.cluster.metrics.series(ns, svc, metric, now - timedelta(hours=hours)))
    if not values:
        return 0.0
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def cpu_limit(world: World, ns: str, svc: str) -> float:
    d = service_workload(world.cluster.store, ns, svc)
    if d is None:
        return 0.0
    return float(sum(cpu_millicores(((c.get("resources") or {}).get("limits") or {}).get("cpu"))
                     for c in d["spec"]["template"]["spec"].get("containers") or []))


def utilisation(world: World, ns: str, svc: str, since: Optional[datetime] = None) -> float:
    """Mean CPU usage per ready pod over the last samples (taken at or after ``since``), as a
    share of the pod's CPU limit (what ``kubectl top pods`` against the limits shows); infinite
    when there is no such sample or no ready pod."""
    limit = cpu_limit(world, ns, svc)
    if not limit:
        return 0.0
    metrics = world.cluster.metrics
    cpu = [v for _, v in metrics.series(ns, svc, "cpu_millicores", since)][-UTILISATION_TICKS:]
    ready = [v for _, v in metrics.series(ns, svc, "ready_pods", since)][-UTILISATION_TICKS:]
    if not cpu:
        return 0.0 if since is None else float("inf")
    shares = [c / (r * limit) if r > 0 else float("inf") for c, r in zip(cpu, ready)]
    return sum(shares) / len(shares)


class TrafficSurge(FaultKind):
    """A flash crowd (a campaign, a crawler, a retrying partner) multiplies the traffic at one
    application's ingress. The busiest deployments run past their CPU limit: requests through
    them slow down, and the share their limit cannot serve waits out its caller's timeout
    (the twin's ``cpu_overload_timeouts`` is on while a surge lasts).

    The multiplier is sized at injection so that the busiest deployment needs
    ``params["utilisation"]`` of its pods' CPU limit at the quietest point of the window's
    daily traffic curve (more everywhere else), from each deployment's typical demand at this
    hour (the median of the last hour, so another fault's recent effect does not skew it).

    Repair: scale the saturated deployments out (``kubectl scale``) until each runs below 70%
    of its CPU limit per pod; where a HorizontalPodAutoscaler manages one, raise its
    ``maxReplicas`` (it has grown the deployment to that maximum already, and sets a manual
    scale above it back within a sync period, as a real one does).
    Mitigated when every deployment the surge pushed past its CPU limit has a ready pod and,
    over the last two minutes (samples since the surge began only), serves at least 70% of
    the request rate the surge sends it while averaging below 70% of its CPU limit per ready
    pod. The request-rate clause keeps a deployment that another fault cut off from its
    traffic from passing for repaired; an error-ratio clause would make this repair depend on
    every other active fault, so the judgement reads the saturated deployments only.
    Cleanup: the surge ends."""

    name = "traffic-surge"
    family = "load"
    description = "a traffic surge saturates an application's deployments"
    component_form = "service:<app>/<entry service>"
    repair = ("scale the saturated deployments out until each runs below 70% of its CPU limit per pod (raise the "
              "maxReplicas of those an autoscaler manages)")
    judge = (
        "over the last two minutes every saturated deployment has a ready pod, serves at "
        "least 70% of the surge's request rate and averages below 70% of its CPU limit per "
        "ready pod"
    )

    def __init__(self) -> None:
        self._saturated: dict[str, dict[str, float]] = {}  # fault id -> {deployment: requests/s before}
        self._factor: dict[str, tuple[float, float]] = {}  # fault id -> (multiplier, diurnal level at injection)

    def inject(self, world: World, fault: Fault) -> None:
        ns = fault.app
        app = world.apps[ns]
        now = world.cluster.store.clock()
        usage = {}
        for svc in app.services:
            limit = cpu_limit(world, ns, svc)
            pods = world.cluster.metrics.latest(ns, svc, "ready_pods") or _replicas(world, ns, svc)
            if limit and pods:
                usage[svc] = typical(world, ns, svc, "cpu_millicores", now) / (pods * limit)
        busiest = max(usage.values(), default=0.0)
        target = float(fault.params.get("utilisation", 1.6))
        steps = max(1, int((fault.end - now).total_seconds() // 600))
        quietest = min(diurnal(now + timedelta(minutes=10 * i)) for i in range(steps + 1)) / diurnal(now)
        factor = round(min(max(target / (busiest * quietest), 3.0), 250.0), 1) if busiest > 0 else 10.0
        world.cluster.surge[ns] = factor
        world.cluster.network.cpu_overload_timeouts = True
        # Judged: the deployments the surge pushes past their CPU limit (busy ones that stay
        # near the 70% line would make the condition flap with the daily curve).
        saturated = {s for s, u in usage.items() if u * factor * quietest >= 1.0}
        if not saturated:
            saturated = {max(usage, key=lambda s: usage[s])} if busiest > 0 else {app.traffic.entry}
        self._saturated[fault.id] = {s: typical(world, ns, s, "requests_per_second", now) for s in saturated}
        self._factor[fault.id] = (factor, diurnal(now))
        fault.component = f"service:{ns}/{app.traffic.entry}"
        fault.description = (f"traffic to {ns} surged {factor:g}x; saturated: {', '.join(sorted(saturated))}")
        for svc in saturated | {s for s, u in usage.items() if u * factor > SATURATED}:  # symptoms: busy ones too
            fault.impact |= self.symptoms_from(world, ns, svc)

    def mitigated(self, world: World, fault: Fault) -> bool:
        ns = fault.app
        saturated = self._saturated.get(fault.id)
        if not saturated:
            return False
        factor, level = self._factor[fault.id]
        scale = factor * diurnal(world.cluster.store.clock()) / level
        metrics = world.cluster.metrics
        for svc, rps_before in sorted(saturated.items()):
            rps = [v for _, v in metrics.series(ns, svc, "requests_per_second", fault.start)][-UTILISATION_TICKS:]
            errors = [v for _, v in metrics.series(ns, svc, "error_ratio", fault.start)][-UTILISATION_TICKS:]
            if metrics.latest(ns, svc, "ready_pods") < 1 or not rps:
                return False
            served = _mean([r * (1.0 - e) for r, e in zip(rps, errors)])
            if served < SATURATED * rps_before * scale:
                return False  # not serving the surge: something else cut it off
            if utilisation(world, ns, svc, since=fault.start) >= SATURATED:
                return False
        return True

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The saturated deployments' replicas and templates (resources), and the specs of
        their autoscalers (whose maxReplicas bounds the replicas): capacity."""
        saturated = sorted(self._saturated.get(fault.id) or {})
        return [EvidenceRef("Deployment", fault.app, svc, aspect) for svc in saturated
                for aspect in ("replicas", "resources")] + \
            [EvidenceRef("HorizontalPodAutoscaler", fault.app, svc, "spec") for svc in saturated
             if world.cluster.store.get("HorizontalPodAutoscaler", fault.app, svc) is not None]

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.surge.pop(fault.app, None)
        world.cluster.network.cpu_overload_timeouts = bool(world.cluster.surge)
