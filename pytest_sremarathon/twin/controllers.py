"""The control loops of kube-controller-manager that a marathon needs: deployments (rolling
updates, revisions, progress deadline), replica sets, endpoints, node lifecycle (taint-based
eviction) and garbage collection. Each ``reconcile_*`` is one pass at the current virtual time.
"""

from __future__ import annotations

import copy
import functools
import math
from datetime import datetime, timedelta, timezone
from typing import Any

from ..k8s.objects import (
    EventRecorder,
    condition,
    controller_of,
    is_owned_by,
    owner_ref,
    pod_is_active,
    pod_is_ready,
    selector_matches,
    set_condition,
    template_hash,
)
from ..k8s.store import ApiError, Store, iso
from . import priority
from .admission_quota import admit
from .defaults import default_pod_spec, qos_class
from .endpointslices import EndpointSliceController
from .label_index import LabelIndex

REVISION = "deployment.kubernetes.io/revision"
CHANGE_CAUSE = "kubernetes.io/change-cause"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
EVICTION_SECONDS = 300  # default tolerationSeconds for the not-ready/unreachable taints
INPUT_KINDS = ("Deployment", "ReplicaSet", "Pod", "ReplicationController")  # all that the workload controllers read
#: Kinds that keep a number of pods from a template (the ReplicaSet controller's loop serves both).
POD_OWNERS = ("ReplicaSet", "ReplicationController")
FOREVER = datetime.max.replace(tzinfo=timezone.utc)
NEVER = datetime.min.replace(tzinfo=timezone.utc)


#: What a pass over an owner read: its resourceVersion, the store's owned_version of the objects
#: it controls, and their resourceVersions (in list order).
_Inputs = tuple[str, int, tuple[str, ...]]


def _parse_time(s: str, like: datetime) -> datetime:
    return _parse_utc(s).replace(tzinfo=like.tzinfo)


@functools.lru_cache(maxsize=4096)
def _parse_utc(s: str) -> datetime:
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ")


def _idle_until(d: dict[str, Any]) -> datetime:
    """Until when a pass over a Deployment whose inputs have not moved changes nothing: for ever
    once its rollout completed or timed out, until its progress deadline while it progresses,
    and never before it reports progress at all."""
    progressing = condition(d, "Progressing")
    if progressing is None or not progressing.get("lastUpdateTime"):
        return NEVER
    if progressing.get("reason") in ("NewReplicaSetAvailable", "ProgressDeadlineExceeded"):
        return FOREVER
    deadline = timedelta(seconds=int(d["spec"].get("progressDeadlineSeconds", 600)))
    return _parse_utc(progressing["lastUpdateTime"]).replace(tzinfo=timezone.utc) + deadline


def _resolve_int_or_percent(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        x = total * float(value[:-1]) / 100
        return math.ceil(x) if round_up else math.floor(x)
    return int(value)


class Controllers:
    def __init__(self, store: Store, events: EventRecorder) -> None:
        self.store = store
        self.events = events
        self._hashes: dict[tuple[str, int], str] = {}  # (uid, generation) -> pod-template-hash
        # uid -> (replicas, refusal, retry after, delay s): a ReplicaSet whose create admission
        # refused waits before trying again, doubling up to 5 minutes, as the real controller's
        # rate-limited queue does (not a new refused pod and Event every tick); a new replica
        # count retries at once.
        self._refused: dict[str, tuple[int, str, datetime, float]] = {}
        # uid -> the resourceVersions of an object and what it controls, seen by a pass that
        # wrote nothing: the same inputs would give the same (empty) result, so the pass is skipped.
        # (The group's owned_version is kept too: while it and the object's resourceVersion
        # stand, the resourceVersions of the group's objects are those seen.)
        self._idle: dict[str, _Inputs] = {}
        self._due: dict[str, tuple[str, datetime]] = {}  # uid -> (resourceVersion, _idle_until then)
        self._collected: tuple[int, ...] = ()  # the kinds' versions after the last garbage collection
        # Whether an object may have lost its controlling owner since the last collection: an
        # owner was deleted, or an object was written whose owner was missing then (the store
        # tells every change, _note_change). Until one of those, a collection finds nothing.
        self._orphans_possible = True
        store.listeners.append(self._note_change)
        # The uids of the owners (Deployments, ReplicaSets, ReplicationControllers) that may have
        # moved since a pass last looked at them: the object itself was written, or an object of
        # its group (a ReplicaSet of a Deployment, a Pod of a pod owner) was written, added or
        # gone — the store tells every change (_note_moved). An owner seen idle whose uid is not
        # here has the resourceVersions it was seen with, so the pass skips it without reading
        # them (a mark too many only costs that reading).
        self._moved: set[str] = set()
        # (kind, namespace, name) of a ReplicaSet or Pod -> the uid of its controlling owner when
        # last written: a change that drops or swaps the owner moves the former owner's group too.
        self._filed: dict[tuple[str, str, str], str] = {}
        store.listeners.append(self._note_moved)
        self._quiet: tuple[int, ...] = ()  # the kinds' versions at a whole pass that wrote nothing …
        self._quiet_until = FOREVER  # … and until when a pass over them stays a no-op

    def _template_hash(self, d: dict[str, Any]) -> str:
        key = (d["metadata"]["uid"], d["metadata"].get("generation", 1))
        h = self._hashes.get(key)
        if h is None:
            h = self._hashes[key] = template_hash(d["spec"]["template"])
        return h

    def reconcile(self) -> None:
        now = self.store.clock()
        inputs = self.store.kind_version(*INPUT_KINDS)
        if inputs == self._quiet and now <= self._quiet_until:
            return
        idle, self._idle = self._idle, {}
        # Marks made before this pass; those made during it (a Deployment's pass scales its
        # ReplicaSets) land in the new self._moved, read as well and kept for the next pass.
        moved, self._moved = self._moved, set()
        before = self.store.resource_version
        quiet_until = FOREVER
        for d in self.store.list("Deployment"):
            uid = d["metadata"]["uid"]
            due = self._idle_until(d)
            quiet_until = min(quiet_until, due)
            if now <= due and self._kept_idle(idle, moved, uid):
                continue
            self._unless_idle(idle, d, "ReplicaSet", self.store.owned("ReplicaSet", uid), now <= due)
        for rs in [*self.store.list("ReplicaSet"), *self.store.list("ReplicationController")]:
            uid = rs["metadata"]["uid"]
            may_skip = uid not in self._refused  # (a refused one retries on time)
            if may_skip and self._kept_idle(idle, moved, uid):
                continue
            self._unless_idle(idle, rs, "Pod", self.store.owned("Pod", uid), may_skip)
        for _, _, retry_at, _ in self._refused.values():
            quiet_until = min(quiet_until, retry_at)
        self.collect_garbage()
        quiet = self.store.resource_version == before
        self._quiet, self._quiet_until = (inputs, quiet_until) if quiet else ((), FOREVER)

    def _idle_until(self, d: dict[str, Any]) -> datetime:
        """:func:`_idle_until`, kept per Deployment while its resourceVersion stands (it reads
        the Deployment alone)."""
        md = d["metadata"]
        cached = self._due.get(md["uid"])
        if cached is None or cached[0] != md["resourceVersion"]:
            cached = self._due[md["uid"]] = (md["resourceVersion"], _idle_until(d))
        return cached[1]

    def _unless_idle(self, idle: dict[str, _Inputs], owner: dict[str, Any], kind: str,
                     owned: list[dict[str, Any]], may_skip: bool) -> None:
        """Reconcile ``owner`` (a Deployment, or a pod owner) with the objects of ``kind`` it
        controls, unless its inputs (the resourceVersions of it and of them) are those of a pass
        that wrote nothing."""
        md = owner["metadata"]
        uid = md["uid"]
        group = self.store.owned_version(kind, uid)
        seen = idle.get(uid)
        if seen is not None and seen[0] == md["resourceVersion"] and seen[1] == group:
            inputs = seen  # no change to the owner or to its group: the same resourceVersions
        else:
            inputs = (md["resourceVersion"], group, tuple(o["metadata"]["resourceVersion"] for o in owned))
            if seen is not None and (seen[0], seen[2]) != (inputs[0], inputs[2]):
                seen = None
        if may_skip and seen is not None:
            self._idle[uid] = inputs
            return
        before = self.store.resource_version
        if kind == "Pod":
            self.reconcile_replicaset(owner, owned)
        else:
            self.reconcile_deployment(owner, owned)
        if self.store.resource_version == before:
            self._idle[uid] = inputs

    # -- reacting to an API write -----------------------------------------------------------
    def react(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """An API write changed (or deleted) ``obj``: reconcile now what a real controller's
        watch would have queued at once — the Deployment it is or belongs to, that Deployment's
        ReplicaSets, the ReplicaSet of a Pod — instead of waiting for the next tick; nothing
        else (agent writes are rare, a tick's full pass is not). Returns the ReplicaSets
        reconciled: their new pods are for the scheduler. Call with the store lock held."""
        kind, md = obj.get("kind"), obj.get("metadata") or {}
        ns = md.get("namespace")
        owner: dict[str, Any] | None = obj
        if kind == "Pod":
            owner = self._live_owner(obj, "ReplicaSet") or self._live_owner(obj, "ReplicationController")
        if owner is not None and owner.get("kind") == "ReplicaSet":
            owner = self._live_owner(owner, "Deployment") or owner
        if owner is None:
            return []
        if owner.get("kind") in POD_OWNERS:
            rs = self.store.get(owner["kind"], ns, owner["metadata"]["name"])
            if rs is None:
                return []
            self.reconcile_replicaset(rs)
            return [rs]
        if owner.get("kind") != "Deployment":
            return []
        d = self.store.get("Deployment", ns, owner["metadata"]["name"])
        if d is None:
            return []
        self.reconcile_deployment(d)
        rss = self._owned_replicasets(d)
        for rs in rss:
            self.reconcile_replicaset(rs)
        self.reconcile_deployment(d, rss)  # the ReplicaSets' new status reaches the Deployment
        return rss

    def _live_owner(self, obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
        """The object's controlling owner of ``kind``, if it still exists (same uid)."""
        ref = controller_of(obj)
        if not ref or ref.get("kind") != kind:
            return None
        owner = self.store.get(kind, obj["metadata"].get("namespace"), ref["name"])
        return owner if owner is not None and owner["metadata"]["uid"] == ref.get("uid") else None

    # -- deployments -----------------------------------------------------------------------
    def _owned_replicasets(self, d: dict[str, Any]) -> list[dict[str, Any]]:
        ns = d["metadata"]["namespace"]
        return [rs for rs in self.store.list("ReplicaSet", ns) if is_owned_by(rs, d)]

    def reconcile_deployment(self, d: dict[str, Any], rss: list[dict[str, Any]] | None = None) -> None:
        now = self.store.clock()
        spec = d["spec"]
        desired = int(spec.get("replicas", 1))
        rss = list(rss) if rss is not None else self._owned_replicasets(d)
        h = self._template_hash(d)
        new_rs = next((rs for rs in rss if rs["metadata"]["labels"].get("pod-template-hash") == h), None)
        max_rev = max((int(rs["metadata"].get("annotations", {}).get(REVISION, "0")) for rs in rss), default=0)
        if spec.get("paused"):
            self._update_deployment_status(d, rss, new_rs, now, self._sync_revision(d, new_rs))
            return
        if new_rs is None:
            new_rs = self._create_replicaset(d, h, max_rev + 1, 0 if rss else desired)
            rss.append(new_rs)
        elif int(new_rs["metadata"]["annotations"].get(REVISION, "0")) < max_rev:
            # Rolling back to an older template: that ReplicaSet becomes the newest revision.
            new_rs["metadata"]["annotations"][REVISION] = str(max_rev + 1)
            self._copy_change_cause(d, new_rs)
            self.store.touch(new_rs)
        old = [rs for rs in rss if rs is not new_rs]
        strategy = spec.get("strategy", {}) or {}
        if strategy.get("type") == "Recreate":
            self._recreate(d, new_rs, old, desired)
        else:
            self._roll(d, new_rs, old, desired, strategy.get("rollingUpdate") or {})
        self._prune_history(d, old)
        live = [rs for rs in rss if self.store.get("ReplicaSet", rs["metadata"]["namespace"], rs["metadata"]["name"]) is rs]
        self._update_deployment_status(d, live, new_rs, now, self._sync_revision(d, new_rs))

    @staticmethod
    def _sync_revision(d: dict[str, Any], new_rs: dict[str, Any] | None) -> bool:
        """The Deployment carries its newest ReplicaSet's revision (the real controller's
        ``SetDeploymentRevision``): scripts and agents read it, ``kubectl rollout undo`` does
        not but ``rollout history`` lists what it counts. True if it changed (not yet published)."""
        if new_rs is None:
            return False
        revision = (new_rs["metadata"].get("annotations") or {}).get(REVISION)
        annotations = d["metadata"].setdefault("annotations", {})
        if revision is None or annotations.get(REVISION) == revision:
            return False
        annotations[REVISION] = revision
        return True

    def _copy_change_cause(self, d: dict[str, Any], rs: dict[str, Any]) -> None:
        cause = (d["metadata"].get("annotations") or {}).get(CHANGE_CAUSE)
        if cause:
            rs["metadata"]["annotations"][CHANGE_CAUSE] = cause

    def _create_replicaset(self, d: dict[str, Any], h: str, revision: int, replicas: int) -> dict[str, Any]:
        template = copy.deepcopy(d["spec"]["template"])
        template.setdefault("metadata", {}).setdefault("labels", {})["pod-template-hash"] = h
        selector = copy.deepcopy(d["spec"]["selector"])
        selector.setdefault("matchLabels", {})["pod-template-hash"] = h
        annotations = {REVISION: str(revision), "deployment.kubernetes.io/desired-replicas": str(d["spec"].get("replicas", 1)),
                       "deployment.kubernetes.io/max-replicas": str(d["spec"].get("replicas", 1) + 1)}
        cause = (d["metadata"].get("annotations") or {}).get(CHANGE_CAUSE)
        if cause:
            annotations[CHANGE_CAUSE] = cause
        rs: dict[str, Any]
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": f"{d['metadata']['name']}-{h}", "namespace": d["metadata"]["namespace"],
                           "labels": dict(template["metadata"]["labels"]), "annotations": annotations,
                           "ownerReferences": [owner_ref(d)]},
              "spec": {"replicas": replicas, "selector": selector, "template": template},
              "status": {"replicas": 0}}
        rs = self.store.create(rs)
        self.events.record(d, "Normal", "ScalingReplicaSet",
                           f"Scaled up replica set {rs['metadata']['name']} from 0 to {replicas}", "deployment-controller")
        return rs

    def _scale(self, d: dict[str, Any], rs: dict[str, Any], replicas: int) -> None:
        current = int(rs["spec"].get("replicas", 0))
        if current == replicas:
            return
        rs["spec"]["replicas"] = replicas
        rs["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/desired-replicas"] = str(d["spec"].get("replicas", 1))
        self.store.touch(rs, spec_changed=True)
        verb = "up" if replicas > current else "down"
        self.events.record(d, "Normal", "ScalingReplicaSet",
                           f"Scaled {verb} replica set {rs['metadata']['name']} from {current} to {replicas}",
                           "deployment-controller")

    def _ready_count(self, rs: dict[str, Any]) -> int:
        return int(rs.get("status", {}).get("availableReplicas", 0))

    def _roll(self, d: dict[str, Any], new_rs: dict[str, Any], old: list[dict[str, Any]], desired: int,
              rolling: dict[str, Any]) -> None:
        surge = _resolve_int_or_percent(rolling.get("maxSurge", "25%"), desired, True)
        unavailable = _resolve_int_or_percent(rolling.get("maxUnavailable", "25%"), desired, False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        old_total = sum(int(rs["spec"].get("replicas", 0)) for rs in old)
        new_replicas = int(new_rs["spec"].get("replicas", 0))
        if not old_total:
            self._scale(d, new_rs, desired)
            return
        # Scale up the new ReplicaSet within the surge budget.
        room = desired + surge - (old_total + new_replicas)
        if room > 0 and new_replicas < desired:
            new_replicas = min(desired, new_replicas + room)
            self._scale(d, new_rs, new_replicas)
        # Scale down old ReplicaSets: unhealthy pods first, healthy ones within maxUnavailable.
        available = sum(self._ready_count(rs) for rs in old) + self._ready_count(new_rs)
        can_remove = available - (desired - unavailable)
        for rs in sorted(old, key=lambda r: r["metadata"]["creationTimestamp"]):
            replicas = int(rs["spec"].get("replicas", 0))
            if replicas == 0:
                continue
            unhealthy = max(0, replicas - self._ready_count(rs))
            remove = min(replicas, unhealthy + max(0, can_remove))
            if remove > 0:
                can_remove -= max(0, remove - unhealthy)
                self._scale(d, rs, replicas - remove)

    def _recreate(self, d: dict[str, Any], new_rs: dict[str, Any], old: list[dict[str, Any]], desired: int) -> None:
        for rs in old:
            self._scale(d, rs, 0)
        if all(int(rs.get("status", {}).get("replicas", 0)) == 0 for rs in old):
            self._scale(d, new_rs, desired)

    def _prune_history(self, d: dict[str, Any], old: list[dict[str, Any]]) -> None:
        limit = int(d["spec"].get("revisionHistoryLimit", 10))
        idle = [rs for rs in old if int(rs["spec"].get("replicas", 0)) == 0 and int(rs.get("status", {}).get("replicas", 0)) == 0]
        idle.sort(key=lambda rs: int(rs["metadata"]["annotations"].get(REVISION, "0")))
        for rs in idle[: max(0, len(idle) - limit)]:
            self.store.delete("ReplicaSet", rs["metadata"]["namespace"], rs["metadata"]["name"])

    def _update_deployment_status(self, d: dict[str, Any], rss: list[dict[str, Any]], new_rs: dict[str, Any] | None,
                                  now: datetime, changed: bool = False) -> None:
        desired = int(d["spec"].get("replicas", 1))
        total = sum(int(rs.get("status", {}).get("replicas", 0)) for rs in rss)
        ready = sum(int(rs.get("status", {}).get("readyReplicas", 0)) for rs in rss)
        available = sum(int(rs.get("status", {}).get("availableReplicas", 0)) for rs in rss)
        updated = int(new_rs.get("status", {}).get("replicas", 0)) if new_rs else 0
        status = d.setdefault("status", {})
        before = dict(status, conditions=[dict(c) for c in status.get("conditions") or []])
        status.update(observedGeneration=d["metadata"].get("generation", 1), replicas=total, updatedReplicas=updated,
                      readyReplicas=ready, availableReplicas=available)
        if total - available > 0:
            status["unavailableReplicas"] = total - available
        else:
            status.pop("unavailableReplicas", None)
        for k in ("readyReplicas", "availableReplicas", "updatedReplicas", "replicas"):
            if status.get(k) == 0:
                status.pop(k)
        rolling = (d["spec"].get("strategy") or {}).get("rollingUpdate") or {}
        min_available = desired - _resolve_int_or_percent(rolling.get("maxUnavailable", "25%"), desired, False)
        if available >= min_available:
            set_condition(d, "Available", "True", now, "MinimumReplicasAvailable", "Deployment has minimum availability.",
                          with_update_time=True)
        else:
            set_condition(d, "Available", "False", now, "MinimumReplicasUnavailable",
                          "Deployment does not have minimum availability.", with_update_time=True)
        # A ReplicaSet's FailedCreate (quota, LimitRange) shows on its Deployment, as the real
        # controller copies it; it goes when the creates succeed again.
        failed = next((c for rs in rss if (c := condition(rs, "ReplicaFailure")) is not None), None)
        if failed is not None:
            set_condition(d, "ReplicaFailure", "True", now, "FailedCreate", failed.get("message", ""),
                          with_update_time=True)
        elif condition(d, "ReplicaFailure") is not None:
            status["conditions"] = [c for c in status["conditions"] if c["type"] != "ReplicaFailure"]
        name = new_rs["metadata"]["name"] if new_rs else d["metadata"]["name"]
        complete = new_rs is not None and updated == desired and available >= desired and total == desired
        progress = before.get("updatedReplicas") != status.get("updatedReplicas") or \
            before.get("availableReplicas") != status.get("availableReplicas") or \
            before.get("observedGeneration") != status.get("observedGeneration")
        progressing = condition(d, "Progressing")
        if complete:
            set_condition(d, "Progressing", "True", now, "NewReplicaSetAvailable",
                          f'ReplicaSet "{name}" has successfully progressed.', with_update_time=True)
        elif progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded" and not progress:
            pass  # timed out, and nothing moved since (progress, or a new template, resumes it)
        else:
            deadline = int(d["spec"].get("progressDeadlineSeconds", 600))
            marker = progressing.get("lastUpdateTime") if progressing else None
            changed = progress or progressing is None or progressing.get("reason") == "NewReplicaSetAvailable"
            if changed or marker is None:
                set_condition(d, "Progressing", "True", now, "ReplicaSetUpdated",
                              f'ReplicaSet "{name}" is progressing.', with_update_time=True)
                progressing = condition(d, "Progressing")
                if progressing is not None:
                    progressing["lastUpdateTime"] = iso(now)
            elif (now - _parse_time(marker, now)).total_seconds() > deadline:
                set_condition(d, "Progressing", "False", now, "ProgressDeadlineExceeded",
                              f'ReplicaSet "{name}" has timed out progressing.', with_update_time=True)
                self.events.record(d, "Warning", "ProgressDeadlineExceeded",
                                   f'Deployment "{d["metadata"]["name"]}" exceeded its progress deadline',
                                   "deployment-controller")
        if changed or status != before:
            self.store.touch(d)

    # -- replica sets (and replication controllers) -----------------------------------------
    def reconcile_replicaset(self, rs: dict[str, Any], owned: list[dict[str, Any]] | None = None) -> None:
        """Keep ``spec.replicas`` pods from the template of a ReplicaSet or a ReplicationController
        (the real controller manager runs one loop for both)."""
        ns = rs["metadata"]["namespace"]
        if owned is None:
            owned = [p for p in self.store.list("Pod", ns) if is_owned_by(p, rs)]
        pods = [p for p in owned if pod_is_active(p)]
        want = int(rs["spec"].get("replicas", 0))
        failure: str | None = None  # an admission refusal (quota, LimitRange) stops this pass's creates
        uid, now = rs["metadata"]["uid"], self.store.clock()
        refused = self._refused.get(uid)
        if refused is not None and (refused[0] != want or len(pods) >= want):
            del self._refused[uid]  # a new count, or enough pods: no backing off
            refused = None
        if len(pods) < want and refused is not None and now < refused[2]:
            failure = refused[1]  # backing off: the refusal stands
        elif len(pods) < want:
            for _ in range(want - len(pods)):
                created = self._create_pod(rs)
                if isinstance(created, str):
                    failure = created
                    delay = min(300.0, refused[3] * 2) if refused is not None else 30.0
                    self._refused[uid] = (want, created, now + timedelta(seconds=delay), delay)
                    break
                pods.append(created)
            else:
                self._refused.pop(uid, None)
        elif len(pods) > want:
            # The real controller's order: unscheduled, then not ready, then newest first.
            pods.sort(key=lambda p: (bool(p["spec"].get("nodeName")), pod_is_ready(p),
                                     p["metadata"]["creationTimestamp"]), reverse=False)
            doomed = pods[: len(pods) - want]
            for p in doomed:
                self.store.delete("Pod", ns, p["metadata"]["name"])
                self.events.record(rs, "Normal", "SuccessfulDelete", f"Deleted pod: {p['metadata']['name']}",
                                   _component(rs))
            pods = pods[len(doomed):]
        ready = sum(1 for p in pods if pod_is_ready(p))
        status = {"replicas": len(pods), "fullyLabeledReplicas": len(pods), "readyReplicas": ready,
                  "availableReplicas": ready, "observedGeneration": rs["metadata"].get("generation", 1)}
        for k in ("readyReplicas", "availableReplicas", "fullyLabeledReplicas"):
            if status[k] == 0:
                status.pop(k)
        if failure is not None:
            kept = condition(rs, "ReplicaFailure")
            status["conditions"] = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
                                     "message": failure, "lastTransitionTime": (kept or {}).get(
                                         "lastTransitionTime") or iso(self.store.clock())}]
        if rs.get("status") != status:
            rs["status"] = status
            self.store.touch(rs)

    def _create_pod(self, rs: dict[str, Any]) -> dict[str, Any] | str:
        """The new pod, or the admission plugins' refusal (recorded as ``FailedCreate``)."""
        template = rs["spec"]["template"]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": rs["metadata"]["name"] + "-", "namespace": rs["metadata"]["namespace"],
                            "labels": dict(template.get("metadata", {}).get("labels") or {}),
                            "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
                            "ownerReferences": [owner_ref(rs)]},
               "spec": copy.deepcopy(template["spec"]),
               "status": {"phase": "Pending", "qosClass": qos_class(template["spec"])}}
        spec = pod["spec"]
        default_pod_spec(spec)
        spec.setdefault("tolerations", [
            {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": EVICTION_SECONDS},
            {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": EVICTION_SECONDS}])
        try:
            priority.admit(self.store, pod)  # the Priority plugin admits before the quota does
        except ApiError as e:
            message = f"Error creating: {e.message}"
            self.events.record(rs, "Warning", "FailedCreate", message, _component(rs))
            return message
        if self.store.list("ResourceQuota", pod["metadata"]["namespace"]) or \
                self.store.list("LimitRange", pod["metadata"]["namespace"]):
            pod["metadata"]["name"] = self.store.generate_name(pod["metadata"]["generateName"])
            try:
                admit(self.store, pod)
            except ApiError as refused:
                message = f"Error creating: {refused.message}"
                self.events.record(rs, "Warning", "FailedCreate", message, _component(rs))
                return message
        pod = self.store.create(pod)
        self.events.record(rs, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}",
                           _component(rs))
        return pod

    # -- garbage collection ----------------------------------------------------------------
    def collect_garbage(self) -> None:
        """Delete objects whose controlling owner is gone (cascading delete)."""
        if self.store.kind_version(*INPUT_KINDS) == self._collected:
            return
        if not self._orphans_possible:
            self._collected = self.store.kind_version(*INPUT_KINDS)
            return
        self._orphans_possible = False  # (what this pass deletes sets it again: the cascade's next step)
        for kind, owner_kind in _OWNED_BY:
            for obj in list(self.store.list(kind)):
                ref = controller_of(obj)
                if ref and ref.get("kind") == owner_kind:
                    owner = self.store.get(owner_kind, obj["metadata"]["namespace"], ref["name"])
                    if owner is None or owner["metadata"]["uid"] != ref["uid"]:
                        self.store.delete(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
        self._collected = self.store.kind_version(*INPUT_KINDS)

    def _note_change(self, type_: str, obj: dict[str, Any]) -> None:
        """The store's listener (under its lock): could this change leave an object without its
        controlling owner?"""
        if self._orphans_possible:
            return
        kind = obj.get("kind")
        if type_ == "DELETED":
            self._orphans_possible = kind in _OWNER_KINDS
            return
        if kind not in _OWNED_KINDS:
            return
        ref = controller_of(obj)
        if ref and (kind, ref.get("kind")) in _OWNED_BY:
            owner = self.store.get(ref["kind"], obj["metadata"].get("namespace"), ref.get("name", ""))
            self._orphans_possible = owner is None or owner["metadata"]["uid"] != ref.get("uid")


    def _kept_idle(self, idle: dict[str, Any], moved: set[str], uid: str) -> bool:
        """Whether the owner was seen idle and is unmarked since, before this pass (``moved``)
        and during it: its inputs are those it was seen with, so it stays idle, unread."""
        if uid in idle and uid not in moved and uid not in self._moved:
            self._idle[uid] = idle[uid]
            return True
        return False

    def _note_moved(self, type_: str, obj: dict[str, Any]) -> None:
        """The store's listener (under its lock): mark the owners whose inputs this change moves
        (see ``_moved``): the object if it is an owner, and the owner of its group before and
        after (what the store's owner index files it under, for the kinds grouped here)."""
        kind = obj.get("kind")
        if kind not in _GROUPED_KINDS:
            return
        md = obj["metadata"]
        if kind in _MARKED_OWNERS:
            self._moved.add(md.get("uid"))
        if kind in _OWNED_KINDS:
            key = (kind, md.get("namespace") or "", md["name"])
            was = self._filed.pop(key, None)
            if was is not None:
                self._moved.add(was)
            ref = controller_of(obj) if type_ != "DELETED" else None
            if ref is not None and ref.get("uid") is not None:
                self._filed[key] = ref["uid"]
                self._moved.add(ref["uid"])


#: (kind, the kind of its controlling owner) pairs the garbage collector deletes orphans of.
_OWNED_BY = (("ReplicaSet", "Deployment"), ("Pod", "ReplicaSet"), ("Pod", "ReplicationController"))
_OWNED_KINDS = frozenset(k for k, _ in _OWNED_BY)
_OWNER_KINDS = frozenset(o for _, o in _OWNED_BY)
#: The owners a workload pass reconciles, and every kind whose change moves one's inputs.
_MARKED_OWNERS = frozenset({"Deployment", *POD_OWNERS})
_GROUPED_KINDS = _MARKED_OWNERS | _OWNED_KINDS


def _has_address(pod: dict[str, Any]) -> bool:
    """Whether the pod has an address for Endpoints: bound to a node, with an IP."""
    return bool(pod["spec"].get("nodeName") and pod.get("status", {}).get("podIP"))


def _component(owner: dict[str, Any]) -> str:
    """The controller that reports on a pod owner's events."""
    return "replication-controller" if owner.get("kind") == "ReplicationController" else "replicaset-controller"


_ENDPOINTS_INPUTS = ("Pod", "Service", "Endpoints")


class EndpointsController:
    """Keeps one Endpoints object per Service with the ready (and not-ready) pod addresses."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._synced: tuple[int, ...] = ()  # the input kinds' versions after the last pass
        self._ns_synced: dict[str, tuple[int, ...]] = {}  # namespace -> the same, within it
        self.slices = EndpointSliceController(store)  # kept with Endpoints, in the same pass
        # The pods by (namespace, ``app`` label), kept from the store's changes: the apps'
        # Services select on that label alone.
        self._app_pods = LabelIndex(store, "Pod", "app")
        # (namespace, name) of a Service that selects on ``app`` alone -> what its Endpoints
        # were last made from, after that step's write: (the Service's resourceVersion, its
        # app group's version, the Endpoints' resourceVersion or None). The same inputs give
        # the same addresses, which the Endpoints then hold already: the step is skipped.
        self._made: dict[tuple[str, str], tuple[str, int, Any]] = {}
        self._pruned: tuple[int, ...] = ()  # the Service and Endpoints versions after the last orphan sweep

    def reconcile(self) -> None:
        if self.store.kind_version("Pod", "Service", "Endpoints") != self._synced:
            self._sync()  # a pass computes Endpoints from these alone: skipped when none moved
            self._synced = self.store.kind_version("Pod", "Service", "Endpoints")
        self.slices.reconcile()

    def _sync(self) -> None:
        # A namespace's Endpoints are a function of its own pods, Services and Endpoints: one
        # whose versions of those kinds stand where the last pass left them (_ns_synced, taken
        # after its writes) would be given the same Endpoints again, and is skipped.
        # Within a namespace that moved, a Service selecting on ``app`` alone is a function of
        # its app group (_made): one whose group, Service and Endpoints stood still is skipped.
        by_label: dict[tuple[str, str, str], list[dict[str, Any]]] = {}  # (ns, key, value) -> pods
        labelled: set[str] = set()  # the namespaces by_label holds
        dirty: dict[str, bool] = {}

        def changed(ns: str) -> bool:
            moved = dirty.get(ns)
            if moved is None:
                moved = dirty[ns] = self._ns_synced.get(ns) != self.store.namespace_version(ns, *_ENDPOINTS_INPUTS)
            return moved

        def addressed(ns: str, key: str, value: Any) -> list[dict[str, Any]]:
            """The namespace's pods with an address (on a node, with an IP) and this label."""
            if ns not in labelled:
                labelled.add(ns)
                for p in self.store.list("Pod", ns):
                    if _has_address(p):
                        for k, v in (p["metadata"].get("labels") or {}).items():
                            by_label.setdefault((ns, k, v), []).append(p)
            return by_label.get((ns, key, value), [])

        for svc in self.store.list("Service"):
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            if not changed(ns):
                continue
            selector = svc["spec"].get("selector")
            app = selector["app"] if selector and list(selector) == ["app"] and isinstance(selector["app"], str) \
                else None
            made = None
            if app is not None:
                ep = self.store.get("Endpoints", ns, name)
                made = (svc["metadata"]["resourceVersion"], self._app_pods.version(ns, app),
                        None if ep is None else ep["metadata"]["resourceVersion"])
                if self._made.get((ns, name)) == made:
                    continue
            ready: list[dict[str, Any]] = []
            not_ready: list[dict[str, Any]] = []
            if selector:
                first = next(iter(selector.items()))
                # (the app group in list order, less the pods without an address: what
                # addressed() would give, without scanning the namespace)
                candidates = addressed(ns, *first) if app is None else [
                    p for p in self._app_pods.members(ns, app) if _has_address(p)]
                for p in candidates:
                    if not selector_matches({"matchLabels": selector}, p["metadata"].get("labels") or {}):
                        continue
                    addr = {"ip": p["status"]["podIP"], "nodeName": p["spec"]["nodeName"],
                            "targetRef": {"kind": "Pod", "namespace": ns, "name": p["metadata"]["name"],
                                          "uid": p["metadata"]["uid"]}}
                    (ready if pod_is_ready(p) else not_ready).append(addr)
            ports = [{"name": pt.get("name", ""), "port": pt.get("targetPort", pt.get("port")),
                      "protocol": pt.get("protocol", "TCP")}
                     for pt in svc["spec"].get("ports") or []]
            subset: dict[str, Any] = {}
            if ready:
                subset["addresses"] = ready
            if not_ready:
                subset["notReadyAddresses"] = not_ready
            subsets = [dict(subset, ports=ports)] if subset else []
            ep = self.store.get("Endpoints", ns, name)
            if ep is None:
                if selector:
                    self.store.create({"apiVersion": "v1", "kind": "Endpoints",
                                       "metadata": {"name": name, "namespace": ns,
                                                    "labels": dict(svc["metadata"].get("labels") or {})},
                                       "subsets": subsets})
            elif ep.get("subsets") != subsets:
                ep["subsets"] = subsets
                self.store.touch(ep)
            if made is not None:
                ep = self.store.get("Endpoints", ns, name)
                self._made[(ns, name)] = (made[0], made[1], None if ep is None else ep["metadata"]["resourceVersion"])
        # Endpoints whose Service is gone: none can appear while neither kind moves.
        if self.store.kind_version("Service", "Endpoints") != self._pruned:
            for ep in list(self.store.list("Endpoints")):
                if self.store.get("Service", ep["metadata"]["namespace"], ep["metadata"]["name"]) is None:
                    self.store.delete("Endpoints", ep["metadata"]["namespace"], ep["metadata"]["name"])
            self._pruned = self.store.kind_version("Service", "Endpoints")
        for ns in dirty:
            self._ns_synced[ns] = self.store.namespace_version(ns, *_ENDPOINTS_INPUTS)


class NodeLifecycleController:
    """Marks nodes whose kubelet stopped reporting as NotReady/Unknown, taints them, and evicts
    their pods after the default toleration (300 s)."""

    def __init__(self, store: Store, events: EventRecorder, grace_seconds: float = 40.0) -> None:
        self.store = store
        self.events = events
        self.grace_seconds = grace_seconds

    def reconcile(self, heartbeats: dict[str, datetime]) -> None:
        now = self.store.clock()
        for node in self.store.list("Node"):
            name = node["metadata"]["name"]
            last = heartbeats.get(name)
            stale = last is None or (now - last).total_seconds() > self.grace_seconds
            changed = False
            ready = condition(node, "Ready")
            if stale and ready and ready["status"] == "True":
                changed |= set_condition(node, "Ready", "Unknown", now, "NodeStatusUnknown",
                                         "Kubelet stopped posting node status.")
                self.events.record(node, "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady",
                                   "node-controller")
                changed |= _set_taint(node, UNREACHABLE_TAINT, "NoExecute", now)
                changed |= _set_taint(node, UNREACHABLE_TAINT, "NoSchedule", now)
                for pod in self.store.list("Pod"):
                    if pod["spec"].get("nodeName") == name and pod_is_active(pod):
                        if set_condition(pod, "Ready", "False", now, "NodeNotReady", ""):
                            self.store.touch(pod)
            elif not stale and ready and ready["status"] != "True":
                changed |= set_condition(node, "Ready", "True", now, "KubeletReady", "kubelet is posting ready status")
                node["spec"]["taints"] = [t for t in node["spec"].get("taints") or [] if t["key"] != UNREACHABLE_TAINT]
                if not node["spec"]["taints"]:
                    node["spec"].pop("taints")
                changed = True
                self.events.record(node, "Normal", "NodeReady", f"Node {name} status is now: NodeReady", "kubelet")
            if changed:
                self.store.touch(node)
            if stale:
                self._evict(node, now)

    def _evict(self, node: dict[str, Any], now: datetime) -> None:
        taint_time = next((t.get("timeAdded") for t in node["spec"].get("taints") or []
                           if t["key"] == UNREACHABLE_TAINT and t["effect"] == "NoExecute"), None)
        if not taint_time or (now - _parse_time(taint_time, now)).total_seconds() < EVICTION_SECONDS:
            return
        for pod in list(self.store.list("Pod")):
            if pod["spec"].get("nodeName") == node["metadata"]["name"] and not _tolerates_for_ever(pod):
                self.events.record(pod, "Normal", "TaintManagerEviction",
                                   f"Marking for deletion Pod {pod['metadata']['namespace']}/{pod['metadata']['name']}",
                                   "taint-eviction-controller")
                self.store.delete("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])


def _tolerates_for_ever(pod: dict[str, Any]) -> bool:
    """A pod that tolerates the unreachable NoExecute taint without ``tolerationSeconds`` (a
    DaemonSet's) is never evicted by the taint manager: it stays bound to its node."""
    return any(t.get("key") in (UNREACHABLE_TAINT, None, "") and t.get("effect") in ("NoExecute", None, "")
               and t.get("operator") == "Exists" and t.get("tolerationSeconds") is None
               for t in pod["spec"].get("tolerations") or [])


def _set_taint(node: dict[str, Any], key: str, effect: str, now: datetime) -> bool:
    taints = node["spec"].setdefault("taints", [])
    if any(t["key"] == key and t["effect"] == effect for t in taints):
        return False
    taint = {"key": key, "effect": effect}
    if effect == "NoExecute":
        taint["timeAdded"] = iso(now)
    taints.append(taint)
    return True

