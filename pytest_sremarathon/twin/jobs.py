"""The Job controller (batch/v1): pods that run to completion, ``parallelism`` at a time until
``completions`` succeeded; failed pods retried with the real exponential back-off (10 s,
doubling, at most 6 min) until ``backoffLimit``; ``activeDeadlineSeconds``;
``ttlSecondsAfterFinished``; the conditions ``SuccessCriteriaMet``/``Complete`` and
``FailureTarget``/``Failed`` (reasons ``BackoffLimitExceeded``, ``DeadlineExceeded``) and
``Suspended``. The API server's part is here too: the generated selector and the
``controller-uid``/``job-name`` labels (with their ``batch.kubernetes.io/`` forms).

A pass is skipped while no Job or Pod changed and no deadline, back-off or TTL fell due."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Any, Optional

from ..k8s.objects import EventRecorder, condition, controller_of, pod_is_active, pod_is_ready, set_condition
from ..k8s.quantity import cpu_millicores
from ..k8s.store import Store, iso
from .owned_pods import create_pod, delete_pod
from .tables import parse_time

COMPONENT = "job-controller"
UID_LABEL = "batch.kubernetes.io/controller-uid"
NAME_LABEL = "batch.kubernetes.io/job-name"
TRACKING = "batch.kubernetes.io/job-tracking"
BACKOFF_BASE, BACKOFF_MAX = 10.0, 360.0
FOREVER = datetime.max.replace(tzinfo=timezone.utc)


def finished(job: dict[str, Any]) -> Optional[str]:
    """``Complete`` or ``Failed`` once the Job finished, else None."""
    for type_ in ("Complete", "Failed"):
        c = condition(job, type_)
        if c is not None and c.get("status") == "True":
            return type_
    return None


def finish_time(job: dict[str, Any]) -> Optional[datetime]:
    status = job.get("status") or {}
    if status.get("completionTime"):
        return parse_time(status["completionTime"])
    c = condition(job, "Failed")
    return parse_time(c.get("lastTransitionTime")) if c else None


def ensure_selector(job: dict[str, Any]) -> bool:
    """What the API server sets on a new Job: the selector on its uid and the labels that make
    its pods match (on the template; the Job's own labels default to them). True if it changed."""
    spec, md = job.get("spec") or {}, job["metadata"]
    if spec.get("selector") or spec.get("manualSelector") or not isinstance(spec.get("template"), dict):
        return False
    uid, name = md["uid"], md["name"]
    spec["selector"] = {"matchLabels": {UID_LABEL: uid}}
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    labels.update({UID_LABEL: uid, NAME_LABEL: name, "controller-uid": uid, "job-name": name})
    if not md.get("labels"):
        md["labels"] = dict(labels)
    return True



class IdleSkips:
    """Objects whose last step wrote nothing, with the inputs it saw (their versions) and the
    wake it returned: until that wake, the same inputs give the same empty step, so it is
    skipped. Shared by the Job and CronJob controllers."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: dict[str, tuple[tuple[str, int], datetime]] = {}

    def step(self, uid: str, key: tuple[str, int], now: datetime, step: Callable[[], datetime],
             settled: Callable[[], bool] = lambda: True) -> datetime:
        """The wake of the object's step: the one recorded while it sleeps, else what ``step``
        returns; a step that wrote nothing (and, by ``settled``, has nothing due) is recorded."""
        seen = self._seen.get(uid)
        if seen is not None and seen[0] == key and now < seen[1]:
            return seen[1]
        mark = self.store.resource_version
        wake = step()
        if self.store.resource_version == mark and settled():
            self._seen[uid] = (key, wake)
        else:
            self._seen.pop(uid, None)
        return wake

    def keep_only(self, live: set[str]) -> None:
        for uid in [u for u in self._seen if u not in live]:
            del self._seen[uid]


class JobController:
    def __init__(self, store: Store, events: EventRecorder) -> None:
        self.store = store
        self.events = events
        self._burn: tuple[tuple[int, ...], dict[str, float]] = ((), {})  # Pod version -> pod uid -> millicores
        self._counted: dict[str, set[str]] = {}  # job uid -> its pods already counted succeeded/failed
        self._quiet: tuple[int, ...] = ()
        self._quiet_until = FOREVER
        # uid -> ((its resourceVersion, the store's owned_version of the pods it controls), the
        # wake its step returned) at a step that wrote nothing: until that wake (its deadline,
        # its backoff, its TTL: the only times a step reads) the same inputs give the same empty
        # step, skipped.
        self._idle = IdleSkips(store)

    def reconcile(self) -> None:
        now = self.store.clock()
        inputs = self.store.kind_version("Job", "Pod")
        if inputs == self._quiet and now < self._quiet_until:
            return
        before = self.store.resource_version
        jobs = self.store.list("Job")
        # The namespaces _pods_by_job scans (those of the unfinished Jobs), taken before any
        # step, as it does.
        namespaces = {j["metadata"]["namespace"] for j in jobs if not finished(j)}
        wake = FOREVER
        for job in jobs:
            md = job["metadata"]
            uid = md["uid"]
            key = (md["resourceVersion"], self.store.owned_version("Pod", uid))
            wake = min(wake, self._idle.step(uid, key, now, partial(self._reconcile_found, job, namespaces, now)))
        live = {j["metadata"]["uid"] for j in self.store.list("Job")}
        self._idle.keep_only(live)
        for uid in [u for u in self._counted if u not in live]:
            del self._counted[uid]
        quiet = self.store.resource_version == before
        self._quiet, self._quiet_until = (inputs, wake) if quiet else ((), FOREVER)

    def _pods_by_job(self, jobs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """The pods of the unfinished Jobs, by Job uid (a finished Job reads no pod: only the
        namespaces where a Job runs are looked at)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for ns in sorted({j["metadata"]["namespace"] for j in jobs if not finished(j)}):
            for p in self.store.list("Pod", ns):
                ref = controller_of(p)
                if ref is not None and ref.get("kind") == "Job":
                    out.setdefault(ref["uid"], []).append(p)
        return out

    def _job_pods(self, uid: str, namespaces: set[str]) -> list[dict[str, Any]]:
        """``_pods_by_job(jobs).get(uid, [])`` without the scan: the pods in those namespaces
        whose controlling owner is a Job of this uid, from the store's owner index (filed by the
        same first ``controller`` reference), in the same order (by namespace, then name)."""
        return [p for p in self.store.owned("Pod", uid) if p["metadata"]["namespace"] in namespaces
                and (controller_of(p) or {}).get("kind") == "Job"]

    def _reconcile_found(self, job: dict[str, Any], namespaces: set[str], now: datetime) -> datetime:
        """:meth:`reconcile_job` on the Job's pods as a pass finds them (:meth:`_job_pods`)."""
        return self.reconcile_job(job, self._job_pods(job["metadata"]["uid"], namespaces), now)

    def cpu_demand(self) -> dict[str, float]:
        """Pod uid -> the millicores each running Job pod burns: batch work is CPU-bound and
        uses what its limit lets it (its request when unlimited). Recomputed when a Pod moved."""
        version = self.store.kind_version("Pod", "Job")
        if self._burn[0] != version:
            demand: dict[str, float] = {}
            for pods in self._pods_by_job(self.store.list("Job")).values():
                for p in pods:
                    if (p.get("status") or {}).get("phase") == "Running":
                        demand[p["metadata"]["uid"]] = float(sum(_cpu(c) for c in p["spec"].get("containers") or []))
            self._burn = (version, demand)
        return self._burn[1]

    def react(self, job: dict[str, Any]) -> None:
        """An API write created or changed this Job: its pods now, as the real controller's watch."""
        pods = [p for p in self.store.list("Pod", job["metadata"]["namespace"])
                if (controller_of(p) or {}).get("uid") == job["metadata"]["uid"]]
        self.reconcile_job(job, pods, self.store.clock())

    # -- one Job -------------------------------------------------------------------------------
    def reconcile_job(self, job: dict[str, Any], pods: list[dict[str, Any]], now: datetime) -> datetime:
        """One pass over a Job; returns when a pass over the same inputs would next change it."""
        if ensure_selector(job):
            self.store.touch(job)
        spec, status = job["spec"], job.setdefault("status", {})
        done = finished(job)
        if done:
            return self._expire(job, pods, now)
        active = [p for p in pods if pod_is_active(p)]
        if spec.get("suspend"):
            for p in active:
                delete_pod(self.store, self.events, job, p, COMPONENT)
            if set_condition(job, "Suspended", "True", now, "JobSuspended", "Job suspended"):
                status.pop("startTime", None)
                self.events.record(job, "Normal", "Suspended", "Job suspended", COMPONENT)
                self.store.touch(job)
            return FOREVER
        before = _snapshot(status)
        if condition(job, "Suspended") is not None and set_condition(job, "Suspended", "False", now,
                                                                      "JobResumed", "Job resumed"):
            self.events.record(job, "Normal", "Resumed", "Job resumed", COMPONENT)
        status.setdefault("startTime", iso(now))
        counted = self._counted.setdefault(job["metadata"]["uid"], set())
        for p in pods:
            phase = (p.get("status") or {}).get("phase")
            uid = p["metadata"]["uid"]
            if phase in ("Succeeded", "Failed") and uid not in counted:
                counted.add(uid)
                key = "succeeded" if phase == "Succeeded" else "failed"
                status[key] = int(status.get(key, 0)) + 1
        succeeded, failed = int(status.get("succeeded", 0)), int(status.get("failed", 0))
        restarts = sum(int(cs.get("restartCount", 0)) for p in active
                       for cs in (p.get("status") or {}).get("containerStatuses") or []) \
            if (spec["template"].get("spec") or {}).get("restartPolicy") == "OnFailure" else 0
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        start = parse_time(status["startTime"]) or now
        deadline = spec.get("activeDeadlineSeconds")
        wake = FOREVER
        if failed + restarts > int(spec.get("backoffLimit", 6)):
            self._fail(job, active, now, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif deadline is not None and (now - start).total_seconds() >= int(deadline):
            self._fail(job, active, now, "DeadlineExceeded", "Job was active longer than specified deadline")
        elif (completions is not None and succeeded >= int(completions)) or \
                (completions is None and succeeded > 0 and not active):
            self._complete(job, active, now)
        else:
            if deadline is not None:
                wake = start + timedelta(seconds=int(deadline))
            want = min(parallelism, int(completions) - succeeded) if completions is not None else \
                (parallelism if succeeded == 0 else 0)
            missing = want - len(active)
            if missing > 0:
                ready_at = self._backoff_until(pods, failed)
                if now < ready_at:
                    wake = min(wake, ready_at)
                else:
                    for _ in range(missing):
                        active.append(self._create(job))
            self._publish_counts(job, active)
        if _snapshot(status) != before:
            self.store.touch(job)
        return wake

    def _backoff_until(self, pods: list[dict[str, Any]], failed: int) -> datetime:
        if failed <= 0:
            return datetime.min.replace(tzinfo=timezone.utc)
        last = max((parse_time(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
                    for p in pods if (p.get("status") or {}).get("phase") == "Failed"
                    for cs in (p["status"].get("containerStatuses") or [])), default=None,
                   key=lambda t: t or datetime.min.replace(tzinfo=timezone.utc))
        if last is None:
            return datetime.min.replace(tzinfo=timezone.utc)
        return last + timedelta(seconds=min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (failed - 1)))

    def _create(self, job: dict[str, Any]) -> dict[str, Any]:
        md = job["metadata"]
        labels = {UID_LABEL: md["uid"], NAME_LABEL: md["name"], "controller-uid": md["uid"], "job-name": md["name"]}
        return create_pod(self.store, self.events, job, job["spec"]["template"], COMPONENT, labels=labels,
                          annotations={TRACKING: ""})

    def _publish_counts(self, job: dict[str, Any], active: list[dict[str, Any]]) -> None:
        status = job["status"]
        live = [p for p in active if pod_is_active(p)]
        status["active"] = len(live)
        status["ready"] = sum(1 for p in live if pod_is_ready(p))
        status["terminating"] = 0
        status.setdefault("uncountedTerminatedPods", {})
        for key in ("active", "succeeded", "failed"):
            if not status.get(key):
                status.pop(key, None)

    def _stop(self, job: dict[str, Any], active: list[dict[str, Any]]) -> None:
        for p in active:
            delete_pod(self.store, self.events, job, p, COMPONENT)
        self._publish_counts(job, [])

    def _fail(self, job: dict[str, Any], active: list[dict[str, Any]], now: datetime, reason: str, message: str) -> None:
        self._stop(job, active)
        set_condition(job, "FailureTarget", "True", now, reason, message)
        set_condition(job, "Failed", "True", now, reason, message)
        _probe_times(job, now)
        self.events.record(job, "Warning", reason, message, COMPONENT)

    def _complete(self, job: dict[str, Any], active: list[dict[str, Any]], now: datetime) -> None:
        self._stop(job, active)
        set_condition(job, "SuccessCriteriaMet", "True", now, "CompletionsReached", "Reached expected number of succeeded pods")
        set_condition(job, "Complete", "True", now, "CompletionsReached", "Reached expected number of succeeded pods")
        _probe_times(job, now)
        job["status"]["completionTime"] = iso(now)
        self.events.record(job, "Normal", "Completed", "Job completed", COMPONENT)

    def _expire(self, job: dict[str, Any], pods: list[dict[str, Any]], now: datetime) -> datetime:
        """``ttlSecondsAfterFinished``: the finished Job and its pods go once it has passed."""
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        end = finish_time(job)
        if ttl is None or end is None:
            return FOREVER
        due = end + timedelta(seconds=int(ttl))
        if now < due:
            return due
        delete_job(self.store, job, pods)
        return FOREVER


def delete_job(store: Store, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
    """Delete a Job with its pods (background propagation, as controllers delete them)."""
    md = job["metadata"]
    for p in pods:
        if store.get("Pod", p["metadata"]["namespace"], p["metadata"]["name"]) is p:
            store.delete("Pod", p["metadata"]["namespace"], p["metadata"]["name"])
    if store.get("Job", md["namespace"], md["name"]) is job:
        store.delete("Job", md["namespace"], md["name"])


def _cpu(container: dict[str, Any]) -> int:
    resources = container.get("resources") or {}
    return cpu_millicores((resources.get("limits") or {}).get("cpu") or (resources.get("requests") or {}).get("cpu"))


def _snapshot(status: dict[str, Any]) -> tuple[Any, ...]:
    return (tuple(sorted((k, str(v)) for k, v in status.items() if k != "conditions")),
            tuple(tuple(sorted(c.items())) for c in status.get("conditions") or []))


def _probe_times(job: dict[str, Any], now: datetime) -> None:
    for c in job["status"].get("conditions") or []:
        c.setdefault("lastProbeTime", iso(now))
