"""A PodDisruptionBudget that allows no disruption, met by scheduled node maintenance.

The built-in apps budget every replicated stateless service at ``maxUnavailable: 1``
(``manifests/disruption-budgets.yaml``). A curated change sets one to ``minAvailable`` equal
to its replicas ("never run on fewer than two"), which reads as caution and means that no
eviction of its pods is ever allowed. Once it is deployed, the cloud provider announces the
retirement of the host under a node that runs one of the service's pods, with the minimum
notice Azure's Scheduled Events give a Redeploy (15 minutes; a GCE host error or an AWS
instance retirement gives less or more). The cluster's node drainer (twin/maintenance.py)
cordons the node and evicts its pods through the eviction API: every other pod moves, the
service's pod cannot (``FailedDraining`` warnings on the node: "Cannot evict pod as it would
violate the pod's disruption budget."). At the deadline the host goes away with the pod on
it: the pod dies without a graceful shutdown, its requests time out until the node is
declared lost, and the service runs on one replica until Kubernetes evicts and replaces it
five minutes later.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Optional

from ..k8s.objects import pod_is_active, pod_is_ready
from ..provenance import EvidenceRef
from .base import Fault, World, node_evidence, workload_evidence
from .change import ChangeFault, _matches, head_manifest, parse_path, resolve

#: Notice of a scheduled host maintenance: Azure Scheduled Events' minimum for a Redeploy
#: (learn.microsoft.com, "Azure Metadata Service: Scheduled Events for Linux VMs").
MAINTENANCE_NOTICE = timedelta(minutes=15)
OBJECT = "PodDisruptionBudget"


class PdbBlocksDrain(ChangeFault):
    """A change makes the service's PodDisruptionBudget allow no disruption (``minAvailable``
    equal to its replicas); then scheduled host maintenance must drain a node that runs one of
    its pods (see the module docstring).

    Effects: the node is cordoned (``SchedulingDisabled``) and emptied of every other pod;
    ``FailedDraining`` warnings on the node name the service's pod and the budget
    (``kubectl get pdb`` shows ALLOWED DISRUPTIONS 0); at the deadline the host retires with
    the pod on it: the node goes NotReady, the service's requests to it time out and its
    callers see errors and latency until the pod is replaced elsewhere. Deleting the pod by
    hand or scaling the Deployment only dodges this one drain (the service's autoscaler scales
    it back, and the budget still blocks the next). Repair: revert the change (or fix the
    budget so that it allows a disruption); the drain then proceeds on its own."""

    name = "pdb-blocks-drain"
    description = "a disruption budget that allows no eviction blocks a node's maintenance drain"
    arrives = ("a curated change to the service's PodDisruptionBudget through the pipeline, then scheduled host "
               "maintenance of a node running one of its pods")
    repair = "revert the change (or fix the budget so that it allows a disruption); the drain then proceeds"
    judge = ("the live budget no longer has the bad value, the maintenance node holds no active pod of the "
             "service, and the service has a ready pod")

    def _target(self, world: World, fault: Fault) -> tuple[str, list[Any], Optional[str]]:
        tag = self.tag(world, fault)
        if tag.object != OBJECT or not tag.field:
            raise ValueError(f"curated change {fault.params['change']!r}: a pdb fault needs `object: {OBJECT}` "
                             f"and `field`")
        return tag.service, parse_path(tag.field), tag.value

    def live(self, world: World, fault: Fault) -> bool:
        name, path, bad = self._target(world, fault)
        pdb = world.cluster.store.get(OBJECT, fault.app, name)
        return pdb is not None and _matches(resolve(pdb, path), bad)

    def in_head(self, world: World, fault: Fault) -> bool:
        name, path, bad = self._target(world, fault)
        doc = head_manifest(world, fault.app, OBJECT, name)
        return doc is not None and _matches(resolve(doc, path), bad)

    @staticmethod
    def _maintenance(world: World) -> Any:
        maintenance = getattr(world.cluster, "maintenance", None)
        if maintenance is None:
            raise ValueError("pdb-blocks-drain needs a cluster with scheduled host maintenance (the twin)")
        return maintenance

    def active(self, world: World, fault: Fault) -> bool:
        """Once the budget is deployed, the provider announces the maintenance of a node that
        runs one of the service's ready pods (the first by name): the window starts then."""
        if not super().active(world, fault):
            return False
        if fault.nodes:
            return True
        name = self.tag(world, fault).service
        pdb = world.cluster.store.get(OBJECT, fault.app, name)
        if pdb is None or not self.live(world, fault):
            return False
        pods = sorted((p for p in world.cluster.store.list("Pod", fault.app)
                       if (p["metadata"].get("labels") or {}).get("app") == name and pod_is_ready(p)
                       and p["spec"].get("nodeName")), key=lambda p: p["metadata"]["name"])
        if not pods:
            return False
        node = pods[0]["spec"]["nodeName"]
        deadline = world.cluster.store.clock() + MAINTENANCE_NOTICE
        self._maintenance(world).scheduled[node] = deadline
        fault.nodes = {node}
        fault.description += f" (host maintenance of {node} at {deadline:%H:%M} UTC)"
        return True

    def mitigated(self, world: World, fault: Fault) -> bool:
        name = self.tag(world, fault).service
        if self.live(world, fault) or not self.serving(world, fault):
            return False
        return not any(p["spec"].get("nodeName") in fault.nodes and pod_is_active(p)
                       and (p["metadata"].get("labels") or {}).get("app") == name
                       for p in world.cluster.store.list("Pod", fault.app))

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The budget's spec, the service's pods and replicas, and the node's cordon."""
        name = self.tag(world, fault).service
        return ([EvidenceRef(OBJECT, fault.app, name, "spec")] + workload_evidence(world, fault.app, name)
                + node_evidence(fault.nodes))

    def cleanup(self, world: World, fault: Fault) -> None:
        """The maintenance is over (the host replaced, the node back and schedulable); the
        on-call human reverts the change if it is still in."""
        maintenance = getattr(world.cluster, "maintenance", None)
        if maintenance is not None:
            for node in sorted(fault.nodes):
                maintenance.cancel(node)
        super().cleanup(world, fault)


DISRUPTION_KINDS = (PdbBlocksDrain,)
