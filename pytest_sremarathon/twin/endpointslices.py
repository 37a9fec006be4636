"""The EndpointSlice controller: one ``discovery.k8s.io/v1`` EndpointSlice per selector Service,
kept with its Endpoints.

Current clients and kube-proxy read slices, not Endpoints; the real controller computes both
from the same pods, so a slice here is derived from the Service's Endpoints (its ready and
not-ready addresses) in the same pass that wrote them — a client watching slices sees them move
in the same virtual moment as Endpoints. Pods leave the store at once when deleted (the twin
has no graceful termination), so ``terminating`` is always false.
"""

from __future__ import annotations

from typing import Any

from ..k8s.objects import owner_ref
from ..k8s.store import Store

SERVICE_NAME = "kubernetes.io/service-name"
MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
CONTROLLER = "endpointslice-controller.k8s.io"
ZONE = "topology.kubernetes.io/zone"


class EndpointSliceController:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._synced: tuple[int, ...] = ()
        # (namespace, service) -> what its slice was computed from (see _sync) at a pass that
        # wrote nothing for it: the same inputs give the same slice, so it is not rebuilt.
        self._idle: dict[tuple[str, str], tuple[Any, ...]] = {}

    def reconcile(self) -> None:
        # A slice is a function of its Endpoints, its Service and the nodes' zones alone.
        inputs = self.store.kind_version("Endpoints", "Service", "EndpointSlice", "Node")
        if inputs == self._synced:
            return
        self._sync()
        self._synced = self.store.kind_version("Endpoints", "Service", "EndpointSlice", "Node")

    def _ours(self) -> dict[tuple[str, str], dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for s in self.store.list("EndpointSlice"):
            labels = s["metadata"].get("labels") or {}
            if labels.get(MANAGED_BY) == CONTROLLER and labels.get(SERVICE_NAME):
                out.setdefault((s["metadata"]["namespace"], labels[SERVICE_NAME]), s)
        return out

    def _sync(self) -> None:
        slices = self._ours()
        zones: dict[str, str] = {}
        for node in self.store.list("Node"):
            zones[node["metadata"]["name"]] = (node["metadata"].get("labels") or {}).get(ZONE, "")
        wanted: set[tuple[str, str]] = set()
        zone_key = tuple(zones.items())
        idle, self._idle = self._idle, {}
        for svc in self.store.list("Service"):
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            if not (svc.get("spec") or {}).get("selector"):
                continue  # like Endpoints: a selector-less Service's slices are its owner's to write
            ep = self.store.get("Endpoints", ns, name)
            if ep is None:
                continue
            wanted.add((ns, name))
            current = slices.get((ns, name))
            # All this step reads: the Endpoints, the slice (which one, and its version) and the
            # zones; the Service only for its selector, checked above.
            inputs = (ep["metadata"]["resourceVersion"], zone_key, None if current is None else
                      (current["metadata"].get("uid"), current["metadata"]["resourceVersion"]))
            if idle.get((ns, name)) == inputs:
                self._idle[(ns, name)] = inputs
                continue
            endpoints, ports = self._endpoints(ep, zones)
            if current is None:
                self.store.create({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"generateName": f"{name}-", "namespace": ns,
                                 "labels": {SERVICE_NAME: name, MANAGED_BY: CONTROLLER},
                                 "annotations": {}, "ownerReferences": [owner_ref(svc)]},
                    "addressType": "IPv4", "endpoints": endpoints, "ports": ports})
            elif current.get("endpoints") != endpoints or current.get("ports") != ports:
                current["endpoints"], current["ports"] = endpoints, ports
                self.store.touch(current)
            else:
                self._idle[(ns, name)] = inputs
        for key, s in slices.items():
            if key not in wanted:
                self.store.delete("EndpointSlice", s["metadata"]["namespace"], s["metadata"]["name"])

    @staticmethod
    def _endpoints(ep: dict[str, Any], zones: dict[str, str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        endpoints: list[dict[str, Any]] = []
        ports: list[dict[str, Any]] = []
        for subset in ep.get("subsets") or []:
            for ready, field in ((True, "addresses"), (False, "notReadyAddresses")):
                for addr in subset.get(field) or []:
                    e: dict[str, Any] = {"addresses": [addr["ip"]],
                                         "conditions": {"ready": ready, "serving": ready, "terminating": False}}
                    if addr.get("nodeName"):
                        e["nodeName"] = addr["nodeName"]
                        if zones.get(addr["nodeName"]):
                            e["zone"] = zones[addr["nodeName"]]
                    if addr.get("targetRef"):
                        e["targetRef"] = dict(addr["targetRef"])
                    endpoints.append(e)
            if not ports:
                ports = [{"name": p.get("name", ""), "port": p.get("port"), "protocol": p.get("protocol", "TCP")}
                         for p in subset.get("ports") or []]
        endpoints.sort(key=lambda e: e["addresses"][0])
        return endpoints, ports
