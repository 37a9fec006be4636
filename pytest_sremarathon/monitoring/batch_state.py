"""kube-state-metrics' series of Jobs, CronJobs and DaemonSets (names, labels and values as
kube-state-metrics 2.x exports them), for :class:`~.kube_state.KubeState`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

Labels = Callable[..., int]  # KubeState._labels: (name, **labels) -> series ref
Samples = list[tuple[int, float]]

METADATA: dict[str, tuple[str, str]] = {
    "kube_job_owner": ("gauge", "Information about the Job's owner."),
    "kube_job_status_active": ("gauge", "The number of actively running pods."),
    "kube_job_status_succeeded": ("gauge", "The number of pods which reached Phase Succeeded."),
    "kube_job_status_failed": ("gauge", "The number of pods which reached Phase Failed and the reason for failure."),
    "kube_job_complete": ("gauge", "The job has completed its execution."),
    "kube_job_failed": ("gauge", "The job has failed its execution."),
    "kube_job_status_start_time": ("gauge", "StartTime represents time when the job was acknowledged by the Job "
                                            "Manager."),
    "kube_job_status_completion_time": ("gauge", "CompletionTime represents time when the job was completed."),
    "kube_cronjob_status_active": ("gauge", "Active holds pointers to currently running jobs."),
    "kube_cronjob_spec_suspend": ("gauge", "Suspend flag tells the controller to suspend subsequent executions."),
    "kube_cronjob_status_last_schedule_time": ("gauge", "LastScheduleTime keeps information of when was the last "
                                                        "time the job was successfully scheduled."),
    "kube_cronjob_status_last_successful_time": ("gauge", "LastSuccessfulTime keeps information of when was the "
                                                          "last time the job was completed successfully."),
    "kube_daemonset_status_desired_number_scheduled": ("gauge", "The number of nodes that should be running the "
                                                                "daemon pod."),
    "kube_daemonset_status_current_number_scheduled": ("gauge", "The number of nodes running at least one daemon "
                                                                "pod and are supposed to."),
    "kube_daemonset_status_number_ready": ("gauge", "The number of nodes that should be running the daemon pod and "
                                                    "have one or more of the daemon pod running and ready."),
    "kube_daemonset_status_number_available": ("gauge", "The number of nodes that should be running the daemon pod "
                                                        "and have one or more of the daemon pod running and "
                                                        "available"),
    "kube_daemonset_status_updated_number_scheduled": ("gauge", "The total number of nodes that are running updated "
                                                                "daemon pod"),
    "kube_daemonset_status_number_misscheduled": ("gauge", "The number of nodes running a daemon pod but are not "
                                                           "supposed to."),
}
_CONDITIONS = ("true", "false", "unknown")


def _epoch(value: Any) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def job_samples(lab: Labels, job: dict[str, Any]) -> Samples:
    md, status = job["metadata"], job.get("status") or {}
    jl = {"namespace": md.get("namespace", ""), "job_name": md["name"]}
    ref = next((r for r in md.get("ownerReferences") or [] if r.get("controller")), None)
    out: Samples = [(lab("kube_job_owner", **jl, owner_kind=ref.get("kind", "") if ref else "<none>",
                         owner_name=ref.get("name", "") if ref else "<none>",
                         owner_is_controller="true" if ref else "<none>"), 1.0)]
    for key, name in (("active", "kube_job_status_active"), ("succeeded", "kube_job_status_succeeded"),
                      ("failed", "kube_job_status_failed")):
        out.append((lab(name, **jl), float(status.get(key) or 0)))
    conditions = {c.get("type"): str(c.get("status", "Unknown")).lower() for c in status.get("conditions") or []}
    for type_, name in (("Complete", "kube_job_complete"), ("Failed", "kube_job_failed")):
        if type_ in conditions:
            for s in _CONDITIONS:
                out.append((lab(name, **jl, condition=s), 1.0 if conditions[type_] == s else 0.0))
    for key, name in (("startTime", "kube_job_status_start_time"), ("completionTime", "kube_job_status_completion_time")):
        t = _epoch(status.get(key))
        if t is not None:
            out.append((lab(name, **jl), t))
    return out


def cronjob_samples(lab: Labels, cj: dict[str, Any]) -> Samples:
    md, spec, status = cj["metadata"], cj.get("spec") or {}, cj.get("status") or {}
    cl = {"namespace": md.get("namespace", ""), "cronjob": md["name"]}
    out: Samples = [(lab("kube_cronjob_status_active", **cl), float(len(status.get("active") or []))),
                    (lab("kube_cronjob_spec_suspend", **cl), 1.0 if spec.get("suspend") else 0.0)]
    for key, name in (("lastScheduleTime", "kube_cronjob_status_last_schedule_time"),
                      ("lastSuccessfulTime", "kube_cronjob_status_last_successful_time")):
        t = _epoch(status.get(key))
        if t is not None:
            out.append((lab(name, **cl), t))
    return out


def daemonset_samples(lab: Labels, ds: dict[str, Any]) -> Samples:
    md, status = ds["metadata"], ds.get("status") or {}
    dl = {"namespace": md.get("namespace", ""), "daemonset": md["name"]}
    return [(lab(f"kube_daemonset_status_{name}", **dl), float(status.get(key) or 0)) for key, name in (
        ("desiredNumberScheduled", "desired_number_scheduled"), ("currentNumberScheduled", "current_number_scheduled"),
        ("numberReady", "number_ready"), ("numberAvailable", "number_available"),
        ("updatedNumberScheduled", "updated_number_scheduled"), ("numberMisscheduled", "number_misscheduled"))]
