"""NetworkPolicy enforcement for the twin's pod network (``networking.k8s.io/v1``).

The semantics a CNI (Calico, Cilium) gives the real API: a pod selected by some policy with
``Ingress`` in its ``policyTypes`` accepts only what one of those policies' rules allows (the
union of rules); unselected pods accept everything. Likewise for ``Egress`` at the source. A
rule's peers are ``podSelector`` (in the policy's namespace), ``namespaceSelector`` (labels
of namespaces), both (pods in the selected namespaces) or ``ipBlock``; its ``ports`` match the
destination port by number, name or ``endPort`` range; an empty ``from``/``to`` matches every
peer. A denied packet is dropped, not refused: the caller sees a connect timeout.

``ipBlock`` applies to traffic from outside the cluster — the cloud load balancer in front of
each app's entry Service, whose address pods see as :data:`LOAD_BALANCER_IP` — and not to pod
addresses (CNIs treat pod IPs in ipBlocks inconsistently; the policies' own docs advise
against it).

Decisions depend only on the two pods' namespaces and labels and the port, so they are
memoised by exactly that key and forgotten only when a NetworkPolicy or a Namespace changes
(the two kinds' store versions): the traffic path pays two dict lookups per call.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ..k8s.selectors import match_selector_object
from ..k8s.store import Store

if TYPE_CHECKING:
    from .kubelet import Container

#: The address the app's ingress traffic arrives from (TEST-NET-3, documentation range).
LOAD_BALANCER_IP = "203.0.113.10"

Labels = frozenset  # frozenset of (key, value)


@dataclass(frozen=True)
class Peer:
    """One side of a connection: a pod (namespace, labels, its named ports) or an address."""

    namespace: Optional[str]  # None: outside the cluster
    labels: Labels
    ip: str = ""


def pod_peer(pod: dict[str, Any]) -> Peer:
    md = pod["metadata"]
    return Peer(md.get("namespace", ""), frozenset((md.get("labels") or {}).items()))


EXTERNAL = Peer(None, frozenset(), LOAD_BALANCER_IP)


def _types(policy: dict[str, Any]) -> list[str]:
    spec = policy.get("spec") or {}
    types = spec.get("policyTypes")
    if types:
        return list(types)
    return ["Ingress", "Egress"] if spec.get("egress") is not None else ["Ingress"]


class PolicyNetwork:
    """Answers "may this connection be made?" for the traffic engine and exec'd clients."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._versions: Optional[tuple[int, ...]] = None
        self._by_ns: dict[str, list[dict[str, Any]]] = {}
        self._ns_labels: dict[str, dict[str, str]] = {}
        self._decisions: dict[tuple[Peer, Peer, str, int], bool] = {}
        self._peers: dict[tuple[str, str], tuple[str, Peer]] = {}  # pod -> (its resourceVersion, peer)
        self._ports: dict[tuple[str, str], tuple[str, str, int]] = {}  # service -> (its rv, port name, number)
        self.active = False  # is there any policy at all (else everything is allowed)?

    def refresh(self) -> None:
        versions = self.store.kind_version("NetworkPolicy", "Namespace")
        if versions == self._versions:
            return
        self._versions = versions
        self._decisions.clear()
        self._by_ns = {}
        for p in self.store.list("NetworkPolicy"):
            self._by_ns.setdefault(p["metadata"]["namespace"], []).append(p)
        self._ns_labels = {n["metadata"]["name"]: dict(n["metadata"].get("labels") or {})
                           for n in self.store.list("Namespace")}
        self.active = bool(self._by_ns)

    def peer(self, namespace: str, pod_name: str) -> Optional[Peer]:
        """The pod as policies see it (None: no such pod), re-read when the pod changed."""
        pod = self.store.get("Pod", namespace, pod_name)
        if pod is None:
            return None
        rv = pod["metadata"]["resourceVersion"]
        cached = self._peers.get((namespace, pod_name))
        if cached is not None and cached[0] == rv:
            return cached[1]
        if len(self._peers) > 4096:  # pods come and go over a marathon: forget the departed
            self._peers.clear()
        found = pod_peer(pod)
        self._peers[(namespace, pod_name)] = (rv, found)
        return found

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
        if external:
            src: Optional[Peer] = EXTERNAL
        elif caller is None:
            return True
        else:
            src = self.peer(caller.namespace, caller.pod_name)
        dst = self.peer(target.namespace, target.pod_name)
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

    def allows(self, src: Peer, dst: Peer, port: str, number: int) -> bool:
        """May ``src`` open a connection to pod ``dst`` on container port ``number`` (named
        ``port``, or "")? Call :meth:`refresh` first."""
        if not self.active:
            return True
        key = (src, dst, port, number)
        answer = self._decisions.get(key)
        if answer is None:
            answer = self._decisions[key] = self._egress_ok(src, dst, port, number) and \
                self._ingress_ok(src, dst, port, number)
        return answer

    # -- evaluation ---------------------------------------------------------------------------
    def _selecting(self, pod: Peer, direction: str) -> list[dict[str, Any]]:
        labels = dict(pod.labels)
        return [p for p in self._by_ns.get(pod.namespace or "", [])
                if direction in _types(p) and match_selector_object((p.get("spec") or {}).get("podSelector") or {},
                                                                    labels)]

    def _ingress_ok(self, src: Peer, dst: Peer, port: str, number: int) -> bool:
        policies = self._selecting(dst, "Ingress")
        if not policies:
            return True
        return any(self._rule_ok(rule.get("from"), src, p["metadata"]["namespace"], rule.get("ports"), port, number)
                   for p in policies for rule in (p.get("spec") or {}).get("ingress") or [])

    def _egress_ok(self, src: Peer, dst: Peer, port: str, number: int) -> bool:
        if src.namespace is None:
            return True
        policies = self._selecting(src, "Egress")
        if not policies:
            return True
        return any(self._rule_ok(rule.get("to"), dst, p["metadata"]["namespace"], rule.get("ports"), port, number)
                   for p in policies for rule in (p.get("spec") or {}).get("egress") or [])

    def _rule_ok(self, peers: Optional[list[dict[str, Any]]], other: Peer, policy_ns: str,
                 ports: Optional[list[dict[str, Any]]], port: str, number: int) -> bool:
        if ports and not any(_port_matches(p, port, number) for p in ports):
            return False
        if not peers:
            return True  # no from/to: every peer
        return any(self._peer_matches(peer, other, policy_ns) for peer in peers)

    def _peer_matches(self, peer: dict[str, Any], other: Peer, policy_ns: str) -> bool:
        block = peer.get("ipBlock")
        if block is not None:
            if not other.ip:
                return False
            addr = ipaddress.ip_address(other.ip)
            try:
                if addr not in ipaddress.ip_network(block.get("cidr", ""), strict=False):
                    return False
                return not any(addr in ipaddress.ip_network(e, strict=False) for e in block.get("except") or [])
            except ValueError:
                return False
        if other.namespace is None:
            return False  # pod and namespace selectors select pods only
        ns_selector, pod_selector = peer.get("namespaceSelector"), peer.get("podSelector")
        if ns_selector is not None:
            if not match_selector_object(ns_selector, self._ns_labels.get(other.namespace, {})):
                return False
        elif other.namespace != policy_ns:
            return False
        return pod_selector is None or match_selector_object(pod_selector, dict(other.labels))


def _port_matches(rule: dict[str, Any], port: str, number: int) -> bool:
    if (rule.get("protocol") or "TCP") != "TCP":
        return False
    want = rule.get("port")
    if want is None:
        return True
    if isinstance(want, str) and not want.isdigit():
        return bool(port) and want == port
    lo = int(want)
    return lo <= number <= int(rule.get("endPort") or lo)
