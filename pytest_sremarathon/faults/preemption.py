"""A service moved below the cluster's batch tier, preempted when the nightly batch fills the
cluster.

Every pod of the built-in apps runs at the default priority (0) but the shop's storefront
(``shop-storefront``, 100000). A cluster shared with a data platform also runs its batch:
workers at the class ``batch-preemptible`` (-10), sized to the room the services leave
free, so that they soak up spare capacity and yield to every service (a default-priority pod
that fits nowhere preempts them, as pods preempt the cluster autoscaler's overprovisioning
placeholders). A curated change moves one of the app's services to a new class of its own
below *that* (``shop-best-effort``, -100, "mails can wait for room"). Nothing happens until
the batch arrives; from then on the service is the only thing in the cluster the batch may
preempt:

* the batch's workers (one Deployment per node, ``data-platform/nightly-etl-<node>``, pinned
  to it by ``kubernetes.io/hostname``, its 50m workers together requesting the CPU the node
  has free *plus* what the service's pods and any running Job's pods there request: a
  CronJob's run preempts the few workers it needs, and the room it leaves when it finishes
  goes back to their replacements, ahead of the service) fit only by preempting the service's pods: ``Preempted``
  events, the ``DisruptionTarget`` condition (``PreemptionByScheduler``), the workers'
  ``nominatedNodeName``;
* the service's replacement pods stay ``Pending`` (``FailedScheduling`` "Insufficient cpu" on
  every node): at -100 they may preempt nothing, and the batch keeps every node full;
* the service has no ready pod: its callers' requests to it fail (errors and latency at them).

Victims are chosen lowest priority first and only below the preemptor, so the batch can
preempt nothing but the service: no other app's pod is ever a victim, and a pod of another
service that needs room (a rollout, a scale-up, a failed node's replacements) preempts a batch
worker instead. The fault's impact is the service and its callers, and what was actually
preempted (the ``Preempted`` events since the batch arrived) is recorded with the fault.

Repair: revert the change (or move the service back to a class at or above the default): its
new pods run at priority 0 and preempt the batch workers they need room from. The judge reads
the cluster: the live Deployment and every active pod of the service are free of the bad
class, and the service has a ready pod. No other action counts: deleting or restarting the
pending pods, scaling the service up (more pods at -100, Pending too) or deleting the batch's
pods (its Deployments recreate them, at a priority above the service's) leaves the class live;
so does deleting the batch itself (another tenant's work, back every night): the service runs
again, still below the batch tier, and is not judged repaired.
"""

from __future__ import annotations

from typing import Any

from ..k8s.objects import controller_of, pod_is_active
from ..k8s.quantity import cpu_millicores
from .base import Fault, World
from .change import ManifestFault, _pods

#: The data platform's batch: its namespace, class and workers.
BATCH_NAMESPACE = "data-platform"
BATCH_CLASS = "batch-preemptible"
BATCH_PRIORITY = -10
BATCH_APP = "nightly-etl"
BATCH_MEMORY = "16Mi"
#: One batch worker's CPU: the batch fills a node with workers this size, below the smallest
#: service pod's request (100m), so that what it leaves free fits no service pod, and a pod that
#: needs room (a CronJob's run) preempts only the few workers it needs, not a node's whole batch.
BATCH_UNIT = 50
HOSTNAME = "kubernetes.io/hostname"


def cpu_request(pod: dict[str, Any]) -> int:
    """What the scheduler counts of a pod's CPU: its containers' requests (else their limits)."""
    total = 0
    for c in pod["spec"].get("containers") or []:
        res = c.get("resources") or {}
        total += cpu_millicores((res.get("requests") or res.get("limits") or {}).get("cpu"))
    return total


def batch_name(node: str) -> str:
    return f"{BATCH_APP}-{node}"


class PriorityPreemption(ManifestFault):
    """A change moves the service to a PriorityClass below the cluster's batch tier; when the
    nightly batch fills the cluster, it preempts the service's pods (see the module docstring).

    Effects: ``Preempted`` events on the service's pods ("Preempted by pod … on node …") and
    their ``DisruptionTarget`` condition; their replacements Pending with ``FailedScheduling``
    (``0/4 nodes are available: 4 Insufficient cpu``) while ``nightly-etl-*`` workers of the
    ``data-platform`` namespace run at ``batch-preemptible``; the service has no ready pod and
    its callers' requests to it fail. Deleting the pending pods, a rollout restart or scaling
    the service up brings more pods at the same class, Pending too; deleting the batch's pods
    does nothing (their Deployments recreate them, above the service). Repair: revert the change
    (or set the service's ``priorityClassName`` back to a class at or above the default)."""

    name = "priority-preemption"
    description = "a service moved below the batch tier, preempted when the nightly batch fills the cluster"
    arrives = ("a curated change to the service's priorityClassName through the pipeline, then the nightly batch "
               "that fills the cluster's spare room at a priority above the new class")
    repair = ("revert the change (or move the service back to a class at or above the default); deleting the "
              "pending pods, scaling up or deleting the batch's pods is no repair")
    judge = ("the live Deployment and every active pod of the service are free of the bad priorityClassName, and "
             "the service has a ready pod")

    def __init__(self) -> None:
        self._batch: dict[str, list[str]] = {}  # fault id -> the nodes the batch's workers are pinned to

    def busy_keys(self, app: str) -> list[tuple[str, str]]:
        """The batch fills the whole cluster: one such fault at a time."""
        return [("batch", "cluster")]

    @staticmethod
    def _apply(world: World) -> Any:
        apply = getattr(world.cluster, "apply", None)
        if apply is None:
            raise ValueError("priority-preemption needs a cluster that applies objects (the twin)")
        return apply

    def active(self, world: World, fault: Fault) -> bool:
        """Once every active pod of the service runs at the new class (the rollout done), the
        batch arrives, sized on the room each node has then: the window starts."""
        if not super().active(world, fault):
            return False
        if fault.id in self._batch:
            return True
        service = self.tag(world, fault).service
        store = world.cluster.store
        pods = _pods(world, fault.app, service)
        if not pods or not all(p["spec"].get("nodeName") and int(p["spec"].get("priority") or 0) < BATCH_PRIORITY
                               for p in pods):
            return False
        apply = self._apply(world)
        free: dict[str, int] = {}
        for n in store.list("Node"):
            if not n["spec"].get("unschedulable"):
                free[n["metadata"]["name"]] = cpu_millicores((n["status"].get("allocatable") or {}).get("cpu"))
        for p in store.list("Pod"):
            node = p["spec"].get("nodeName")
            if node in free and pod_is_active(p):
                # the service's pods are the room the batch takes: not counted as used; nor is
                # a Job's pod (a CronJob run): it finishes within minutes, and the room it leaves
                # would otherwise take the service's Pending replacements back in
                if not (p["metadata"]["namespace"] == fault.app
                        and (p["metadata"].get("labels") or {}).get("app") == service) \
                        and (controller_of(p) or {}).get("kind") != "Job":
                    free[node] -= cpu_request(p)
        if store.get("Namespace", None, BATCH_NAMESPACE) is None:
            apply({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": BATCH_NAMESPACE, "labels": {"kubernetes.io/metadata.name": BATCH_NAMESPACE}}})
        if store.get("PriorityClass", None, BATCH_CLASS) is None:
            apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": BATCH_CLASS},
                   "value": BATCH_PRIORITY, "globalDefault": False, "preemptionPolicy": "PreemptLowerPriority",
                   "description": "The data platform's batch: fills spare room and yields to every service."})
        for node, cpu in sorted(free.items()):
            if cpu >= BATCH_UNIT:
                apply(self._worker(node, cpu // BATCH_UNIT))
        self._batch[fault.id] = sorted(n for n, c in free.items() if c >= BATCH_UNIT)
        fault.description += f" (the nightly batch fills {len(self._batch[fault.id])} nodes at {BATCH_CLASS})"
        return True

    @staticmethod
    def _worker(node: str, replicas: int) -> dict[str, Any]:
        labels = {"app": BATCH_APP, "app.kubernetes.io/part-of": "data-platform"}
        resources = {"cpu": f"{BATCH_UNIT}m", "memory": BATCH_MEMORY}
        return {"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": batch_name(node), "namespace": BATCH_NAMESPACE, "labels": dict(labels)},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": BATCH_APP, HOSTNAME: node}},
                         "template": {"metadata": {"labels": {**labels, HOSTNAME: node}},
                                      "spec": {"priorityClassName": BATCH_CLASS, "nodeSelector": {HOSTNAME: node},
                                               "containers": [{"name": "etl", "image": "busybox:1.36",
                                                               "command": ["sh", "-c", "sleep 86400"],
                                                               "resources": {"requests": dict(resources),
                                                                             "limits": dict(resources)}}]}}}}

    def victims(self, world: World, fault: Fault) -> set[tuple[str, str]]:
        """(namespace, pod) of every pod the scheduler preempted since the fault began, but the
        batch's own workers (which any service's pod that needs room preempts, a CronJob's run
        among them: the batch yielding, not the fault's impact)."""
        start = fault.start.isoformat().replace("+00:00", "Z")
        return {(e["involvedObject"].get("namespace") or "", e["involvedObject"]["name"])
                for e in world.cluster.store.list("Event")
                if e.get("reason") == "Preempted" and str(e.get("lastTimestamp") or e.get("eventTime") or "") >= start
                and e["involvedObject"].get("namespace") != BATCH_NAMESPACE}

    def cleanup(self, world: World, fault: Fault) -> None:
        """The batch finishes (its workers go); the on-call human reverts the change if it is
        still in."""
        store = world.cluster.store
        for node in self._batch.pop(fault.id, []):
            if store.get("Deployment", BATCH_NAMESPACE, batch_name(node)) is not None:
                store.delete("Deployment", BATCH_NAMESPACE, batch_name(node))
        super().cleanup(world, fault)


PREEMPTION_KINDS = (PriorityPreemption,)
