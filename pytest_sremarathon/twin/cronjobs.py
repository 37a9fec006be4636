"""The CronJob controller (batch/v1): a Job per scheduled time of ``spec.schedule`` read in
``spec.timeZone``, named ``<cronjob>-<minutes since the epoch>``; ``concurrencyPolicy``
(``Allow`` starts regardless, ``Forbid`` waits for the running Job — the start is late, not
lost, unless ``startingDeadlineSeconds`` passed — ``Replace`` deletes it); ``suspend``;
``successfulJobsHistoryLimit``/``failedJobsHistoryLimit``; status ``active``,
``lastScheduleTime``, ``lastSuccessfulTime``; the events the real controller records
(``SuccessfulCreate``, ``SawCompletedJob``, ``SuccessfulDelete``, ``MissSchedule``,
``JobAlreadyActive``, ``UnexpectedJob``).

Each CronJob's next scheduled time is computed once per resourceVersion; a pass is skipped
while no CronJob or Job changed and no schedule fell due."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from functools import partial
from typing import Any, Optional

from ..k8s.objects import EventRecorder, controller_of, owner_ref
from ..k8s.store import ApiError, Store, iso
from .cron import CronError, parse_schedule, zone
from .jobs import IdleSkips, delete_job, ensure_selector, finish_time, finished
from .tables import parse_time

COMPONENT = "cronjob-controller"
SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"
FOREVER = datetime.max.replace(tzinfo=timezone.utc)


def _rfc1123z(t: datetime) -> str:
    return t.astimezone(timezone.utc).strftime("%a, %d %b %Y %H:%M:%S +0000")


class CronJobController:
    def __init__(self, store: Store, events: EventRecorder) -> None:
        self.store = store
        self.events = events
        self._next: dict[str, tuple[str, Optional[datetime]]] = {}  # uid -> (resourceVersion, next schedule)
        self._quiet: tuple[int, ...] = ()
        self._quiet_until = FOREVER
        # uid -> ((its resourceVersion, the store's owned_version of the Jobs it controls), the
        # wake its step returned) at a step that wrote nothing and read no time but to see that
        # the next schedule is still ahead (suspended, no valid schedule, or the next time
        # later than now): until that wake, the same inputs give the same empty step, skipped.
        self._idle = IdleSkips(store)

    def reconcile(self) -> None:
        now = self.store.clock()
        inputs = self.store.kind_version("CronJob", "Job")
        if inputs == self._quiet and now < self._quiet_until:
            return
        before = self.store.resource_version
        cronjobs = self.store.list("CronJob")
        by_owner: dict[str, list[dict[str, Any]]] = {}
        if cronjobs:
            for job in self.store.list("Job"):
                ref = controller_of(job)
                if ref is not None and ref.get("kind") == "CronJob":
                    by_owner.setdefault(ref["uid"], []).append(job)
        wake = FOREVER
        for cj in list(cronjobs):
            md = cj["metadata"]
            uid = md["uid"]
            key = (md["resourceVersion"], self.store.owned_version("Job", uid))
            wake = min(wake, self._idle.step(uid, key, now, partial(self.reconcile_cronjob, cj, by_owner.get(uid, []), now),
                                             settled=partial(self._ahead, cj, now)))
        quiet = self.store.resource_version == before
        self._quiet, self._quiet_until = (inputs, wake) if quiet else ((), FOREVER)

    def _ahead(self, cj: dict[str, Any], now: datetime) -> bool:
        """Did a step read no time but to see that no schedule is due (_due's first check)?"""
        if cj["spec"].get("suspend"):
            return True
        nxt = self._cached_next(cj)
        return nxt is None or nxt > now

    def reconcile_cronjob(self, cj: dict[str, Any], jobs: list[dict[str, Any]], now: datetime) -> datetime:
        spec, status = cj["spec"], cj.setdefault("status", {})
        changed = self._sync_active(cj, jobs)
        changed |= self._prune_history(cj, jobs)
        wake = FOREVER
        if not spec.get("suspend"):
            due = self._due(cj, now)
            if due is not None and due <= now:
                changed |= self._start(cj, jobs, due, now)
            wake = self._next_after(cj, now)
        if changed:
            for key in ("active",):
                if not status.get(key):
                    status.pop(key, None)
            self.store.touch(cj)
        return wake

    # -- what ran ------------------------------------------------------------------------------
    def _sync_active(self, cj: dict[str, Any], jobs: list[dict[str, Any]]) -> bool:
        status = cj["status"]
        active = status.get("active") or []
        known = {ref.get("uid") for ref in active}
        changed = False
        for job in jobs:
            uid = job["metadata"]["uid"]
            done = finished(job)
            if uid in known and done:
                active = [r for r in active if r.get("uid") != uid]
                self.events.record(cj, "Normal", "SawCompletedJob",
                                   f"Saw completed job: {job['metadata']['name']}, condition: {done}", COMPONENT)
                changed = True
            elif done == "Complete":
                end = finish_time(job)
                last = parse_time(status.get("lastSuccessfulTime"))
                if end is not None and (last is None or end > last):
                    status["lastSuccessfulTime"] = iso(end)
                    changed = True
        live = {j["metadata"]["uid"] for j in jobs}
        kept = [r for r in active if r.get("uid") in live]
        if len(kept) != len(active) or changed:
            status["active"] = kept
            return True
        return False

    def _prune_history(self, cj: dict[str, Any], jobs: list[dict[str, Any]]) -> bool:
        spec = cj["spec"]
        changed = False
        for state, limit in (("Complete", spec.get("successfulJobsHistoryLimit", 3)),
                             ("Failed", spec.get("failedJobsHistoryLimit", 1))):
            if limit is None:
                continue
            done = [j for j in jobs if finished(j) == state and self.store.get("Job", j["metadata"]["namespace"],
                                                                               j["metadata"]["name"]) is j]
            done.sort(key=lambda j: (j.get("status", {}).get("startTime") or "", j["metadata"]["name"]))
            for job in done[: max(0, len(done) - int(limit))]:
                pods = [p for p in self.store.list("Pod", job["metadata"]["namespace"])
                        if (controller_of(p) or {}).get("uid") == job["metadata"]["uid"]]
                delete_job(self.store, job, pods)
                self.events.record(cj, "Normal", "SuccessfulDelete", f"Deleted job {job['metadata']['name']}", COMPONENT)
                changed = True
        return changed

    # -- the schedule --------------------------------------------------------------------------
    def _anchor(self, cj: dict[str, Any]) -> datetime:
        status = cj.get("status") or {}
        return parse_time(status.get("lastScheduleTime")) or parse_time(cj["metadata"]["creationTimestamp"]) or \
            self.store.clock()

    def _due(self, cj: dict[str, Any], now: datetime) -> Optional[datetime]:
        """The latest scheduled time not started yet and not past its deadline (None if none)."""
        nxt = self._cached_next(cj)
        if nxt is None or nxt > now:
            return None
        try:
            schedule = parse_schedule(str(cj["spec"]["schedule"]))
        except CronError:
            return None
        tz = zone(cj["spec"].get("timeZone")) or timezone.utc
        latest, missed = schedule.last_at_or_before(self._anchor(cj), now, tz)
        if latest is None:
            return None
        if missed > 100:
            self.events.record(cj, "Warning", "TooManyMissedTimes",
                               "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or "
                               "check clock skew", COMPONENT)
        deadline = cj["spec"].get("startingDeadlineSeconds")
        if deadline is not None and (now - latest).total_seconds() > int(deadline):
            self.events.record(cj, "Warning", "MissSchedule",
                               f"Missed scheduled time to start a job: {_rfc1123z(latest)}", COMPONENT)
            cj["status"]["lastScheduleTime"] = iso(latest)  # as missed: the next one is what counts
            self.store.touch(cj)
            return None
        return latest

    def _cached_next(self, cj: dict[str, Any]) -> Optional[datetime]:
        uid, rv = cj["metadata"]["uid"], cj["metadata"]["resourceVersion"]
        cached = self._next.get(uid)
        if cached is None or cached[0] != rv:
            try:
                schedule = parse_schedule(str(cj["spec"]["schedule"]))
                nxt = schedule.next_after(self._anchor(cj), zone(cj["spec"].get("timeZone")) or timezone.utc)
            except CronError:
                nxt = None
            cached = self._next[uid] = (rv, nxt)
        return cached[1]

    def _next_after(self, cj: dict[str, Any], now: datetime) -> datetime:
        nxt = self._cached_next(cj)
        if nxt is None:
            return FOREVER
        if nxt <= now:  # waiting on a Forbid: the running Job's end moves the inputs
            return FOREVER
        return nxt

    def _start(self, cj: dict[str, Any], jobs: list[dict[str, Any]], due: datetime, now: datetime) -> bool:
        spec, status = cj["spec"], cj["status"]
        running = [j for j in jobs if not finished(j) and self.store.get("Job", j["metadata"]["namespace"],
                                                                         j["metadata"]["name"]) is j]
        running_refs = [j for j in running if any(r.get("uid") == j["metadata"]["uid"] for r in status.get("active") or [])]
        policy = spec.get("concurrencyPolicy", "Allow")
        if policy == "Forbid" and running_refs:
            self.events.record(cj, "Normal", "JobAlreadyActive",
                               "Not starting job because prior execution is running and concurrency policy is Forbid",
                               COMPONENT)
            return False
        if policy == "Replace":
            for job in running_refs:
                pods = [p for p in self.store.list("Pod", job["metadata"]["namespace"])
                        if (controller_of(p) or {}).get("uid") == job["metadata"]["uid"]]
                delete_job(self.store, job, pods)
                self.events.record(cj, "Normal", "SuccessfulDelete", f"Deleted job {job['metadata']['name']}", COMPONENT)
            status["active"] = [r for r in status.get("active") or []
                                if r.get("uid") not in {j["metadata"]["uid"] for j in running_refs}]
        job = self._job_for(cj, due)
        try:
            job = self.store.create(job)
        except ApiError:  # this time's Job exists already (made before a restart of the twin)
            status["lastScheduleTime"] = iso(due)
            return True
        ensure_selector(job)
        self.store.touch(job)
        self.events.record(cj, "Normal", "SuccessfulCreate", f"Created job {job['metadata']['name']}", COMPONENT)
        status.setdefault("active", []).append({"kind": "Job", "namespace": job["metadata"]["namespace"],
                                                "name": job["metadata"]["name"], "uid": job["metadata"]["uid"],
                                                "apiVersion": "batch/v1",
                                                "resourceVersion": job["metadata"]["resourceVersion"]})
        status["lastScheduleTime"] = iso(due)
        return True

    def _job_for(self, cj: dict[str, Any], due: datetime) -> dict[str, Any]:
        from .defaults import apply_defaults, initial_status  # noqa: PLC0415 (keeps this module light to import)
        template = copy.deepcopy(cj["spec"].get("jobTemplate") or {})
        meta = template.get("metadata") or {}
        job: dict[str, Any] = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": f"{cj['metadata']['name']}-{int(due.timestamp()) // 60}",
                         "namespace": cj["metadata"]["namespace"],
                         "labels": dict(meta.get("labels") or {}),
                         "annotations": {**(meta.get("annotations") or {}), SCHEDULED: iso(due)},
                         "ownerReferences": [owner_ref(cj)]},
            "spec": template.get("spec") or {}}
        apply_defaults(job)
        initial_status(job)
        return job


def next_schedule(cj: dict[str, Any], after: datetime) -> Optional[datetime]:
    """When the CronJob next starts a Job after ``after`` (None if its schedule is invalid)."""
    try:
        return parse_schedule(str(cj["spec"]["schedule"])).next_after(
            after, zone(cj["spec"].get("timeZone")) or timezone.utc)
    except CronError:
        return None



