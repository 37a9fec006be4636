"""NetworkPolicy enforcement on the twin's pod network: the traffic engine's calls and exec'd
clients ask :class:`PolicyNetwork` before connecting (semantics: k8s/network_policy.py). A
denied packet is dropped, not refused, so the caller sees a connect timeout. The hook in the
traffic path is one memoised lookup per call (decisions are keyed by the two pods' namespaces
and labels and the port, and forgotten only when NetworkPolicies or Namespaces change)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..k8s.network_policy import EXTERNAL, Peer, PolicyEvaluator
from ..k8s.store import Store

if TYPE_CHECKING:
    from .kubelet import Container


class PolicyNetwork(PolicyEvaluator):
    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._ports: dict[tuple[str, str], tuple[str, str, int]] = {}  # service -> (its rv, port name, number)
        # The per-call answer, by (caller pod uid, "" for the load balancer, "?" for an unknown
        # caller; target pod uid; Service): valid while no policy, namespace, Service or pod
        # label changed (prepare()). The traffic engine reads it inline before call_allowed.
        self.pairs: dict[tuple[str, str, str], bool] = {}
        self._uid_peers: dict[str, Peer] = {}
        self._inputs: tuple[int, ...] = ()

    def prepare(self, containers: dict[str, Container]) -> None:
        """Once a tick, before traffic: note every container's pod as policies see it, and
        forget the per-call answers only if something they depend on changed."""
        self.refresh()
        if not self.active:
            return
        inputs = self.store.kind_version("NetworkPolicy", "Namespace", "Service")
        stale = inputs != self._inputs
        peers: dict[str, Peer] = {}
        known = self._uid_peers
        for uid, c in containers.items():
            peer = self.peer(c.namespace, c.pod_name)
            if peer is not None:
                peers[uid] = peer
                if not stale:  # (peer() gives the same Peer while the pod is unchanged: ``is`` answers most)
                    before = known.get(uid)
                    stale = before is not None and before is not peer and before != peer
        if stale or len(self.pairs) > 65536:
            self.pairs.clear()
        self._uid_peers, self._inputs = peers, inputs

    def _service_port(self, namespace: str, service: str, target: Container) -> tuple[str, int]:
        """The Service's (first) target port on its pods, as a (name, number) pair."""
        svc = self.store.get("Service", namespace, service)
        if svc is None:
            return "", 0
        rv = svc["metadata"]["resourceVersion"]
        cached = self._ports.get((namespace, service))
        if cached is not None and cached[0] == rv:
            return cached[1], cached[2]
        ports = (svc.get("spec") or {}).get("ports") or [{}]
        tport = ports[0].get("targetPort", ports[0].get("port", 0))
        pod = self.store.get("Pod", namespace, target.pod_name) or {}
        declared = [p for c in (pod.get("spec") or {}).get("containers") or [] for p in c.get("ports") or []]
        entry: dict[str, Any] = next((p for p in declared if p.get("containerPort") == tport or p.get("name") == tport), {})
        name, number = entry.get("name", ""), int(entry.get("containerPort") or (tport if isinstance(tport, int) else 0))
        self._ports[(namespace, service)] = (rv, name, number)
        return name, number

    def call_allowed(self, caller: Optional[Container], external: bool, target: Container, service: str) -> bool:
        """The traffic engine's check: may ``caller`` (or, ``external``, the load balancer)
        reach ``target`` through ``service``? An unknown caller (a probe's or hook's call) may."""
        key = ("" if external else caller.pod_uid if caller is not None else "?", target.pod_uid, service)
        answer = self.pairs.get(key)
        if answer is None:
            answer = self.pairs[key] = self._call_allowed(caller, external, target, service)
        return answer

    def _call_allowed(self, caller: Optional[Container], external: bool, target: Container, service: str) -> bool:
        if external:
            src: Optional[Peer] = EXTERNAL
        elif caller is None:
            return True
        else:
            src = self._uid_peers.get(caller.pod_uid) or self.peer(caller.namespace, caller.pod_name)
        dst = self._uid_peers.get(target.pod_uid) or self.peer(target.namespace, target.pod_name)
        if src is None or dst is None:
            return True
        name, number = self._service_port(target.namespace, service, target)
        return self.allows(src, dst, name, number)

    def connection_allowed(self, namespace: str, pod_name: str, target: Container, number: int) -> bool:
        """An exec'd client's check: may the pod ``namespace/pod_name`` connect to ``target``
        on port ``number``?"""
        self.refresh()
        if not self.active:
            return True
        src, dst = self.peer(namespace, pod_name), self.peer(target.namespace, target.pod_name)
        if src is None or dst is None:
            return True
        pod = self.store.get("Pod", target.namespace, target.pod_name) or {}
        name = next((p.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []
                     for p in c.get("ports") or [] if p.get("containerPort") == number), "")
        return self.allows(src, dst, name, number)

