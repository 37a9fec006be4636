"""kube-scheduler, reduced to the predicates and priorities a two-zone marathon exercises:
node readiness, cordons, taints/tolerations, nodeSelector and required node affinity, resource
requests against allocatable, and zone topology spread. Unschedulable pods stay Pending with
the real FailedScheduling message."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Optional, Protocol

from ..k8s.objects import EventRecorder, condition, pod_is_active, selector_matches, set_condition
from ..k8s.quantity import cpu_millicores, memory_bytes
from ..k8s.store import Store
from .priority import preempt, priority_of

ZONE = "topology.kubernetes.io/zone"


def pod_requests(pod: dict[str, Any]) -> tuple[int, int]:
    cpu = mem = 0
    for c in pod["spec"].get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or (c.get("resources") or {}).get("limits") or {}
        cpu += cpu_millicores(req.get("cpu"))
        mem += memory_bytes(req.get("memory"))
    return cpu, mem


def _tolerates(pod: dict[str, Any], taint: dict[str, Any]) -> bool:
    for tol in pod["spec"].get("tolerations") or []:
        if tol.get("effect") and tol["effect"] != taint["effect"]:
            continue
        if tol.get("operator") == "Exists" and (not tol.get("key") or tol["key"] == taint["key"]):
            return True
        if tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _affinity_ok(pod: dict[str, Any], labels: dict[str, str]) -> bool:
    for k, v in (pod["spec"].get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    return any(selector_matches({"matchExpressions": t.get("matchExpressions") or []}, labels) for t in terms)


class VolumeBinding(Protocol):
    """The scheduler's volume binding plugin (twin/volumes.py)."""

    def unschedulable(self, pod: dict[str, Any]) -> Optional[str]: ...

    def fits(self, pod: dict[str, Any], node: dict[str, Any]) -> bool: ...

    def scheduled(self, pod: dict[str, Any], node: str) -> None: ...


def _claims(pod: dict[str, Any]) -> bool:
    return any("persistentVolumeClaim" in v for v in pod["spec"].get("volumes") or [])


class Scheduler:
    def __init__(self, store: Store, events: EventRecorder) -> None:
        self.store = store
        self.events = events
        self._ip_counters: Counter[str] = Counter()
        self.volumes: Optional[VolumeBinding] = None  # set by the cluster; pods without claims skip it
        # uid -> (resourceVersion, pod_requests then) of the bound pods _usage last summed: a
        # pod's requests are in its spec, which only a store write (a new resourceVersion) changes.
        self._requests: dict[str, tuple[str, tuple[int, int]]] = {}
        self._lowest: tuple[tuple[int, ...], int] = ((), 0)  # (Pod version, _lowest_priority's scan then)

    def reconcile(self) -> None:
        pending = [p for p in self.store.list("Pod") if not p["spec"].get("nodeName") and pod_is_active(p)]
        if not pending:
            return
        self.schedule_all(pending)

    def schedule_all(self, pending: list[dict[str, Any]]) -> None:
        """Bind these pending pods, oldest first (a pass, or the new pods of one API write)."""
        nodes = self.store.list("Node")
        usage = self._usage()
        # The scheduling queue's order: higher priority first, then oldest.
        for pod in sorted(pending, key=lambda p: (-priority_of(p), p["metadata"]["creationTimestamp"])):
            self.schedule(pod, nodes, usage)

    def schedule(self, pod: dict[str, Any], nodes: Optional[list[dict[str, Any]]] = None,
                 usage: Optional[dict[str, list[int]]] = None) -> bool:
        """Bind one pending pod to a node (or record why not); True when it was bound. The
        reconcile pass calls it for every pending pod; a debug pod started at once, alone."""
        if nodes is None:
            nodes = self.store.list("Node")
        if usage is None:
            usage = self._usage()
        claims = self.volumes is not None and _claims(pod)
        blocked = self.volumes.unschedulable(pod) if self.volumes is not None and claims else None
        node, reasons = (None, Counter({blocked: len(nodes)})) if blocked else self._pick(pod, nodes, usage)
        if node is None and not blocked and priority_of(pod) > self._lowest_priority() and preempt(
                self.store, self.events, pod, nodes, usage,
                lambda n: self._unfit(pod, n) is None, pod_requests) is not None:
            node, reasons = self._pick(pod, nodes, usage)
        if node is None:
            message = self._failure_message(len(nodes), reasons, bool(blocked))
            if set_condition(pod, "PodScheduled", "False", self.store.clock(), "Unschedulable", message):
                self.store.touch(pod)
            self.events.record(pod, "Warning", "FailedScheduling", message, "default-scheduler")
            return False
        name = node["metadata"]["name"]
        pod["spec"]["nodeName"] = name
        set_condition(pod, "PodScheduled", "True", self.store.clock())
        self.store.touch(pod)
        if claims and self.volumes is not None:
            self.volumes.scheduled(pod, name)
        cpu, mem = pod_requests(pod)
        u = usage.setdefault(name, [0, 0])
        u[0] += cpu
        u[1] += mem
        self.events.record(pod, "Normal", "Scheduled",
                           f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {name}",
                           "default-scheduler")
        return True

    def _lowest_priority(self) -> int:
        """The lowest priority of a pod bound to a node, at most 0: a pod above it may preempt
        (DefaultPreemption tries for any pod; a default-priority pod preempts only the pods of a
        negative class, as the cluster-autoscaler's overprovisioning placeholders are). Read
        only for a pod that fits nowhere."""
        if not self._negative():
            return 0
        # A function of the pods alone (binding, phase and priority are all written through
        # the store): kept while no Pod moves, as between the pending pods of one pass.
        version = self.store.kind_version("Pod")
        if self._lowest[0] != version:
            self._lowest = (version, min([0] + [priority_of(p) for p in self.store.list("Pod")
                                                if p["spec"].get("nodeName") and pod_is_active(p)]))
        return self._lowest[1]

    def _negative(self) -> bool:
        """Is any PriorityClass below 0? (Without one no pod is, and the scan is skipped.)"""
        return any(int(c.get("value") or 0) < 0 for c in self.store.list("PriorityClass"))

    def _usage(self) -> dict[str, list[int]]:
        usage: dict[str, list[int]] = {}
        requests, kept = self._requests, {}
        for p in self.store.list("Pod"):
            n = p["spec"].get("nodeName")
            if n and pod_is_active(p):
                md = p["metadata"]
                cached = requests.get(md["uid"])
                if cached is None or cached[0] != md["resourceVersion"]:
                    cached = (md["resourceVersion"], pod_requests(p))
                kept[md["uid"]] = cached
                cpu, mem = cached[1]
                u = usage.setdefault(n, [0, 0])
                u[0] += cpu
                u[1] += mem
        self._requests = kept
        return usage

    def _pick(self, pod: dict[str, Any], nodes: list[dict[str, Any]],
              usage: dict[str, list[int]]) -> tuple[Optional[dict[str, Any]], Counter[str]]:
        reasons: Counter[str] = Counter()
        cpu, mem = pod_requests(pod)
        feasible = []
        for node in nodes:
            unfit = self._unfit(pod, node)
            if unfit is not None:
                reasons[unfit] += 1
            else:
                alloc = node["status"].get("allocatable") or {}
                used = usage.get(node["metadata"]["name"], [0, 0])
                if used[0] + cpu > cpu_millicores(alloc.get("cpu")):
                    reasons["Insufficient cpu"] += 1
                elif used[1] + mem > memory_bytes(alloc.get("memory")):
                    reasons["Insufficient memory"] += 1
                else:
                    feasible.append(node)
        if not feasible:
            return None, reasons
        return min(feasible, key=self._scorer(pod, feasible, usage)), reasons

    def _unfit(self, pod: dict[str, Any], node: dict[str, Any]) -> Optional[str]:
        """Why the pod cannot go to the node whatever its free resources (None: it could)."""
        ready = condition(node, "Ready")
        untolerated = [t for t in node["spec"].get("taints") or []
                       if t["effect"] in ("NoSchedule", "NoExecute") and not _tolerates(pod, t)]
        if node["spec"].get("unschedulable"):
            return "node(s) were unschedulable"
        if untolerated:
            t = untolerated[0]
            return f"node(s) had untolerated taint {{{t['key']}: {t.get('value', '')}}}"
        if not ready or ready["status"] != "True":
            return "node(s) were not ready"
        if not _affinity_ok(pod, node["metadata"].get("labels") or {}):
            return "node(s) didn't match Pod's node affinity/selector"
        if self.volumes is not None and _claims(pod) and not self.volumes.fits(pod, node):
            return "node(s) had volume node affinity conflict"
        return None

    def _scorer(self, pod: dict[str, Any], feasible: list[dict[str, Any]],
                usage: dict[str, list[int]]) -> Callable[[dict[str, Any]], tuple]:
        """The nodes' scores for this pod, lower is better: fewest matching pods in the zone
        (spread), then on the node (of the pod's app), then least requested CPU, then name for
        determinism. The namespace's pods are counted once per spread constraint (by their
        node's label) and once per node, not scanned again per node: nothing is written while
        the nodes are compared."""
        pods = self.store.list("Pod", pod["metadata"]["namespace"])
        spread: list[tuple[Any, Counter[Optional[str]]]] = []
        for c in pod["spec"].get("topologySpreadConstraints") or []:
            key = c.get("topologyKey")
            spread.append((key, Counter(
                self._node_label(p["spec"]["nodeName"], key) for p in pods
                if p["spec"].get("nodeName") and pod_is_active(p) and p is not pod
                and selector_matches(c.get("labelSelector"), p["metadata"].get("labels") or {}))))
        names = {n["metadata"]["name"] for n in feasible}
        same_app = Counter(p["spec"]["nodeName"] for p in pods
                           if p["spec"].get("nodeName") in names and pod_is_active(p)
                           and p["metadata"].get("labels", {}).get("app") == pod["metadata"].get("labels", {}).get("app"))

        def score(node: dict[str, Any]) -> tuple:
            name = node["metadata"]["name"]
            labels = node["metadata"].get("labels") or {}
            return (sum(by_value[labels.get(key)] for key, by_value in spread), same_app[name],
                    usage.get(name, [0, 0])[0], name)
        return score

    def _node_label(self, node_name: str, key: str) -> Optional[str]:
        node = self.store.get("Node", None, node_name)
        return (node["metadata"].get("labels") or {}).get(key) if node else None

    @staticmethod
    def _failure_message(total: int, reasons: Counter[str], whole: bool = False) -> str:
        """``whole``: the reason holds for the pod itself, not per node (an unbound claim)."""
        if whole:
            return (f"0/{total} nodes are available: {next(iter(reasons))}. preemption: 0/{total} nodes are "
                    f"available: {total} Preemption is not helpful for scheduling.")
        parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda kv: kv[0]))
        return (f"0/{total} nodes are available: {parts}. preemption: 0/{total} nodes are available: "
                f"{total} Preemption is not helpful for scheduling.")

    def next_ip(self, node: dict[str, Any]) -> str:
        name = node["metadata"]["name"]
        self._ip_counters[name] += 1
        index = int(node["spec"].get("podCIDR", "10.244.0.0/24").split(".")[2])
        n = self._ip_counters[name] % 250 + 2
        return f"10.244.{index}.{n}"
