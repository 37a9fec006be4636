"""Autoscaling misconfiguration: a curated change to a service's HorizontalPodAutoscaler that
leaves it unable to follow a campaign's traffic.

Every replicated stateless service of the built-in apps has an autoscaler (CPU utilisation,
target 70%, between its Deployment's count and twice that; ``manifests/autoscaling.yaml``).
On a normal day none of them moves, so a broken one shows nothing; it bites when the load
needs it. These kinds therefore arrive as a change *and* the campaign the autoscaler was
there for: from the fault's start the app's ingress traffic is multiplied so that the
service needs its whole CPU limit per pod at the size the broken autoscaler allows
(at its intended maximum, about half), and the twin's
``cpu_overload_timeouts`` is on, as during a traffic surge. Every other service of the app
grows within its own autoscaler's range and keeps up; the one whose autoscaler the change
broke saturates: its latency climbs and the share its pods cannot serve times out.

The judge reads the cluster: the live autoscaler no longer has the bad value (reverted, fixed
or removed), the service has a ready pod, and over the last two minutes it averaged below 70%
of its CPU limit per ready pod. Scaling the Deployment by hand is no repair: the autoscaler
sets the size back within a sync period, as a real one does.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from ..provenance import EvidenceRef
from .base import Fault, World, workload_evidence
from .change import ChangeFault, _matches, head_manifest, parse_path, resolve
from .infrastructure import SATURATED, cpu_limit, typical, utilisation

#: CPU per pod, as a share of the limit, the campaign asks of the service at the size its
#: broken autoscaler allows: all of it, so its requests queue (at its intended maximum, half).
CAMPAIGN_LOAD = 1.0
OBJECT = "HorizontalPodAutoscaler"


class AutoscalerFault(ChangeFault):
    """A change to the service's HorizontalPodAutoscaler (``object: HorizontalPodAutoscaler``,
    ``field`` a dotted path into it, ``value`` the bad value), then a campaign; see the module
    docstring. Subclasses say what size the broken autoscaler allows (:meth:`allowed`)."""

    arrives = ("a curated change to the service's HorizontalPodAutoscaler through the pipeline, then a "
               "campaign's traffic that needs the autoscaler")
    judge = (
        "the live autoscaler no longer has the bad value, and over the last two minutes the service "
        "has a ready pod and averages below 70% of its CPU limit per ready pod"
    )

    def __init__(self) -> None:
        self._factor: dict[str, float] = {}  # fault id -> the campaign's traffic multiplier

    def busy_keys(self, app: str) -> list[tuple[str, str]]:
        """The campaign is the app's ingress traffic: the schedule lets no traffic surge (nor
        another campaign) share it."""
        return [("surge", app)]

    # -- the change ----------------------------------------------------------------------------
    def _target(self, world: World, fault: Fault) -> tuple[str, list[Any], Optional[str]]:
        tag = self.tag(world, fault)
        if tag.object != OBJECT or not tag.field:
            raise ValueError(f"curated change {fault.params['change']!r}: an autoscaler fault needs "
                             f"`object: {OBJECT}` and `field`")
        return tag.service, parse_path(tag.field), tag.value

    def _manifest(self, world: World, fault: Fault) -> Optional[dict[str, Any]]:
        return head_manifest(world, fault.app, OBJECT, self.tag(world, fault).service)

    def live(self, world: World, fault: Fault) -> bool:
        name, path, bad = self._target(world, fault)
        hpa = world.cluster.store.get(OBJECT, fault.app, name)
        return hpa is not None and _matches(resolve(hpa, path), bad)

    def in_head(self, world: World, fault: Fault) -> bool:
        _, path, bad = self._target(world, fault)
        doc = self._manifest(world, fault)
        return doc is not None and _matches(resolve(doc, path), bad)

    def allowed(self, hpa: dict[str, Any], bad: Optional[str]) -> int:
        """The replicas the broken autoscaler lets the service have."""
        raise NotImplementedError

    # -- the four operations ---------------------------------------------------------------------
    def inject(self, world: World, fault: Fault) -> None:
        ns, (name, _, bad) = fault.app, self._target(world, fault)
        hpa = world.cluster.store.get(OBJECT, ns, name)
        if hpa is None:
            raise ValueError(f"{self.name}: {ns} has no {OBJECT} {name!r}")
        now = world.cluster.store.clock()
        allowed = self.allowed(hpa, bad)
        limit = cpu_limit(world, ns, name)
        demand = typical(world, ns, name, "cpu_millicores", now)
        # Sized on the service's usual demand at this hour: what the campaign adds is the
        # autoscaler's job, up to its maximum.
        factor = CAMPAIGN_LOAD * allowed * limit / demand if demand > 0 else 10.0
        factor = round(min(max(factor, 1.5), 100.0), 1)
        super().inject(world, fault)
        self._factor[fault.id] = factor
        world.cluster.surge[ns] = world.cluster.surge.get(ns, 1.0) * factor
        world.cluster.network.cpu_overload_timeouts = True
        fault.description += f" (a campaign multiplies {ns}'s traffic {factor:g}x; the autoscaler allows {allowed})"

    def mitigated(self, world: World, fault: Fault) -> bool:
        name = self.tag(world, fault).service
        if self.live(world, fault) or not self.serving(world, fault):
            return False
        return utilisation(world, fault.app, name, since=fault.start) < SATURATED

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The autoscaler's spec, and the service's replica count and pods (the capacity it sets)."""
        name = self.tag(world, fault).service
        return [EvidenceRef(OBJECT, fault.app, name, "spec")] + workload_evidence(world, fault.app, name)

    def cleanup(self, world: World, fault: Fault) -> None:
        """The campaign ends; the on-call human reverts the change if it is still in."""
        factor = self._factor.pop(fault.id, None)
        surge = world.cluster.surge
        if factor is not None and fault.app in surge:
            rest = surge[fault.app] / factor
            if math.isclose(rest, 1.0, rel_tol=1e-6):
                surge.pop(fault.app)
            else:
                surge[fault.app] = rest
        world.cluster.network.cpu_overload_timeouts = bool(surge)
        super().cleanup(world, fault)


class HpaMaxCut(AutoscalerFault):
    """A change lowers the service's autoscaler ``maxReplicas`` below what its traffic needs
    (a cap meant for a quota, a copy from another service).

    Effects: when the campaign's traffic arrives, the autoscaler stops at the cut maximum
    (``ScalingLimited True TooManyReplicas`` in ``kubectl describe hpa``, TARGETS far above 70%);
    the service's pods run past their CPU limit, its latency climbs and part of its requests
    time out (latency and error alerts on it and its callers). Scaling the Deployment by hand is
    undone by the autoscaler within a sync period. Repair: revert the change (or raise
    ``maxReplicas`` back)."""

    name = "hpa-max-cut"
    description = "an autoscaler's maxReplicas cut below what the traffic needs"
    repair = ("revert the change (or raise the autoscaler's maxReplicas back); scaling the Deployment by hand is "
              "undone by the autoscaler")

    def allowed(self, hpa: dict[str, Any], bad: Optional[str]) -> int:
        return int(bad) if bad and bad.isdigit() else int((hpa.get("spec") or {}).get("minReplicas") or 1)


class HpaWrongTarget(AutoscalerFault):
    """A change points the service's autoscaler at a target it can never reach (an absolute
    CPU value per pod above the container's limit, where a utilisation was meant), so it never
    scales up and keeps the service at ``minReplicas``.

    Effects: under the campaign's traffic the autoscaler reports a metric below its target
    (``kubectl get hpa`` TARGETS like ``cpu: 480m/1``) and leaves the size alone while the pods
    run past their CPU limit: latency climbs, part of the requests time out. Scaling by hand is
    undone: the autoscaler scales back down to its minimum. Repair: revert the change (or set
    the target back to 70% utilisation)."""

    name = "hpa-wrong-target"
    description = "an autoscaler pointed at a target it never reaches"
    repair = ("revert the change (or set the autoscaler's target back to 70% CPU utilisation); scaling by hand is "
              "undone by the autoscaler")

    def allowed(self, hpa: dict[str, Any], bad: Optional[str]) -> int:
        return int((hpa.get("spec") or {}).get("minReplicas") or 1)


AUTOSCALING_KINDS = (HpaMaxCut, HpaWrongTarget)
