"""NetworkPolicy semantics (``networking.k8s.io/v1``): may one pod connect to another?

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
from typing import Any, Optional

from .selectors import match_selector_object
from .store import Store

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


class PolicyEvaluator:
    """Answers "may this connection be made?" from the store's NetworkPolicies and Namespaces:
    the twin's network enforces it (twin/network_policy.py), fault judges read it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._versions: Optional[tuple[int, ...]] = None
        self._by_ns: dict[str, list[dict[str, Any]]] = {}
        self._ns_labels: dict[str, dict[str, str]] = {}
        self._decisions: dict[tuple[Peer, Peer, str, int], bool] = {}
        self._peers: dict[tuple[str, str], tuple[str, Peer]] = {}  # pod -> (its resourceVersion, peer)
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
