"""Faults of an app's batch work: a change through the pipeline that breaks a CronJob.

Both arrive as curated changes to a CronJob manifest (``fault:`` tag ``object: CronJob``,
``service`` the CronJob's name, ``field`` and ``value`` the bad setting); the root cause is the
CronJob, ``service:<app>/<cronjob>``, and the cause the change. The judge reads the live
CronJob and the Jobs it owns, never the repository: a revert committed but not deployed, a
Job re-run by hand or the failed Jobs deleted change neither.
"""

from __future__ import annotations

from typing import Any, Optional

from ..provenance import EvidenceRef
from .base import Fault, World
from .change import ManifestFault, _matches, parse_path, resolve


def _owned_jobs(world: World, ns: str, cronjob: dict[str, Any]) -> list[dict[str, Any]]:
    uid = cronjob["metadata"]["uid"]
    return [j for j in world.cluster.store.list("Job", ns)
            if any(r.get("uid") == uid and r.get("controller") for r in j["metadata"].get("ownerReferences") or [])]


def _finished(job: dict[str, Any]) -> bool:
    return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


class CronJobFault(ManifestFault):
    """A bad setting in a CronJob manifest (see the module docstring)."""

    component_form = "service:<app>/<cronjob>"
    arrives = "a curated change to a CronJob manifest, committed and deployed through the pipeline"

    def _target(self, world: World, fault: Fault) -> tuple[str, str, list[Any], Optional[str]]:
        tag = self.tag(world, fault)
        if tag.object != "CronJob" or not tag.field:
            raise ValueError(f"curated change {fault.params['change']!r}: a {self.name} fault needs "
                             "`object: CronJob` and `field`")
        return tag.object, tag.service, parse_path(tag.field), tag.value

    def cronjob(self, world: World, fault: Fault) -> Optional[dict[str, Any]]:
        return world.cluster.store.get("CronJob", fault.app, self.tag(world, fault).service)

    def inject(self, world: World, fault: Fault) -> None:
        super().inject(world, fault)
        fault.impact = self.symptoms(world, fault)

    def symptoms(self, world: World, fault: Fault) -> set[tuple[str, str]]:
        return {(fault.app, self.tag(world, fault).service)}

    def live(self, world: World, fault: Fault) -> bool:
        _, _, path, bad = self._target(world, fault)
        cj = self.cronjob(world, fault)
        return cj is not None and _matches(resolve(cj, path), bad)

    def serving(self, world: World, fault: Fault) -> bool:
        """The CronJob is there and schedules (a suspended one runs nothing: no repair)."""
        cj = self.cronjob(world, fault)
        return cj is not None and not (cj.get("spec") or {}).get("suspend")

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return [EvidenceRef("CronJob", fault.app, self.tag(world, fault).service, "spec")]

    def symptoms_from(self, world: World, ns: str, service: str) -> set[tuple[str, str]]:
        return {(ns, service)}


class CronJobFailing(CronJobFault):
    """A change breaks what a CronJob's Jobs run (a renamed setting its command reads).

    Effects: every scheduled Job fails — its pods exit with an error that their logs explain,
    the Job ends ``Failed`` with ``BackoffLimitExceeded`` (KubeJobFailed on the CronJob), and
    ``lastSuccessfulTime`` stops moving: the work the job does (the rate cache's refresh) stops.
    Deleting the failed Jobs clears the alert until the next run fails; a Job created by hand
    (``kubectl create job --from=cronjob/…``) fails the same way, and one from an older
    template fixes nothing for the next schedule.
    Repair: revert the change through the pipeline (or fix the setting in the CronJob)."""

    name = "cronjob-failing"
    description = "a change breaks a CronJob's command or settings: its Jobs fail"
    repair = "revert the change through the pipeline (or fix the CronJob's setting)"
    judge = "the live CronJob no longer has the bad setting and is not suspended"


class CronJobPiling(CronJobFault):
    """A change lets a CronJob's runs overlap (``concurrencyPolicy: Allow``) and makes each
    outlast its period: Jobs pile up, every one burning its CPU limit on the nodes.

    Effects: more and more Jobs of the CronJob run at once (``kubectl get jobs`` shows them
    Running, ``status.active`` of the CronJob grows); the nodes' CPU fills, and the app's
    services on them slow down (ServiceLatencySLOBurn, NodeCPUSaturation). Scaling the services
    adds pods to the same starved nodes.
    Repair: revert the change through the pipeline and delete the piled-up Jobs (``kubectl
    delete job …``): the old policy lets at most one run."""

    name = "cronjob-piling"
    description = "a CronJob's runs overlap and outlast their period: Jobs pile up and starve the services"
    repair = "revert the change through the pipeline, then delete the piled-up Jobs"
    judge = ("the live CronJob no longer allows overlapping runs and at most one of its Jobs is "
             "still running")

    def symptoms(self, world: World, fault: Fault) -> set[tuple[str, str]]:
        ns = fault.app
        return {(ns, self.tag(world, fault).service)} | {(ns, s) for s in world.apps[ns].services}

    def running_jobs(self, world: World, fault: Fault) -> list[dict[str, Any]]:
        cj = self.cronjob(world, fault)
        if cj is None:
            return []
        return [j for j in _owned_jobs(world, fault.app, cj) if not _finished(j)]

    def mitigated(self, world: World, fault: Fault) -> bool:
        return super().mitigated(world, fault) and len(self.running_jobs(world, fault)) <= 1

    def cleanup(self, world: World, fault: Fault) -> None:
        """The on-call human reverts the change and deletes every piled-up Job but the newest."""
        super().cleanup(world, fault)
        store = world.cluster.store
        with store.lock:
            piled = sorted(self.running_jobs(world, fault), key=lambda j: j["metadata"]["name"])
            for job in piled[:-1]:
                uid = job["metadata"]["uid"]
                for pod in list(store.list("Pod", fault.app)):
                    if any(r.get("uid") == uid for r in pod["metadata"].get("ownerReferences") or []):
                        store.delete("Pod", fault.app, pod["metadata"]["name"])
                store.delete("Job", fault.app, job["metadata"]["name"])


BATCH_KINDS: tuple[type[CronJobFault], ...] = (CronJobFailing, CronJobPiling)
