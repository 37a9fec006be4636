"""PodDisruptionBudgets (``policy/v1``): the disruption controller's status, and the check the
``pods/eviction`` subresource makes against it (``pkg/registry/core/pod/storage/eviction.go``).

Status, as the real ``disruption`` controller computes it:

* ``minAvailable`` as a number: ``expectedPods`` = the selected pods, ``desiredHealthy`` =
  that number;
* ``minAvailable`` as a percentage or ``maxUnavailable``: ``expectedPods`` = the scale of the
  selected pods' controllers (a Deployment through its ReplicaSet), ``desiredHealthy`` =
  expected − maxUnavailable (rounded up) or ⌈minAvailable% × expected⌉;
* ``currentHealthy`` = the selected active pods that are Ready; ``disruptionsAllowed`` =
  max(0, currentHealthy − desiredHealthy); condition ``DisruptionAllowed`` (``SufficientPods``
  or ``InsufficientPods``).

An eviction of a pod that is not Running, or that no budget selects, deletes it. Otherwise
the budget must allow a disruption (recomputed from the store at that moment: the twin deletes
at once, so a drain's successive evictions see the pods already gone), else ``429
TooManyRequests`` "Cannot evict pod as it would violate the pod's disruption budget." with a
``DisruptionBudget`` cause — what ``kubectl drain`` retries every 5 s until its timeout. Two
budgets selecting one pod answer 500, as the real server does.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from ..k8s.objects import controller_of, pod_is_active, pod_is_ready, selector_matches, set_condition
from ..k8s.store import ApiError, Store
from .label_index import LabelIndex

EVICTION_REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


def _int_or_percent(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        share = float(value[:-1]) / 100 * total
        return math.ceil(share) if round_up else math.floor(share)
    return int(value)


def selected_pods(store: Store, pdb: dict[str, Any]) -> list[dict[str, Any]]:
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return []
    if selector == {}:  # policy/v1: an empty selector selects every pod of the namespace
        return [p for p in store.list("Pod", pdb["metadata"]["namespace"]) if pod_is_active(p)]
    return [p for p in store.list("Pod", pdb["metadata"]["namespace"])
            if pod_is_active(p) and selector_matches(selector, p["metadata"].get("labels") or {})]


def _expected_scale(store: Store, pods: list[dict[str, Any]]) -> int:
    """The summed scale of the pods' controllers (each counted once)."""
    seen: dict[str, int] = {}
    for p in pods:
        ref = controller_of(p)
        if ref is None:
            seen[p["metadata"]["uid"]] = 1
            continue
        owner = store.get(ref.get("kind", ""), p["metadata"]["namespace"], ref.get("name", ""))
        if owner is None:
            continue
        top = controller_of(owner)
        if top is not None and top.get("kind") == "Deployment":
            dep = store.get("Deployment", p["metadata"]["namespace"], top.get("name", ""))
            if dep is not None:
                seen[dep["metadata"]["uid"]] = int((dep.get("spec") or {}).get("replicas") or 0)
                continue
        seen[owner["metadata"]["uid"]] = int((owner.get("spec") or {}).get("replicas") or 0)
    return sum(seen.values())


def _app_selected(pdb: dict[str, Any]) -> Optional[str]:
    """The ``app`` label value of a budget that selects on that label alone (the apps' kind)."""
    selector = (pdb.get("spec") or {}).get("selector")
    if not isinstance(selector, dict) or list(selector) != ["matchLabels"]:
        return None
    match = selector["matchLabels"]
    if not isinstance(match, dict) or list(match) != ["app"] or not isinstance(match["app"], str):
        return None
    return match["app"]


#: An object :func:`_inputs` looked up: (kind, name, its resourceVersion or None if missing).
_Lookup = tuple[str, str, Optional[str]]


def _rv(store: Store, kind: str, ns: str, name: str) -> Optional[str]:
    obj = store.get(kind, ns, name)
    return None if obj is None else obj["metadata"]["resourceVersion"]


def _inputs(store: Store, pdb: dict[str, Any], pods: list[dict[str, Any]],
            lookups: Optional[dict[tuple[str, str], Optional[str]]] = None) -> tuple[Any, ...]:
    """The resourceVersions of all that :func:`compute_status` reads for these selected pods:
    the budget, the pods (which, and their readiness) and the objects _expected_scale looks up
    (each pod's controller by name, and its Deployment), None for one that is missing. Those
    lookups go into ``lookups`` too ((kind, name) -> resourceVersion, each once)."""
    ns = pdb["metadata"]["namespace"]
    parts: list[Optional[str]] = [pdb["metadata"]["resourceVersion"]]
    for p in pods:
        parts.append(p["metadata"]["resourceVersion"])
        ref = controller_of(p)
        if ref is None:
            continue
        kind, name = ref.get("kind", ""), ref.get("name", "")
        owner = store.get(kind, ns, name)
        if owner is None:
            parts.append(None)
            if lookups is not None:
                lookups[(kind, name)] = None
            continue
        parts.append(owner["metadata"]["resourceVersion"])
        if lookups is not None:
            lookups[(kind, name)] = owner["metadata"]["resourceVersion"]
        top = controller_of(owner)
        if top is not None and top.get("kind") == "Deployment":
            dep = store.get("Deployment", ns, top.get("name", ""))
            parts.append(None if dep is None else dep["metadata"]["resourceVersion"])
            if lookups is not None:
                lookups[("Deployment", top.get("name", ""))] = parts[-1]
    return tuple(parts)


def compute_status(store: Store, pdb: dict[str, Any], pods: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """The budget's status now; ``pods`` are its :func:`selected_pods` when the caller has them."""
    spec = pdb.get("spec") or {}
    if pods is None:
        pods = selected_pods(store, pdb)
    healthy = sum(1 for p in pods if pod_is_ready(p))
    if "maxUnavailable" in spec:
        expected = _expected_scale(store, pods)
        desired = max(0, expected - _int_or_percent(spec["maxUnavailable"], expected, True))
    elif isinstance(spec.get("minAvailable"), str):
        expected = _expected_scale(store, pods)
        desired = _int_or_percent(spec["minAvailable"], expected, True)
    else:
        expected = len(pods)
        desired = int(spec.get("minAvailable", 1) if "minAvailable" in spec else 1)
    allowed = max(0, healthy - desired)
    status = dict(pdb.get("status") or {})
    status.update(observedGeneration=pdb["metadata"].get("generation", 1), currentHealthy=healthy,
                  desiredHealthy=desired, expectedPods=expected, disruptionsAllowed=allowed)
    status.setdefault("disruptedPods", None)
    if status["disruptedPods"] is None:
        status.pop("disruptedPods")
    return status


class DisruptionController:
    """Keeps every budget's status current; skips a pass when no Pod, budget or workload moved."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._seen: Optional[tuple[int, ...]] = None
        # uid -> what a budget's status was computed from, at a refresh that wrote nothing: the
        # same inputs give the same status (the condition's time is only taken when it
        # changes), so the refresh is skipped. Kept as (the budget's resourceVersion, its app
        # group's version in _app_pods, the owners _inputs looked up, _inputs): while the first
        # two stand, the pods and their owner references are those seen, so _inputs is equal
        # again exactly when each looked-up owner still has its resourceVersion.
        self._idle: dict[str, tuple[tuple[str, int], tuple[_Lookup, ...], tuple[Any, ...]]] = {}
        # The pods by (namespace, ``app`` label), kept from the store's changes: the apps'
        # budgets select on that label alone.
        self._app_pods = LabelIndex(store, "Pod", "app")
        self._apps: dict[str, tuple[str, Optional[str]]] = {}  # uid -> (resourceVersion, _app_selected then)

    def reconcile(self) -> None:
        version = self.store.kind_version("PodDisruptionBudget", "Pod", "Deployment", "ReplicaSet")
        if version == self._seen:
            return
        idle, self._idle = self._idle, {}
        for pdb in self.store.list("PodDisruptionBudget"):
            md = pdb["metadata"]
            uid, rv, ns = md["uid"], md["resourceVersion"], md["namespace"]
            app = self._app_selected(uid, rv, pdb)
            if app is None:
                refresh(self.store, pdb)
                continue
            stand = (rv, self._app_pods.version(ns, app))
            seen = idle.get(uid)
            if seen is not None and seen[0] == stand and \
                    all(_rv(self.store, kind, ns, name) == was for kind, name, was in seen[1]):
                self._idle[uid] = seen  # the same _inputs, without reading them again
                continue
            # The app's active pods: what selected_pods finds, in the same (list) order (the
            # pass writes budgets only).
            pods = [p for p in self._app_pods.members(ns, app) if pod_is_active(p)]
            lookups: dict[tuple[str, str], Optional[str]] = {}
            inputs = _inputs(self.store, pdb, pods, lookups)
            memo = (stand, tuple((kind, name, was) for (kind, name), was in lookups.items()), inputs)
            if seen is not None and seen[2] == inputs:
                self._idle[uid] = memo
                continue
            refresh(self.store, pdb, pods)
            if md["resourceVersion"] == rv:
                self._idle[uid] = memo
        self._seen = self.store.kind_version("PodDisruptionBudget", "Pod", "Deployment", "ReplicaSet")

    def _app_selected(self, uid: str, rv: str, pdb: dict[str, Any]) -> Optional[str]:
        """:func:`_app_selected`, kept per budget while its resourceVersion stands."""
        cached = self._apps.get(uid)
        if cached is None or cached[0] != rv:
            cached = self._apps[uid] = (rv, _app_selected(pdb))
        return cached[1]


def refresh(store: Store, pdb: dict[str, Any], pods: Optional[list[dict[str, Any]]] = None) -> dict[str, Any]:
    """Write the budget's status as of now (when it changed); returns it."""
    status = compute_status(store, pdb, pods)
    conditions = (pdb.get("status") or {}).get("conditions")
    new = dict(status, conditions=[dict(c) for c in conditions or []])
    shadow = {"status": new}
    if status["disruptionsAllowed"] > 0:
        set_condition(shadow, "DisruptionAllowed", "True", store.clock(), "SufficientPods")
    else:
        set_condition(shadow, "DisruptionAllowed", "False", store.clock(), "InsufficientPods")
    for c in shadow["status"]["conditions"]:  # metav1.Condition: message and observedGeneration always there
        c.setdefault("message", "")
        c["observedGeneration"] = status["observedGeneration"]
    if pdb.get("status") != shadow["status"]:
        pdb["status"] = shadow["status"]
        store.touch(pdb)
    return pdb["status"]


def check_eviction(store: Store, pod: dict[str, Any]) -> Optional[dict[str, Any]]:
    """Raise the server's refusal if evicting ``pod`` now would break a budget; return the
    budget the eviction counts against (None when none applies). Store lock held."""
    if (pod.get("status") or {}).get("phase") in ("Pending", "Succeeded", "Failed"):
        return None
    labels = pod["metadata"].get("labels") or {}
    budgets = [b for b in store.list("PodDisruptionBudget", pod["metadata"]["namespace"])
               if (b.get("spec") or {}).get("selector") is not None
               and ((b["spec"]["selector"] == {}) or selector_matches(b["spec"]["selector"], labels))]
    if not budgets:
        return None
    if len(budgets) > 1:
        raise ApiError(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the eviction "
                                             "subresource does not support.")
    pdb = budgets[0]
    status = refresh(store, pdb)
    # An unhealthy pod of a budget that is already at its desired health may go
    # (unhealthyPodEvictionPolicy IfHealthyBudget, the default).
    if not pod_is_ready(pod) and status["currentHealthy"] >= status["desiredHealthy"]:
        return pdb
    if status["disruptionsAllowed"] <= 0:
        raise ApiError(429, "TooManyRequests", EVICTION_REFUSED, causes=[{
            "reason": "DisruptionBudget",
            "message": f"The disruption budget {pdb['metadata']['name']} needs {status['desiredHealthy']} healthy "
                       f"pods and has {status['currentHealthy']} currently"}])
    return pdb
