"""PriorityClasses (``scheduling.k8s.io/v1``): the built-in classes, the ``Priority``
admission plugin and the scheduler's preemption (``DefaultPreemption``).

* :func:`builtin_classes`: ``system-cluster-critical`` (2000000000) and
  ``system-node-critical`` (2000001000), which every cluster has;
* :func:`admit`: a new pod's ``spec.priority`` (and ``preemptionPolicy``) from its
  ``priorityClassName``, or from the global default class (else 0); an unknown class is refused
  (403 "no PriorityClass with name … was found"), for the API's creates and for the pods a
  ReplicaSet controller makes alike;
* :func:`preempt`: when a pod fits no node for want of cpu or memory, the node where removing
  the fewest lower-priority pods (lowest priority first, newest first among equals) makes it
  fit; those pods get the ``DisruptionTarget`` condition (``PreemptionByScheduler``) and a
  ``Preempted`` event and are deleted, and the preemptor's ``status.nominatedNodeName`` names
  the node; it binds at the scheduler's next pass, once the victims are gone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from ..k8s.objects import EventRecorder, pod_is_active, set_condition
from ..k8s.quantity import cpu_millicores, memory_bytes
from ..k8s.store import ApiError, Store

SYSTEM_CLASSES = (("system-cluster-critical", 2000000000,
                   "Used for system critical pods that must run in the cluster, but can be moved to another node "
                   "if necessary."),
                  ("system-node-critical", 2000001000,
                   "Used for system critical pods that must not be moved from their current node."))
#: The highest value a user-defined class may have (higher ones are the system's).
HIGHEST_USER_PRIORITY = 1000000000


def builtin_classes() -> list[dict[str, Any]]:
    return [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
             "value": value, "globalDefault": False, "description": description,
             "preemptionPolicy": "PreemptLowerPriority"} for name, value, description in SYSTEM_CLASSES]


def default_class(obj: dict[str, Any]) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    obj.setdefault("globalDefault", False)


def validate_class(obj: dict[str, Any]) -> None:
    name = obj["metadata"].get("name", "")
    value = obj.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        raise _invalid(name, "value", "Required value", "FieldValueRequired")
    if value > HIGHEST_USER_PRIORITY and name not in {n for n, _v, _d in SYSTEM_CLASSES}:
        raise _invalid(name, "value", f"Forbidden: maximum allowed value of a user defined priority is "
                                      f"{HIGHEST_USER_PRIORITY}", "FieldValueForbidden")


def _invalid(name: str, field: str, message: str, reason: str) -> ApiError:
    return ApiError(422, "Invalid", f'PriorityClass.scheduling.k8s.io "{name}" is invalid: {field}: {message}',
                    kind="PriorityClass", name=name, group="scheduling.k8s.io",
                    causes=[{"reason": reason, "message": message, "field": field}])


def admit(store: Store, pod: dict[str, Any]) -> None:
    """The ``Priority`` admission plugin on a pod being created."""
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName")
    if name:
        pc = store.get("PriorityClass", None, name)
        if pc is None:
            pod_name = pod["metadata"].get("name") or pod["metadata"].get("generateName", "")
            raise ApiError(403, "Forbidden", f'pods "{pod_name}" is forbidden: no PriorityClass with name {name} '
                                             f'was found', kind="pods", name=pod_name)
    else:
        pc = next((c for c in store.list("PriorityClass") if c.get("globalDefault")), None)
        if pc is not None:
            spec["priorityClassName"] = pc["metadata"]["name"]
    spec["priority"] = int(pc.get("value", 0)) if pc is not None else 0
    spec["preemptionPolicy"] = (pc or {}).get("preemptionPolicy", "PreemptLowerPriority")


def priority_of(pod: dict[str, Any]) -> int:
    return int((pod.get("spec") or {}).get("priority") or 0)


Requests = Callable[[dict[str, Any]], tuple[int, int]]


def preempt(store: Store, events: EventRecorder, pod: dict[str, Any], nodes: list[dict[str, Any]],
            usage: dict[str, list[int]], fits_but_for_resources: Callable[[dict[str, Any]], bool],
            requests: Requests) -> Optional[str]:
    """Make room for ``pod`` by evicting lower-priority pods from one node; the node's name, or
    None when preemption cannot help (no such node, or the pod may not preempt)."""
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return None
    mine = priority_of(pod)
    cpu, mem = requests(pod)
    best: Optional[tuple[tuple[int, int, str], str, list[dict[str, Any]]]] = None
    for node in nodes:
        name = node["metadata"]["name"]
        if not fits_but_for_resources(node):
            continue
        alloc = node["status"].get("allocatable") or {}
        free_cpu = cpu_millicores(alloc.get("cpu")) - usage.get(name, [0, 0])[0]
        free_mem = memory_bytes(alloc.get("memory")) - usage.get(name, [0, 0])[1]
        lower = [p for p in store.list("Pod") if p["spec"].get("nodeName") == name and pod_is_active(p)
                 and priority_of(p) < mine]
        lower.sort(key=lambda p: (priority_of(p), _neg_time(p["metadata"]["creationTimestamp"])))
        victims: list[dict[str, Any]] = []
        for p in lower:
            if free_cpu >= cpu and free_mem >= mem:
                break
            c, m = requests(p)
            free_cpu += c
            free_mem += m
            victims.append(p)
        if free_cpu < cpu or free_mem < mem or not victims:
            continue
        key = (max(priority_of(v) for v in victims), len(victims), name)
        if best is None or key < best[0]:
            best = (key, name, victims)
    if best is None:
        return None
    _, node_name, victims = best
    now = store.clock()
    for v in victims:
        set_condition(v, "DisruptionTarget", "True", now, "PreemptionByScheduler",
                      "default-scheduler: preempting to accommodate a higher priority pod")
        store.touch(v)
        events.record(v, "Normal", "Preempted", f"Preempted by pod {pod['metadata']['uid']} on node {node_name}",
                      "default-scheduler")
        c, m = requests(v)
        u = usage.setdefault(node_name, [0, 0])
        u[0] -= c
        u[1] -= m
        store.delete("Pod", v["metadata"]["namespace"], v["metadata"]["name"])
    pod.setdefault("status", {})["nominatedNodeName"] = node_name
    store.touch(pod)
    return node_name


def _neg_time(stamp: str) -> tuple[int, ...]:
    """Newest first among equals: a sort key that reverses an ISO timestamp's order."""
    return tuple(-ord(ch) for ch in stamp)
