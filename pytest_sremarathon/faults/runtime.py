"""Faults of what the kubelet runs around the app's code: init containers and probes.

Both arrive as curated changes through the pipeline (a manifest edit) and are judged from what
the cluster runs, as the manifest family is (``faults/change.py``): the bad value must be live
nowhere, and what the fault broke must work again.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ..k8s.store import iso
from .base import Fault, World
from .change import ManifestFault, _pods


def _init_failing(pod: dict[str, Any]) -> bool:
    """Is one of the pod's init containers failing (exited non-zero, or backing off after)?"""
    for cs in (pod.get("status") or {}).get("initContainerStatuses") or []:
        state = cs.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode", 0) != 0:
            return True
        if (state.get("waiting") or {}).get("reason") in ("CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff",
                                                           "CreateContainerConfigError"):
            return True
    return False


class InitContainerFailing(ManifestFault):
    """A change adds an init container (a wait-for-the-database step) to a Deployment whose
    command can never succeed: it waits for the datastore on the wrong port, gives up and exits 1.
    The build passes: nothing runs the pod spec before the rollout.

    Effects: the new pods never start their app container: ``kubectl get pods`` shows
    ``Init:0/1``, then ``Init:Error`` and ``Init:CrashLoopBackOff``; ``kubectl logs <pod> -c
    wait-for-mongodb`` shows "mongodb-reservation:27018 not reachable"; BackOff events name the
    init container; the rollout stalls at the surge pod (KubeDeploymentRolloutStuck after the
    progress deadline) while the old pods keep serving, with the capacity maxUnavailable lets go.
    Deleting the stuck pods or restarting the Deployment brings back the same init container.
    Repair: revert the change through the pipeline (or fix the init container's command in the
    manifest and redeploy)."""

    name = "init-container-failing"
    description = "a change adds an init container whose command always fails; new pods stay in Init"
    repair = "revert the change (or fix the init container's command in the manifest and redeploy)"
    judge = (
        "no live template or active pod of the service carries the bad init container command, no "
        "active pod of the service has a failing init container, and the service has a ready pod"
    )

    def mitigated(self, world: World, fault: Fault) -> bool:
        if not super().mitigated(world, fault):
            return False
        service = self.tag(world, fault).service
        return not any(_init_failing(p) for p in _pods(world, fault.app, service))




class LivenessUnderLoad(ManifestFault):
    """A change tightens a Deployment's liveness probe (``failureThreshold: 1``, a 5 s period, a
    1 s timeout) together with a CPU right-size that leaves little headroom at the daily peak.
    The build passes and the rollout completes: at night the pods are far from their limit.

    Effects: when the load nears its peak, a pod's CPU demand passes its limit and a share of
    its requests — and of the kubelet's probes, which queue with them (twin/probes.py) — wait
    past their deadline; one late probe kills the container ("Liveness probe failed: … context
    deadline exceeded (Client.Timeout exceeded while awaiting headers)", "Killing" events,
    restart counts, KubePodCrashLooping), its load moves to the other pods, which pass their
    limit in turn: a restart cascade with errors and latency on the service and its callers
    (ServiceHighErrorRate, ServiceLatencySLOBurn). Restarting pods feeds the cascade; scaling up
    or raising the CPU limit quiets it until the next peak or the next lost pod, but a probe that
    kills on its first late answer is still there, so neither counts.
    Repair: revert the change through the pipeline (or restore a tolerant probe — failureThreshold
    ≥ 3 — in the manifest and redeploy)."""

    name = "liveness-under-load"
    description = "a tightened liveness probe kills pods whose answers are late under peak load: a restart cascade"
    repair = "revert the change (or restore a tolerant liveness probe in the manifest and redeploy)"
    judge = (
        "no live template or active pod of the service has the tightened liveness probe, no pod of "
        "the service was killed by its liveness probe in the last 5 minutes, and the service has a ready pod"
    )
    QUIET = timedelta(minutes=5)

    def mitigated(self, world: World, fault: Fault) -> bool:
        if not super().mitigated(world, fault):
            return False
        service = self.tag(world, fault).service
        since = iso(world.cluster.store.clock() - self.QUIET)
        pods = {p["metadata"]["name"] for p in _pods(world, fault.app, service)}
        return not any(ev.get("reason") == "Killing" and "failed liveness probe" in ev.get("message", "")
                       and ev["involvedObject"].get("name") in pods
                       and (ev.get("lastTimestamp") or ev.get("eventTime") or "") >= since
                       for ev in world.cluster.store.list("Event", fault.app))


__all__ = ["InitContainerFailing", "LivenessUnderLoad"]
