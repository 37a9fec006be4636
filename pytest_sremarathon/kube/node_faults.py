"""Infrastructure faults on a kind cluster, made real on the node containers.

Each builder returns an :class:`Action`: the commands that inject the fault and the commands
that clean it up (what the on-call human does when the fault's window ends), as argv lists —
pure data, so they can be read, logged and checked; :func:`execute` runs them.

================  =======================================================================
node failure      ``docker pause <node>`` (kubelet and pods freeze; the node goes NotReady)
                  or ``docker stop``; cleanup ``docker unpause`` / ``docker start``
zone outage       the same for every node of the zone
zone partition    ``iptables`` in each node of both zones: DROP to and from the other zone's
                  node addresses and pod CIDRs, in a chain of its own (cleanup removes it)
zone latency      ``tc`` in each node of the zone: a ``prio`` qdisc whose fourth band adds
                  ``netem delay``, selected by ``u32`` filters for the other zones' nodes and
                  pod CIDRs only (traffic inside the zone and to the control plane is untouched)
zone DNS outage   ``iptables`` DROP of DNS (53/udp, 53/tcp) from the zone's pod CIDRs
================  =======================================================================

kind's node image ships ``iptables`` and ``tc``; the commands run as root inside the node
container with ``docker exec``.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import SremarathonError
from .kind import ZONE_LABEL

IFACE = "eth0"


class NodeFaultError(SremarathonError):
    pass


@dataclass(frozen=True)
class NodeInfo:
    name: str  # the Kubernetes node name
    zone: Optional[str]
    address: str  # InternalIP
    pod_cidrs: tuple[str, ...] = ()
    container: str = ""  # the node's Docker container (kind: from spec.providerID)

    def __post_init__(self) -> None:
        if not self.container:
            object.__setattr__(self, "container", self.name)

    @property
    def networks(self) -> tuple[str, ...]:
        return (f"{self.address}/32",) + self.pod_cidrs


def nodes_from_api(nodes: Iterable[dict[str, Any]]) -> list[NodeInfo]:
    """NodeInfo of every node in a ``/api/v1/nodes`` list."""
    out = []
    for n in nodes:
        md, spec, status = n["metadata"], n.get("spec") or {}, n.get("status") or {}
        address = next((a["address"] for a in status.get("addresses") or [] if a.get("type") == "InternalIP"), "")
        cidrs = tuple(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))
        provider = spec.get("providerID") or ""
        container = provider.rsplit("/", 1)[-1] if provider.startswith("kind://") else md["name"]
        out.append(NodeInfo(md["name"], (md.get("labels") or {}).get(ZONE_LABEL), address, cidrs, container))
    return sorted(out, key=lambda x: x.name)


@dataclass(frozen=True)
class Action:
    description: str
    inject: tuple[tuple[str, ...], ...]
    cleanup: tuple[tuple[str, ...], ...]


def _exec(node: NodeInfo, script: str) -> tuple[str, ...]:
    return ("docker", "exec", node.container, "sh", "-c", script)


def _zone(nodes: Sequence[NodeInfo], zone: str) -> list[NodeInfo]:
    members = [n for n in nodes if n.zone == zone]
    if not members:
        raise NodeFaultError(f"no node in zone {zone!r} (zones: {sorted({n.zone for n in nodes if n.zone})})")
    return members


def _node(nodes: Sequence[NodeInfo], name: str) -> NodeInfo:
    for n in nodes:
        if n.name == name:
            return n
    raise NodeFaultError(f"no node {name!r} (nodes: {', '.join(n.name for n in nodes)})")


# -- machines -------------------------------------------------------------------------------------

def node_failure(nodes: Sequence[NodeInfo], name: str, *, mode: str = "pause") -> Action:
    node = _node(nodes, name)
    if mode == "pause":
        return Action(f"node {name} frozen (docker pause)", (("docker", "pause", node.container),),
                      (("docker", "unpause", node.container),))
    if mode == "stop":
        return Action(f"node {name} powered off (docker stop)", (("docker", "stop", "--time", "0", node.container),),
                      (("docker", "start", node.container),))
    raise ValueError(f"mode must be 'pause' or 'stop', got {mode!r}")


def zone_outage(nodes: Sequence[NodeInfo], zone: str, *, mode: str = "pause") -> Action:
    parts = [node_failure(nodes, n.name, mode=mode) for n in _zone(nodes, zone)]
    return Action(f"zone {zone} down ({len(parts)} nodes)", tuple(c for p in parts for c in p.inject),
                  tuple(c for p in parts for c in p.cleanup))


# -- network --------------------------------------------------------------------------------------

def _chain(kind: str, *names: str) -> str:
    """An iptables chain name (≤ 28 characters) for one fault."""
    return f"SREM-{kind}-" + hashlib.sha1("|".join(sorted(names)).encode()).hexdigest()[:8]


def _drop_script(chain: str, rules: list[str], hooks: Sequence[str]) -> str:
    lines = [f"iptables -w -N {chain} 2>/dev/null || iptables -w -F {chain}"]
    lines += [f"iptables -w -C {hook} -j {chain} 2>/dev/null || iptables -w -I {hook} 1 -j {chain}" for hook in hooks]
    lines += [f"iptables -w -A {chain} {rule} -j DROP" for rule in rules]
    return " && ".join(lines)


def _undrop_script(chain: str, hooks: Sequence[str]) -> str:
    lines = [f"while iptables -w -D {hook} -j {chain} 2>/dev/null; do :; done" for hook in hooks]
    lines += [f"iptables -w -F {chain} 2>/dev/null", f"iptables -w -X {chain} 2>/dev/null", "true"]
    return "; ".join(lines)


def zone_partition(nodes: Sequence[NodeInfo], zone: str, peer: str) -> Action:
    """Nodes (and pods) of ``zone`` and ``peer`` cannot reach each other; the control plane
    still reaches both."""
    a, b = _zone(nodes, zone), _zone(nodes, peer)
    chain = _chain("PART", zone, peer)
    hooks = ("INPUT", "OUTPUT", "FORWARD")
    inject, cleanup = [], []
    for mine, theirs in ((a, b), (b, a)):
        rules = [f"{flag} {net}" for other in theirs for net in other.networks for flag in ("-s", "-d")]
        for node in mine:
            inject.append(_exec(node, _drop_script(chain, rules, hooks)))
            cleanup.append(_exec(node, _undrop_script(chain, hooks)))
    return Action(f"network partition between {zone} and {peer}", tuple(inject), tuple(cleanup))


def zone_latency(nodes: Sequence[NodeInfo], zone: str, ms: float) -> Action:
    """Every packet from a node of ``zone`` to another zone waits ``ms`` more."""
    members = _zone(nodes, zone)
    others = [n for n in nodes if n.zone and n.zone != zone]
    inject, cleanup = [], []
    for node in members:
        lines = [f"tc qdisc del dev {IFACE} root 2>/dev/null; true",
                 f"tc qdisc add dev {IFACE} root handle 1: prio bands 4",
                 f"tc qdisc add dev {IFACE} parent 1:4 handle 40: netem delay {ms:g}ms"]
        lines += [f"tc filter add dev {IFACE} protocol ip parent 1:0 prio 1 u32 match ip dst {net} flowid 1:4"
                  for other in others for net in other.networks]
        inject.append(_exec(node, lines[0] + "; " + " && ".join(lines[1:])))
        cleanup.append(_exec(node, f"tc qdisc del dev {IFACE} root 2>/dev/null; true"))
    return Action(f"{ms:g}ms added to traffic leaving {zone} for other zones", tuple(inject), tuple(cleanup))


def zone_dns_outage(nodes: Sequence[NodeInfo], zone: str) -> Action:
    """Pods in ``zone`` cannot resolve names (their DNS packets are dropped)."""
    chain = _chain("DNS", zone)
    inject, cleanup = [], []
    for node in _zone(nodes, zone):
        rules = [f"-s {cidr} -p {proto} --dport 53" for cidr in node.pod_cidrs for proto in ("udp", "tcp")]
        inject.append(_exec(node, _drop_script(chain, rules, ("FORWARD", "INPUT"))))
        cleanup.append(_exec(node, _undrop_script(chain, ("FORWARD", "INPUT"))))
    return Action(f"DNS unreachable from pods in {zone}", tuple(inject), tuple(cleanup))


# -- execution ------------------------------------------------------------------------------------

@dataclass
class Executed:
    action: Action
    outputs: list[str] = field(default_factory=list)


def execute(commands: Iterable[Sequence[str]], *, timeout: float = 60, check: bool = True) -> list[str]:
    """Run the commands in order; their combined output. Raises :class:`NodeFaultError` on the
    first failure when ``check``."""
    outputs = []
    for argv in commands:
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise NodeFaultError(f"{argv[0]} is not installed") from None
        except subprocess.TimeoutExpired:
            raise NodeFaultError(f"{' '.join(argv[:4])} did not finish within {timeout:g}s") from None
        outputs.append(proc.stdout + proc.stderr)
        if check and proc.returncode != 0:
            raise NodeFaultError(f"{' '.join(argv[:4])} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return outputs


def inject(action: Action) -> Executed:
    return Executed(action, execute(action.inject))


def cleanup(action: Action) -> Executed:
    """Cleanups run every command even when one fails (a node may be gone), then report."""
    outputs, errors = [], []
    for argv in action.cleanup:
        try:
            outputs.extend(execute([argv]))
        except NodeFaultError as exc:
            errors.append(str(exc))
    if errors:
        raise NodeFaultError(f"cleanup of {action.description!r} incomplete: " + "; ".join(errors))
    return Executed(action, outputs)
