"""Faults of time-bound trust: a node whose clock is wrong, a credential past its expiry.

Both break calls that pass every other check: the network delivers them, the handler code is
fine, and the callee refuses them because a timestamp (a token's issue time, a certificate's
``notAfter``) is outside what its clock accepts.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Optional

from ..provenance import EvidenceRef
from .base import Fault, FaultKind, World, node_evidence
from .infrastructure import drained, impact_on_nodes, uncordon

BusyKey = tuple[str, str]


class ClockSkew(FaultKind):
    """A node's clock drifts far from true time (its chrony/NTP daemon stopped, then the VM was
    suspended and resumed by the host; ``params.skew_seconds``, ahead if positive). Every call
    between pods carries a short-lived signed token (twin/clocks.py: 5 minutes, 60 s leeway):
    tokens issued on the node are refused elsewhere, and tokens from elsewhere are refused on it.

    Effects: only the requests served by or sent from pods on that node fail, with HTTP 401
    ("token has invalid claims: token used before issued" or "… token is expired") in the callee
    pods' logs and the callers' errors; ServiceHighErrorRate on the services with pods there and
    their callers, a partial error ratio that follows the pods on that node; ``kubectl exec …
    date`` in a pod on it shows the wrong time. Restarting the pods in place changes nothing:
    the node's clock is still wrong.
    Repair: cordon the node and drain it (the pods move to nodes whose clocks are right).
    Cleanup: the node's clock is stepped back (chrony restarted) and the node uncordoned."""

    name = "clock-skew"
    family = "infrastructure"
    description = "a node's clock drifts; tokens signed or checked on it are refused"
    component_form = "node:<node>"
    repair = "cordon the node and drain it (kubectl cordon/drain)"
    judge = "the node is cordoned and no active application pod is bound to it"
    #: How far the clock is off when the fault is found (seconds; a suspended VM's clock stays
    #: where it was, one with a bad NTP source runs ahead), drawn per fault.
    SKEWS = (-1800, -900, 900, 1800)

    @staticmethod
    def choose(rng: random.Random, targets: Any, free: Callable[[BusyKey], bool]
               ) -> Optional[tuple[str, dict[str, Any], list[BusyKey]]]:
        """One node of a zone no other node or zone fault impairs (the schedule's rule for
        node kinds), so draining it leaves a healthy zone to move to."""
        nodes = [n for n, z in targets.node_zone.items()
                 if free(("node", n)) and free(("zone", z)) and targets.others_healthy(z, free)]
        if not nodes:
            return None
        node = rng.choice(nodes)
        return ("cluster", {"node": node, "skew_seconds": rng.choice(ClockSkew.SKEWS)},
                [("node", node), ("impaired", targets.node_zone[node])])

    def inject(self, world: World, fault: Fault) -> None:
        node = fault.params["node"]
        skew = float(fault.params.get("skew_seconds", 900))
        world.cluster.network.clock_skew[node] = skew
        zone = world.cluster.network.node_zone.get(node, "")
        fault.component = f"node:{node}"
        fault.nodes = {node}
        fault.zones = {zone}
        fault.description = f"the clock of {node} ({zone}) is {abs(skew) / 60:.0f} min {'ahead' if skew > 0 else 'behind'}"
        fault.impact = impact_on_nodes(self, world, {node})

    def mitigated(self, world: World, fault: Fault) -> bool:
        return drained(world, {fault.params["node"]})

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return node_evidence({fault.params["node"]})

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.network.clock_skew.pop(fault.params["node"], None)
        uncordon(world, fault.params["node"])
