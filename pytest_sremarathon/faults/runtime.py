"""Faults of what the kubelet runs around the app's code: init containers and probes.

Both arrive as curated changes through the pipeline (a manifest edit) and are judged from what
the cluster runs, as the manifest family is (``faults/change.py``): the bad value must be live
nowhere, and what the fault broke must work again.
"""

from __future__ import annotations

from typing import Any

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


__all__ = ["InitContainerFailing"]
