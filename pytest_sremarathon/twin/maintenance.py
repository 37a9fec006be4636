"""Scheduled host maintenance: the cloud provider retires the machine under a node at a
deadline it announced, and the cluster's node drainer (what Karpenter, a managed node group's
upgrade or a node termination handler runs) moves the work off before then.

For each node in :attr:`NodeMaintenance.scheduled` (node -> deadline), every tick: the node
is cordoned, and each active pod on it but a DaemonSet's (``kubectl drain --ignore-daemonsets``:
the node agent stays, tolerating the cordon, until the host goes) is evicted through the same check the ``pods/eviction``
subresource makes (PodDisruptionBudgets honoured, :func:`.disruption.check_eviction`); a
refused eviction is retried at the next tick and reported as a ``FailedDraining`` warning on
the node with the server's words. At the deadline the host goes away whatever still runs on
it: the node stops (``Network.node_up``), and its pods die without a graceful shutdown (the
node controller marks them not ready and evicts them five minutes later, as for any lost node).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from datetime import datetime
from typing import Any

from ..k8s.objects import EventRecorder, pod_is_active
from ..k8s.store import ApiError, Store, iso
from .daemonsets import is_daemon_pod
from .disruption import check_eviction

COMPONENT = "node-drainer"


class NodeMaintenance:
    def __init__(self, store: Store, events: EventRecorder, node_up: MutableMapping[str, bool]) -> None:
        self.store = store
        self.events = events
        self.node_up = node_up
        self.scheduled: dict[str, datetime] = {}  # node -> when its host goes away
        self.retired: set[str] = set()  # nodes whose host went away (until they are replaced)

    def reconcile(self) -> None:
        if not self.scheduled:
            return
        now = self.store.clock()
        for name, deadline in sorted(self.scheduled.items()):
            node = self.store.get("Node", None, name)
            if node is None:
                continue
            if not node["spec"].get("unschedulable"):
                node["spec"]["unschedulable"] = True
                self.store.touch(node, spec_changed=True)
                self.events.record(node, "Normal", "NodeMaintenance",
                                   f"Draining node for scheduled host maintenance at {iso(deadline)}", COMPONENT)
            # A DaemonSet's pod is not drained (it would only come back): what counts is the workload.
            pods = [p for p in self.store.list("Pod") if p["spec"].get("nodeName") == name and pod_is_active(p)
                    and not is_daemon_pod(p)]
            if now >= deadline:
                del self.scheduled[name]
                self.retired.add(name)
                self.node_up[name] = False
                self.events.record(node, "Warning", "HostRetired",
                                   f"Host retired for scheduled maintenance with {len(pods)} pod(s) still running",
                                   COMPONENT)
                continue
            for pod in pods:
                self._evict(node, pod)

    def _evict(self, node: dict[str, Any], pod: dict[str, Any]) -> None:
        md = pod["metadata"]
        try:
            check_eviction(self.store, pod)
        except ApiError as e:
            self.events.record(node, "Warning", "FailedDraining",
                               f"Failed to drain node, pod {md['namespace']}/{md['name']}: {e.message}", COMPONENT)
            return
        self.store.delete("Pod", md["namespace"], md["name"])

    def cancel(self, node: str) -> None:
        """The maintenance is over: the node (its replacement host) is back and schedulable."""
        self.scheduled.pop(node, None)
        self.retired.discard(node)
        self.node_up[node] = True
        obj = self.store.get("Node", None, node)
        if obj is not None and obj["spec"].get("unschedulable"):
            del obj["spec"]["unschedulable"]
            self.store.touch(obj, spec_changed=True)
