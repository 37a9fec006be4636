"""Pods made from an owner's template, as the DaemonSet and Job controllers make them (the
ReplicaSet controller's pods are its own: twin/controllers.py), and the cascading delete a
controller does itself (the API server's cascade covers only API deletes)."""

from __future__ import annotations

import copy
from typing import Any, Optional

from ..k8s.objects import EventRecorder, owner_ref, set_condition
from ..k8s.store import Store
from .defaults import apply_defaults, qos_class


def create_pod(store: Store, events: EventRecorder, owner: dict[str, Any], template: dict[str, Any],
               component: str, *, labels: Optional[dict[str, str]] = None,
               tolerations: tuple[dict[str, Any], ...] = (), node: str = "",
               annotations: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """A pod from ``template`` controlled by ``owner`` (``SuccessfulCreate`` on the owner)."""
    meta = template.get("metadata") or {}
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": owner["metadata"]["name"] + "-", "namespace": owner["metadata"]["namespace"],
                     "labels": {**(meta.get("labels") or {}), **(labels or {})},
                     "annotations": {**(meta.get("annotations") or {}), **(annotations or {})},
                     "ownerReferences": [owner_ref(owner)]},
        "spec": copy.deepcopy(template.get("spec") or {})}
    if not pod["metadata"]["annotations"]:
        del pod["metadata"]["annotations"]
    apply_defaults(pod)
    spec = pod["spec"]
    for tol in tolerations:
        if not any(t.get("key") == tol["key"] and t.get("effect") == tol.get("effect") for t in spec["tolerations"]):
            spec["tolerations"].append(dict(tol))
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    if node:
        spec["nodeName"] = node
        set_condition(pod, "PodScheduled", "True", store.clock())
    pod = store.create(pod)
    events.record(owner, "Normal", "SuccessfulCreate", f"Created pod: {pod['metadata']['name']}", component)
    return pod


def delete_pod(store: Store, events: EventRecorder, owner: dict[str, Any], pod: dict[str, Any], component: str) -> None:
    md = pod["metadata"]
    if store.get("Pod", md["namespace"], md["name"]) is pod:
        store.delete("Pod", md["namespace"], md["name"])
        events.record(owner, "Normal", "SuccessfulDelete", f"Deleted pod: {md['name']}", component)


def owned(store: Store, kind: str, owner: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects of ``kind`` in the owner's namespace that it controls."""
    uid = owner["metadata"]["uid"]
    return [o for o in store.list(kind, owner["metadata"]["namespace"])
            if any(r.get("uid") == uid and r.get("controller") for r in o["metadata"].get("ownerReferences") or [])]
