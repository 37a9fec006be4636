"""Change-induced faults in the namespace's network and admission controls: a NetworkPolicy
that drops a legitimate caller, a request the ResourceQuota has no room for, a LimitRange that
refuses a service's pods.

Each arrives as a curated change through the app's pipeline (the manifests'
``network-policies/<service>.yaml`` or ``quota.yaml``) and is repaired by reverting it. The judges read
the live objects and pods, and also demand that the control is still there: deleting every
NetworkPolicy, the quota or the LimitRange makes the symptoms go, but removes a security or
capacity control the namespace is meant to have — the documented repair restores the reviewed
policy; a blunt delete is not credited (nor is opening the callee to everyone, or raising the
quota to fit a typo).
"""

from __future__ import annotations

from typing import Any, Optional

from ..k8s.network_policy import Peer, PolicyEvaluator, pod_peer
from ..k8s.objects import condition
from ..k8s.quantity import cpu_millicores, memory_bytes
from ..provenance import EvidenceRef
from .base import Fault, World, workload_evidence
from .change import MISSING, ChangeFault, _matches, _pods, _ready_pods, parse_path, resolve

#: The labels of a pod that calls nothing: what a callee's policy must still refuse.
STRANGER = frozenset({("app", "sremarathon-policy-probe")})


def _service_port(world: World, ns: str, service: str, pod: dict[str, Any]) -> tuple[str, int]:
    svc = world.cluster.store.get("Service", ns, service) or {}
    ports = (svc.get("spec") or {}).get("ports") or [{}]
    tport = ports[0].get("targetPort", ports[0].get("port", 0))
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("containerPort") == tport or p.get("name") == tport:
                return p.get("name", ""), int(p.get("containerPort") or 0)
    return "", tport if isinstance(tport, int) else 0


class _ManifestObjectFault(ChangeFault):
    """The faulty value lives in one object of ``quota.yaml`` or ``network-policies/<service>.yaml``
    (``object`` its kind, ``key`` its name, ``field`` and ``value`` the bad value): in the
    head when the change's replaced text is in the file."""

    def _edit(self, world: World, fault: Fault) -> tuple[str, str]:
        e = self.curated(world, fault).edits[0]
        return e.file, e.replace

    def in_head(self, world: World, fault: Fault) -> bool:
        path, text = self._edit(world, fault)
        return text in world.pipelines.head_file(fault.app, path)

    def _object(self, world: World, fault: Fault) -> Optional[dict[str, Any]]:
        tag = self.tag(world, fault)
        return world.cluster.store.get(tag.object or "", fault.app, tag.key or "")

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        tag = self.tag(world, fault)
        out = [EvidenceRef(tag.object or "", fault.app, o["metadata"]["name"], "spec")
               for o in world.cluster.store.list(tag.object or "", fault.app)]
        return out + workload_evidence(world, fault.app, tag.service, replicas=False)


# -- NetworkPolicy ---------------------------------------------------------------------------------
class NetworkPolicyBlocksCaller(_ManifestObjectFault):
    """A change tightens the callee's NetworkPolicy so that one of its legitimate callers is no
    longer among the allowed peers (``service`` the callee, ``value`` the caller dropped).

    Effects: the caller's connections to the callee are dropped, not refused: every call waits
    out the caller's timeout (``deadline exceeded`` in the caller's logs, its latency at the
    timeout, ServiceHighErrorRate on the caller and its callers; a client span with no server
    span in traces; ``curl`` from a caller pod times out with exit 28). The callee looks healthy
    and its own metrics show nothing. Restarting either side changes nothing. Repair: revert the
    change (or put the caller back into the policy's allowed peers). Deleting the namespace's
    policies, or opening the callee to every pod, also ends the symptoms but removes the control:
    not credited."""

    name = "networkpolicy-blocks-caller"
    description = "a NetworkPolicy change drops a legitimate caller's connections"
    repair = "revert the change (or add the caller back to the policy's allowed peers)"
    judge = (
        "the live NetworkPolicies let every caller pod reach the callee's pods on the Service's port, "
        "still refuse a pod that is not a caller, and the callee has a ready pod"
    )

    def inject(self, world: World, fault: Fault) -> None:
        super().inject(world, fault)
        fault.impact = self.symptoms_from(world, fault.app, self._caller(world, fault))

    def _caller(self, world: World, fault: Fault) -> str:
        return self.tag(world, fault).value or ""

    def _check(self, world: World, fault: Fault) -> tuple[bool, bool]:
        """(every caller pod reaches every callee pod, a stranger is refused by all of them)."""
        store, ns, callee = world.cluster.store, fault.app, self.tag(world, fault).service
        policies = PolicyEvaluator(store)
        policies.refresh()
        targets = _pods(world, ns, callee)
        callers = [pod_peer(p) for p in _pods(world, ns, self._caller(world, fault))]
        reach, refused = True, True
        for pod in targets:
            dst = pod_peer(pod)
            name, number = _service_port(world, ns, callee, pod)
            reach = reach and all(policies.allows(src, dst, name, number) for src in callers)
            refused = refused and not policies.allows(Peer(ns, STRANGER), dst, name, number)
        return reach, refused

    def live(self, world: World, fault: Fault) -> bool:
        return not self._check(world, fault)[0]

    def mitigated(self, world: World, fault: Fault) -> bool:
        reach, refused = self._check(world, fault)
        return reach and refused and self.serving(world, fault)

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return [EvidenceRef("NetworkPolicy", fault.app, o["metadata"]["name"], "spec")
                for o in world.cluster.store.list("NetworkPolicy", fault.app)]


# -- ResourceQuota ---------------------------------------------------------------------------------
class QuotaBlocksRollout(_ManifestObjectFault):
    """A change raises a Deployment's resource request past what the namespace's ResourceQuota
    has room for (``object: Deployment``, ``field`` the request, ``value`` the bad value).

    Effects: the rollout cannot create its new pods: the ReplicaSet records ``FailedCreate``
    events (``pods "…" is forbidden: exceeded quota: compute, requested: requests.cpu=…``), the
    Deployment shows ``ReplicaFailure`` and its rollout stalls until the progress deadline
    (KubeDeploymentRolloutStuck, the pipeline's build failed); the old pods keep serving, and
    any that goes leaves the service with less capacity. Restarting pods changes nothing.
    Repair: revert the change. Raising or deleting the quota to fit the oversized request is not
    the documented repair: the quota is the namespace's capacity control and the change is what
    is wrong."""

    name = "quota-blocks-rollout"
    description = "a resource request the namespace's quota has no room for stalls a rollout"
    repair = "revert the change (not: raise or delete the quota)"
    judge = (
        "no live template or active pod of the service has the bad request, its rollout is complete "
        "without ReplicaFailure, and the namespace's quotas are still there, no larger than before"
    )

    def __init__(self) -> None:
        # fault id -> the namespace's quotas' hard limits at injection (not in fault.params:
        # those are the schedule's commitment, fixed before the run)
        self._quotas: dict[str, dict[str, dict[str, Any]]] = {}

    def inject(self, world: World, fault: Fault) -> None:
        self._quotas[fault.id] = {q["metadata"]["name"]: dict((q.get("spec") or {}).get("hard") or {})
                                  for q in world.cluster.store.list("ResourceQuota", fault.app)}
        super().inject(world, fault)
        fault.impact = {(fault.app, self.tag(world, fault).service)}

    def live(self, world: World, fault: Fault) -> bool:
        tag = self.tag(world, fault)
        path = parse_path(tag.field or "")
        d = world.cluster.store.get("Deployment", fault.app, tag.service)
        if d is not None and _matches(resolve(d, path), tag.value):
            return True
        pod_path = parse_path((tag.field or "")[len("spec.template."):])
        return any(_matches(resolve(p, pod_path), tag.value) for p in _pods(world, fault.app, tag.service))

    def _quota_kept(self, world: World, fault: Fault) -> bool:
        def value(resource: str, q: Any) -> float:
            return cpu_millicores(q) if resource.endswith("cpu") else \
                memory_bytes(q) if resource.endswith("memory") else float(str(q))

        for name, hard in self._quotas.get(fault.id, {}).items():
            q = world.cluster.store.get("ResourceQuota", fault.app, name)
            if q is None:
                return False
            now = (q.get("spec") or {}).get("hard") or {}
            if any(r not in now or value(r, now[r]) > value(r, v) for r, v in hard.items()):
                return False
        return True

    def mitigated(self, world: World, fault: Fault) -> bool:
        service = self.tag(world, fault).service
        d = world.cluster.store.get("Deployment", fault.app, service)
        if d is None or self.live(world, fault) or not self._quota_kept(world, fault):
            return False
        status = d.get("status") or {}
        want = int((d.get("spec") or {}).get("replicas", 1))
        complete = int(status.get("updatedReplicas", 0)) == want and int(status.get("availableReplicas", 0)) >= want
        return complete and condition(d, "ReplicaFailure") is None and self.serving(world, fault)

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        service = self.tag(world, fault).service
        return [EvidenceRef("ResourceQuota", fault.app, o["metadata"]["name"], "spec")
                for o in world.cluster.store.list("ResourceQuota", fault.app)] + \
            workload_evidence(world, fault.app, service, replicas=False)


# -- LimitRange ------------------------------------------------------------------------------------
class LimitRangeRejectsPods(_ManifestObjectFault):
    """A change cuts the namespace's LimitRange ``max`` below what a service's containers ask
    for (``object: LimitRange``, ``key`` its name, ``field``/``value`` the bad bound); the same
    change rolls ``service`` (its configuration changed), whose new pods are then refused.

    Effects: the ReplicaSet records ``FailedCreate`` (``pods "…" is forbidden: maximum memory
    usage per Container is …, but limit is …``), the Deployment shows ``ReplicaFailure`` and the
    rollout stalls; the old pods keep serving, but every pod that goes — a restart, an eviction,
    the next deploy of any service — cannot come back, so capacity drains. Restarting pods
    makes it worse. Repair: revert the change (or restore the bound on the live LimitRange).
    Deleting the LimitRange ends the refusals but drops the namespace's container bounds: not
    credited."""

    name = "limitrange-rejects-pods"
    description = "a LimitRange max below a service's limits refuses its new pods"
    repair = "revert the change (or restore the LimitRange's bound)"
    judge = (
        "the LimitRange is still there without the bad bound, and the service's rollout is complete "
        "without ReplicaFailure"
    )

    def inject(self, world: World, fault: Fault) -> None:
        super().inject(world, fault)
        fault.impact = {(fault.app, self.tag(world, fault).service)}

    def live(self, world: World, fault: Fault) -> bool:
        obj = self._object(world, fault)
        tag = self.tag(world, fault)
        return obj is not None and _matches(resolve(obj, parse_path(tag.field or "")), tag.value)

    def mitigated(self, world: World, fault: Fault) -> bool:
        obj = self._object(world, fault)
        tag = self.tag(world, fault)
        if obj is None or self.live(world, fault) or resolve(obj, parse_path(tag.field or "")) is MISSING:
            return False  # deleted, or its bound dropped: the control is gone
        d = world.cluster.store.get("Deployment", fault.app, tag.service)
        if d is None or condition(d, "ReplicaFailure") is not None:
            return False
        status = d.get("status") or {}
        want = int((d.get("spec") or {}).get("replicas", 1))
        return int(status.get("updatedReplicas", 0)) == want and \
            _ready_pods(world, fault.app, tag.service) >= want


NETWORK_KINDS = (NetworkPolicyBlocksCaller, QuotaBlocksRollout, LimitRangeRejectsPods)
