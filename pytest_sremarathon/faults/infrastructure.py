"""Infrastructure faults: the machines and the network under the applications."""

from __future__ import annotations

from ..twin.objects import pod_is_active
from .base import Fault, FaultKind, World


class NodeFailure(FaultKind):
    """A worker stops (kernel panic, hardware): its kubelet stops reporting, its pods stop
    answering. Kubernetes evicts the pods after five minutes; the repair an SRE owes is to
    cordon the node and move the work off it, so nothing new lands on a machine that is gone."""

    name = "node-failure"
    family = "infrastructure"
    description = "a worker node goes down"

    def inject(self, world: World, fault: Fault) -> None:
        node = fault.params["node"]
        world.cluster.network.node_up[node] = False
        fault.component = f"node:{node}"
        fault.nodes = {node}
        fault.zones = {world.cluster.network.node_zone[node]}
        fault.description = f"node {node} ({world.cluster.network.node_zone[node]}) went down"
        for pod in world.cluster.store.list("Pod"):
            if pod["spec"].get("nodeName") == node and pod_is_active(pod):
                ns, app_label = pod["metadata"]["namespace"], (pod["metadata"].get("labels") or {}).get("app", "")
                if ns in world.apps and app_label in world.apps[ns].services:
                    fault.impact |= self.symptoms_from(world, ns, app_label)

    def mitigated(self, world: World, fault: Fault) -> bool:
        node = world.cluster.store.get("Node", None, fault.params["node"])
        if node is None or not node["spec"].get("unschedulable"):
            return False
        return not any(p["spec"].get("nodeName") == fault.params["node"] and pod_is_active(p)
                       for p in world.cluster.store.list("Pod"))

    def cleanup(self, world: World, fault: Fault) -> None:
        node_name = fault.params["node"]
        world.cluster.network.node_up[node_name] = True
        node = world.cluster.store.get("Node", None, node_name)
        if node is not None and node["spec"].get("unschedulable"):
            node["spec"].pop("unschedulable")
            node["spec"]["taints"] = [t for t in node["spec"].get("taints") or []
                                      if t["key"] != "node.kubernetes.io/unschedulable"]
            world.cluster.store.touch(node)
