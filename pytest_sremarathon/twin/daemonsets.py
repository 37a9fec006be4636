"""The DaemonSet controller (apps/v1): one pod per eligible node — the template's
``nodeSelector`` and required node affinity, taints it does not tolerate (a DaemonSet's pods
tolerate what the real controller adds: not-ready, unreachable, disk/memory/pid pressure and
unschedulable, so cordoned nodes keep their agent), pods removed from nodes that left or no
longer match; ``RollingUpdate`` with ``maxUnavailable`` (``OnDelete`` waits for deletes);
the template history as ControllerRevisions (``controller-revision-hash``, what ``kubectl
rollout history/undo ds`` read); the status ``kubectl rollout status ds`` waits on.

A DaemonSet's pods are bound by the controller itself (the node it made them for, with the
node-name affinity the real controller sets), and run no handler code: the traffic engine
never routes to them. A pass is skipped while no DaemonSet, Pod, Node or ControllerRevision
changed."""

from __future__ import annotations

import copy
import json
from datetime import datetime
from typing import Any

from ..k8s.objects import EventRecorder, controller_of, owner_ref, pod_is_active, pod_is_ready, template_hash
from ..k8s.store import Store
from .controllers import _resolve_int_or_percent
from .owned_pods import create_pod, delete_pod
from .scheduler import _affinity_ok, _tolerates

COMPONENT = "daemonset-controller"
HASH_LABEL = "controller-revision-hash"
GENERATION_LABEL = "pod-template-generation"
#: What the real controller adds to every DaemonSet pod (``AddOrUpdateDaemonPodTolerations``).
TOLERATIONS: tuple[dict[str, Any], ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
INPUT_KINDS = ("DaemonSet", "Pod", "Node", "ControllerRevision")


def is_daemon_pod(pod: dict[str, Any]) -> bool:
    """A pod a DaemonSet controls: drained by nobody (``kubectl drain --ignore-daemonsets``)."""
    return (controller_of(pod) or {}).get("kind") == "DaemonSet"


def _eligible(template: dict[str, Any], node: dict[str, Any]) -> bool:
    probe = {"spec": {**(template.get("spec") or {}),
                      "tolerations": [*((template.get("spec") or {}).get("tolerations") or []), *TOLERATIONS]}}
    if any(t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(probe, t)
           for t in node["spec"].get("taints") or []):
        return False
    return _affinity_ok(probe, node["metadata"].get("labels") or {})


def revision_data(template: dict[str, Any]) -> dict[str, Any]:
    """A ControllerRevision's ``data``: the strategic merge patch ``kubectl rollout undo`` sends."""
    return {"spec": {"template": {**copy.deepcopy(template), "$patch": "replace"}}}


class DaemonSetController:
    def __init__(self, store: Store, events: EventRecorder) -> None:
        self.store = store
        self.events = events
        self._quiet: tuple[int, ...] = ()
        self._hashes: dict[tuple[str, int], str] = {}  # (uid, generation) -> template hash
        # uid -> (its resourceVersion, the Node and ControllerRevision versions, its pods'
        # resourceVersions) at a pass that wrote nothing: the same inputs give the same nothing.
        self._idle: dict[str, tuple[Any, ...]] = {}

    def reconcile(self) -> None:
        inputs = self.store.kind_version(*INPUT_KINDS)
        if inputs == self._quiet:
            return
        before = self.store.resource_version
        daemonsets = self.store.list("DaemonSet")
        if daemonsets:
            nodes = self.store.list("Node")
            others = self.store.kind_version("Node", "ControllerRevision")
            for ds in daemonsets:
                uid = ds["metadata"]["uid"]
                key = (ds["metadata"]["resourceVersion"], others,
                       tuple(p["metadata"]["resourceVersion"] for p in self._pods(ds)))
                if self._idle.get(uid) == key:
                    continue
                mark = self.store.resource_version
                self.reconcile_daemonset(ds, nodes)
                if self.store.resource_version == mark:
                    self._idle[uid] = key
        self._quiet = inputs if self.store.resource_version == before else ()

    def _pods(self, ds: dict[str, Any]) -> list[dict[str, Any]]:
        """The pods of the set's namespace whose controlling owner it is, in list order: the
        store's owner index has them (by the same first ``controller`` reference), without a
        scan of the namespace."""
        ns = ds["metadata"]["namespace"]
        return [p for p in self.store.owned("Pod", ds["metadata"]["uid"]) if p["metadata"]["namespace"] == ns]

    def _template_hash(self, ds: dict[str, Any]) -> str:
        key = (ds["metadata"]["uid"], int(ds["metadata"].get("generation", 1)))
        h = self._hashes.get(key)
        if h is None:
            h = self._hashes[key] = template_hash(ds["spec"]["template"])
        return h

    def react(self, ds: dict[str, Any]) -> None:
        self.reconcile_daemonset(ds, self.store.list("Node"))

    # -- one DaemonSet -------------------------------------------------------------------------
    def reconcile_daemonset(self, ds: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
        now = self.store.clock()
        template = ds["spec"]["template"]
        current = self._revision(ds)
        h = current["metadata"]["labels"][HASH_LABEL]
        pods = self._pods(ds)
        by_node: dict[str, list[dict[str, Any]]] = {}
        for p in pods:
            if pod_is_active(p):
                by_node.setdefault(p["spec"].get("nodeName", ""), []).append(p)
            elif (p.get("status") or {}).get("phase") == "Failed":
                delete_pod(self.store, self.events, ds, p, COMPONENT)  # the real controller replaces failed daemons
        wanted = [n for n in nodes if _eligible(template, n)]
        names = {n["metadata"]["name"] for n in wanted}
        for node_name, on_node in list(by_node.items()):
            if node_name not in names:
                for p in on_node:
                    delete_pod(self.store, self.events, ds, p, COMPONENT)
                del by_node[node_name]
            elif len(on_node) > 1:  # more than one daemon on a node: keep the oldest
                on_node.sort(key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
                for p in on_node[1:]:
                    delete_pod(self.store, self.events, ds, p, COMPONENT)
                by_node[node_name] = on_node[:1]
        for node in wanted:
            name = node["metadata"]["name"]
            if name not in by_node:
                by_node[name] = [self._create(ds, template, h, name)]
        if (ds["spec"].get("updateStrategy") or {}).get("type", "RollingUpdate") == "RollingUpdate":
            self._roll(ds, by_node, h, len(wanted))
        self._status(ds, by_node, h, len(wanted), now)
        self._prune_history(ds, pods, h)

    def _create(self, ds: dict[str, Any], template: dict[str, Any], h: str, node: str) -> dict[str, Any]:
        t = copy.deepcopy(template)
        spec = t.setdefault("spec", {})
        # The node-name affinity the real controller writes (the default scheduler binds on it).
        spec.setdefault("affinity", {})["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
        labels = {HASH_LABEL: h, GENERATION_LABEL: str(ds["metadata"].get("generation", 1))}
        pod = create_pod(self.store, self.events, ds, t, COMPONENT, labels=labels, tolerations=TOLERATIONS, node=node)
        self.events.record(pod, "Normal", "Scheduled",
                           f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {node}",
                           "default-scheduler")
        return pod

    def _roll(self, ds: dict[str, Any], by_node: dict[str, list[dict[str, Any]]], h: str, desired: int) -> None:
        """Replace old pods node by node, at most ``maxUnavailable`` daemons down at a time
        (unready old ones first: they are down already)."""
        rolling = (ds["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {}
        budget = max(1, _resolve_int_or_percent(rolling.get("maxUnavailable", 1), desired, True))
        unavailable = sum(1 for on in by_node.values() for p in on if not pod_is_ready(p))
        old = [p for on in by_node.values() for p in on if p["metadata"]["labels"].get(HASH_LABEL) != h]
        old.sort(key=lambda p: (pod_is_ready(p), p["spec"].get("nodeName", "")))
        for p in old:
            if pod_is_ready(p):
                if unavailable >= budget:
                    break
                unavailable += 1
            delete_pod(self.store, self.events, ds, p, COMPONENT)
            node = p["spec"].get("nodeName", "")
            by_node[node] = [self._create(ds, ds["spec"]["template"], h, node)]

    def _status(self, ds: dict[str, Any], by_node: dict[str, list[dict[str, Any]]], h: str, desired: int,
                now: datetime) -> None:
        daemons = [p for on in by_node.values() for p in on]
        ready = sum(1 for p in daemons if pod_is_ready(p))
        updated = [p for p in daemons if p["metadata"]["labels"].get(HASH_LABEL) == h]
        status = {"currentNumberScheduled": len(by_node), "numberMisscheduled": 0, "desiredNumberScheduled": desired,
                  "numberReady": ready, "observedGeneration": ds["metadata"].get("generation", 1),
                  "updatedNumberScheduled": len(updated),
                  "numberAvailable": sum(1 for p in updated if pod_is_ready(p)) + sum(
                      1 for p in daemons if p not in updated and pod_is_ready(p))}
        if desired - status["numberAvailable"] > 0:
            status["numberUnavailable"] = desired - status["numberAvailable"]
        for key in ("updatedNumberScheduled", "numberAvailable"):
            if not status[key]:
                status.pop(key)
        if ds.get("status") != status:
            ds["status"] = status
            self.store.touch(ds)

    # -- history -------------------------------------------------------------------------------
    def _revisions(self, ds: dict[str, Any]) -> list[dict[str, Any]]:
        uid = ds["metadata"]["uid"]
        return [r for r in self.store.list("ControllerRevision", ds["metadata"]["namespace"])
                if (controller_of(r) or {}).get("uid") == uid]

    def _revision(self, ds: dict[str, Any]) -> dict[str, Any]:
        """The ControllerRevision of the current template, made (or moved to the newest revision
        number, on a rollback) if need be."""
        template = ds["spec"]["template"]
        h = self._template_hash(ds)
        revisions = self._revisions(ds)
        top = max((int(r.get("revision", 0)) for r in revisions), default=0)
        mine = next((r for r in revisions if r["metadata"]["labels"].get(HASH_LABEL) == h), None)
        if mine is None:
            labels = {**((template.get("metadata") or {}).get("labels") or {}), HASH_LABEL: h}
            mine = self.store.create({
                "apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": f"{ds['metadata']['name']}-{h}", "namespace": ds["metadata"]["namespace"],
                             "labels": labels, "annotations": dict(ds["metadata"].get("annotations") or {}),
                             "ownerReferences": [owner_ref(ds)]},
                "data": revision_data(template), "revision": top + 1})
            mine["metadata"].get("annotations", {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
        elif int(mine.get("revision", 0)) < top:
            mine["revision"] = top + 1
            self.store.touch(mine)
        return mine

    def _prune_history(self, ds: dict[str, Any], pods: list[dict[str, Any]], h: str) -> None:
        limit = int(ds["spec"].get("revisionHistoryLimit", 10))
        live = {p["metadata"]["labels"].get(HASH_LABEL) for p in pods if pod_is_active(p)} | {h}
        old = sorted((r for r in self._revisions(ds) if r["metadata"]["labels"].get(HASH_LABEL) not in live),
                     key=lambda r: int(r.get("revision", 0)))
        for r in old[: max(0, len(old) - limit)]:
            self.store.delete("ControllerRevision", r["metadata"]["namespace"], r["metadata"]["name"])


def template_of_revision(revision: dict[str, Any]) -> dict[str, Any]:
    """The pod template a ControllerRevision holds."""
    data = revision.get("data") or {}
    if isinstance(data, str):
        data = json.loads(data)
    template = dict(((data.get("spec") or {}).get("template")) or {})
    template.pop("$patch", None)
    return template
