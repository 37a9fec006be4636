"""The StatefulSet controller of kube-controller-manager: stable pod names ``<set>-<ordinal>``,
one claim per pod and volume claim template (``<template>-<set>-<ordinal>``, kept when the pod
goes), ordered (OrderedReady) or parallel pod management, rolling updates from the highest
ordinal down to the partition, and the ControllerRevisions that ``kubectl rollout history`` and
``rollout undo`` read (each revision's ``data`` is the strategic merge patch ``undo`` sends back).

A pass over a set whose inputs (the set, its pods, its revisions, its claims) have not moved
since a pass that wrote nothing is skipped, as the Deployment controller does.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from ..k8s.objects import (
    EventRecorder,
    controller_of,
    owner_ref,
    pod_is_active,
    pod_is_ready,
    template_hash,
)
from ..k8s.store import Store
from .defaults import default_pod_spec, qos_class
from .volumes import protect

POD_NAME = "statefulset.kubernetes.io/pod-name"
POD_INDEX = "apps.kubernetes.io/pod-index"
REVISION_HASH = "controller-revision-hash"
COMPONENT = "statefulset-controller"
INPUT_KINDS = ("StatefulSet", "Pod", "ControllerRevision", "PersistentVolumeClaim")


def ordinal_of(pod_name: str, set_name: str) -> Optional[int]:
    """The ordinal of a pod named ``<set>-<n>``, or None if the name is not one of the set's."""
    prefix = set_name + "-"
    if not pod_name.startswith(prefix) or not pod_name[len(prefix):].isdigit():
        return None
    return int(pod_name[len(prefix):])


def claim_name(template: str, set_name: str, ordinal: int) -> str:
    return f"{template}-{set_name}-{ordinal}"


def _revision_data(template: dict[str, Any]) -> dict[str, Any]:
    """What the real controller stores in a ControllerRevision: a strategic merge patch that
    replaces the pod template (``kubectl rollout undo`` PATCHes it verbatim)."""
    return {"spec": {"template": {**copy.deepcopy(template), "$patch": "replace"}}}


def _template_of(revision: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(((revision.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop("$patch", None)
    return template


class StatefulSetController:
    def __init__(self, store: Store, events: EventRecorder) -> None:
        self.store = store
        self.events = events
        self._quiet: tuple[int, ...] = ()  # the input kinds' versions after a whole pass that wrote nothing
        self._collected: tuple[int, ...] = ()  # the sets' version at the last garbage collection
        # uid -> what a pass over the set read (see _inputs), at a pass that wrote nothing: the
        # same inputs give the same empty pass, so it is skipped. Any write to the set, to a pod
        # it controls or to any revision or claim moves the key.
        self._idle: dict[str, tuple[Any, ...]] = {}
        # uid -> (resourceVersion, the set's template hash then): every change moves the rv.
        self._hashes: dict[str, tuple[str, str]] = {}

    def _inputs(self, sts: dict[str, Any]) -> tuple[Any, ...]:
        """All that :meth:`reconcile_set` reads: the set, the pods it controls, the revisions
        (any: the current one is looked up by name) and the claims."""
        md = sts["metadata"]
        return (md["resourceVersion"], self.store.owned_version("Pod", md["uid"]),
                *self.store.kind_version("ControllerRevision", "PersistentVolumeClaim"))

    def reconcile(self) -> None:
        inputs = self.store.kind_version(*INPUT_KINDS)
        if inputs == self._quiet:
            return
        before = self.store.resource_version
        idle, self._idle = self._idle, {}
        for sts in list(self.store.list("StatefulSet")):
            uid, key = sts["metadata"]["uid"], self._inputs(sts)
            if idle.get(uid) == key:
                self._idle[uid] = key
                continue
            start = self.store.resource_version
            self.reconcile_set(sts)
            if self.store.resource_version == start:
                self._idle[uid] = key
        self._collect_garbage()
        self._quiet = inputs if self.store.resource_version == before else ()

    def react(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """An API write changed ``obj``: reconcile the set it is or whose pod it is, now (a real
        controller's watch would queue it at once). Returns the set's pods for the scheduler."""
        sts: Optional[dict[str, Any]] = None
        ns = (obj.get("metadata") or {}).get("namespace")
        if obj.get("kind") == "StatefulSet":
            sts = self.store.get("StatefulSet", ns, obj["metadata"]["name"])
            if sts is None:
                self._collect_garbage()
        elif obj.get("kind") == "Pod":
            ref = controller_of(obj)
            if ref and ref.get("kind") == "StatefulSet":
                sts = self.store.get("StatefulSet", ns, ref["name"])
        if sts is None:
            return []
        self.reconcile_set(sts)
        return self._pods(sts)

    # -- one set -----------------------------------------------------------------------------
    def _pods(self, sts: dict[str, Any]) -> list[dict[str, Any]]:
        ns = sts["metadata"]["namespace"]
        return [p for p in self.store.owned("Pod", sts["metadata"]["uid"]) if p["metadata"]["namespace"] == ns]

    def _revisions(self, sts: dict[str, Any]) -> list[dict[str, Any]]:
        ns = sts["metadata"]["namespace"]
        revs = [r for r in self.store.owned("ControllerRevision", sts["metadata"]["uid"])
                if r["metadata"]["namespace"] == ns]
        return sorted(revs, key=lambda r: int(r.get("revision", 0)))

    def _update_revision(self, sts: dict[str, Any], revisions: list[dict[str, Any]]) -> dict[str, Any]:
        """The revision of the set's current template: an existing one (a rollback to an earlier
        template makes it the newest again, as the real controller does) or a new one."""
        template = sts["spec"]["template"]
        md = sts["metadata"]
        cached = self._hashes.get(md["uid"])
        if cached is not None and cached[0] == md["resourceVersion"]:
            h = cached[1]
        else:
            h = template_hash(template)
            self._hashes[md["uid"]] = (md["resourceVersion"], h)
        name = f"{sts['metadata']['name']}-{h}"
        newest = int(revisions[-1].get("revision", 0)) if revisions else 0
        for rev in revisions:
            if rev["metadata"]["name"] == name:
                if int(rev.get("revision", 0)) < newest:
                    rev["revision"] = newest + 1
                    self.store.touch(rev)
                    revisions.sort(key=lambda r: int(r.get("revision", 0)))
                return rev
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels[REVISION_HASH] = h
        rev = self.store.create({
            "apiVersion": "apps/v1", "kind": "ControllerRevision",
            "metadata": {"name": name, "namespace": sts["metadata"]["namespace"], "labels": labels,
                         "ownerReferences": [owner_ref(sts)]},
            "data": _revision_data(template), "revision": newest + 1})
        revisions.append(rev)
        return rev

    def reconcile_set(self, sts: dict[str, Any]) -> None:
        spec = sts["spec"]
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        replicas = int(spec.get("replicas", 1))
        revisions = self._revisions(sts)
        update = self._update_revision(sts, revisions)
        update_name = update["metadata"]["name"]
        status = sts.get("status") or {}
        current_name = status.get("currentRevision") or update_name
        if self.store.get("ControllerRevision", ns, current_name) is None:
            current_name = update_name
        strategy = spec.get("updateStrategy") or {}
        rolling = strategy.get("type", "RollingUpdate") == "RollingUpdate"
        partition = int((strategy.get("rollingUpdate") or {}).get("partition", 0)) if rolling else 0
        ordered = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"

        by_ordinal: dict[int, dict[str, Any]] = {}
        for p in self._pods(sts):
            i = ordinal_of(p["metadata"]["name"], name)
            if i is not None:
                by_ordinal[i] = p
        # Failed pods are replaced, as the real controller does.
        for i, p in list(by_ordinal.items()):
            if p.get("status", {}).get("phase") == "Failed":
                self.store.delete("Pod", ns, p["metadata"]["name"])
                self.events.record(sts, "Warning", "RecreatingFailedPod",
                                   f"StatefulSet {ns}/{name} is recreating failed Pod {p['metadata']['name']}",
                                   COMPONENT)
                del by_ordinal[i]
        # Create the missing pods below the replica count, in order (one unready pod blocks the
        # next ordinal under OrderedReady).
        for i in range(replicas):
            pod = by_ordinal.get(i)
            if pod is None:
                rev_name = update_name if i >= partition else current_name
                rev = update if rev_name == update_name else self.store.get("ControllerRevision", ns, rev_name)
                by_ordinal[i] = self._create_pod(sts, i, rev or update)
                if ordered:
                    break
                continue
            if (pod.get("status") or {}).get("phase") == "Pending":
                # a pending pod's claims are made again if they went (deleted while it waited)
                for tmpl in spec.get("volumeClaimTemplates") or []:
                    self._ensure_claim(sts, tmpl, i)
            if ordered and not (pod_is_ready(pod) and pod_is_active(pod)):
                break
        else:
            self._scale_down_or_update(sts, by_ordinal, replicas, partition, update_name, ordered, rolling)
        self._update_status(sts, replicas, partition, current_name, update_name, revisions)
        self._prune_history(sts, revisions, {current_name, update_name},
                            {(p["metadata"].get("labels") or {}).get(REVISION_HASH, "") for p in self._pods(sts)})

    def _scale_down_or_update(self, sts: dict[str, Any], by_ordinal: dict[int, dict[str, Any]], replicas: int,
                              partition: int, update_name: str, ordered: bool, rolling: bool) -> None:
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        healthy = all(pod_is_ready(p) and pod_is_active(p) for i, p in by_ordinal.items() if i < replicas)
        extra = sorted((i for i in by_ordinal if i >= replicas), reverse=True)
        for i in extra:
            if ordered and not healthy:
                return
            pod = by_ordinal.pop(i)
            self.store.delete("Pod", ns, pod["metadata"]["name"])
            self.events.record(sts, "Normal", "SuccessfulDelete",
                               f"delete Pod {pod['metadata']['name']} in StatefulSet {name} successful", COMPONENT)
            if ordered:
                return  # one at a time, from the highest ordinal
        if not rolling or not healthy:
            return
        update_hash = update_name[len(name) + 1:]
        for i in sorted((i for i in by_ordinal if partition <= i < replicas), reverse=True):
            pod = by_ordinal[i]
            if (pod["metadata"].get("labels") or {}).get(REVISION_HASH) != update_hash:
                self.store.delete("Pod", ns, pod["metadata"]["name"])
                self.events.record(sts, "Normal", "SuccessfulDelete",
                                   f"delete Pod {pod['metadata']['name']} in StatefulSet {name} successful", COMPONENT)
                return  # the next pass recreates it from the update revision

    def _create_pod(self, sts: dict[str, Any], ordinal: int, revision: dict[str, Any]) -> dict[str, Any]:
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        pod_name = f"{name}-{ordinal}"
        for tmpl in sts["spec"].get("volumeClaimTemplates") or []:
            self._ensure_claim(sts, tmpl, ordinal)
        template = _template_of(revision)
        tmd = template.get("metadata") or {}
        labels = dict(tmd.get("labels") or {})
        labels.update({REVISION_HASH: revision["metadata"]["name"][len(name) + 1:], POD_NAME: pod_name,
                       POD_INDEX: str(ordinal)})
        spec = copy.deepcopy(template.get("spec") or {})
        default_pod_spec(spec)
        spec["hostname"] = pod_name
        if sts["spec"].get("serviceName"):
            spec["subdomain"] = sts["spec"]["serviceName"]
        volumes = [v for v in spec.get("volumes") or []]
        taken = {v.get("name") for v in volumes}
        for tmpl in sts["spec"].get("volumeClaimTemplates") or []:
            tname = (tmpl.get("metadata") or {}).get("name", "")
            if tname not in taken:
                volumes.append({"name": tname, "persistentVolumeClaim": {"claimName": claim_name(tname, name, ordinal)}})
        if volumes:
            spec["volumes"] = volumes
        spec.setdefault("tolerations", [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300}])
        pod = self.store.create({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": ns, "labels": labels,
                         "annotations": dict(tmd.get("annotations") or {}), "ownerReferences": [owner_ref(sts)]},
            "spec": spec, "status": {"phase": "Pending", "qosClass": qos_class(spec)}})
        self.events.record(sts, "Normal", "SuccessfulCreate",
                           f"create Pod {pod_name} in StatefulSet {name} successful", COMPONENT)
        return pod

    def _ensure_claim(self, sts: dict[str, Any], tmpl: dict[str, Any], ordinal: int) -> None:
        ns, name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        tmd = tmpl.get("metadata") or {}
        cname = claim_name(tmd.get("name", ""), name, ordinal)
        if self.store.get("PersistentVolumeClaim", ns, cname) is not None:
            return  # a claim outlives its pod: the recreated pod mounts the same volume
        labels = dict(tmd.get("labels") or {})
        labels.update((sts["spec"].get("selector") or {}).get("matchLabels") or {})
        spec = copy.deepcopy(tmpl.get("spec") or {})
        spec.setdefault("volumeMode", "Filesystem")
        claim: dict[str, Any] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                 "metadata": {"name": cname, "namespace": ns, "labels": labels},
                                 "spec": spec, "status": {"phase": "Pending"}}
        if tmd.get("annotations"):
            claim["metadata"]["annotations"] = dict(tmd["annotations"])
        retention = sts["spec"].get("persistentVolumeClaimRetentionPolicy") or {}
        if retention.get("whenDeleted") == "Delete":
            claim["metadata"]["ownerReferences"] = [owner_ref(sts)]
        protect(claim)
        self.store.create(claim)
        self.events.record(sts, "Normal", "SuccessfulCreate",
                           f"create Claim {cname} Pod {name}-{ordinal} in StatefulSet {name} success", COMPONENT)

    def _update_status(self, sts: dict[str, Any], replicas: int, partition: int, current_name: str,
                       update_name: str, revisions: list[dict[str, Any]]) -> None:
        name = sts["metadata"]["name"]
        pods = [p for p in self._pods(sts) if pod_is_active(p)]
        current_hash, update_hash = current_name[len(name) + 1:], update_name[len(name) + 1:]

        def labelled(p: dict[str, Any], h: str) -> bool:
            return (p["metadata"].get("labels") or {}).get(REVISION_HASH) == h

        ready = sum(1 for p in pods if pod_is_ready(p))
        updated = sum(1 for p in pods if labelled(p, update_hash))
        current = sum(1 for p in pods if labelled(p, current_hash))
        # The update is complete once every pod runs the update revision: it becomes current.
        if updated == replicas == len(pods) and ready == replicas and partition == 0:
            current_name, current = update_name, updated
        status: dict[str, Any] = {
            "observedGeneration": sts["metadata"].get("generation", 1), "replicas": len(pods),
            "readyReplicas": ready, "currentReplicas": current, "updatedReplicas": updated,
            "currentRevision": current_name, "updateRevision": update_name, "collisionCount": 0,
            "availableReplicas": ready}
        for k in ("readyReplicas", "currentReplicas", "updatedReplicas"):
            if status[k] == 0:
                status.pop(k)
        if sts.get("status") != status:
            sts["status"] = status
            self.store.touch(sts)

    def _prune_history(self, sts: dict[str, Any], revisions: list[dict[str, Any]], live: set[str],
                       pod_hashes: set[str]) -> None:
        limit = int(sts["spec"].get("revisionHistoryLimit", 10))
        name = sts["metadata"]["name"]
        spare = [r for r in revisions if r["metadata"]["name"] not in live
                 and r["metadata"]["name"][len(name) + 1:] not in pod_hashes]
        for rev in spare[: max(0, len(spare) - limit)]:
            self.store.delete("ControllerRevision", rev["metadata"]["namespace"], rev["metadata"]["name"])

    def _collect_garbage(self) -> None:
        """Pods, revisions (and claims of a Delete retention policy) whose set is gone: only a
        deleted set orphans them, so nothing to do while no set changed."""
        if self.store.kind_version("StatefulSet") == self._collected:
            return
        self._collected = self.store.kind_version("StatefulSet")
        for kind in ("Pod", "ControllerRevision", "PersistentVolumeClaim"):
            for obj in list(self.store.list(kind)):
                ref = controller_of(obj) or next((r for r in obj["metadata"].get("ownerReferences") or []
                                                  if r.get("kind") == "StatefulSet"), None)
                if not ref or ref.get("kind") != "StatefulSet":
                    continue
                owner = self.store.get("StatefulSet", obj["metadata"]["namespace"], ref["name"])
                if owner is None or owner["metadata"]["uid"] != ref.get("uid"):
                    self.store.delete(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
