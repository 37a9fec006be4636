"""ResourceQuota and LimitRange: the API server's admission plugins and the quota controller.

A pod created in a namespace with a LimitRange first gets the range's default requests and
limits (``LimitRanger``, mutating), then must fit its min/max/maxLimitRequestRatio; any object
created in a namespace with a ResourceQuota must fit every quota's ``hard`` (``ResourceQuota``,
validating). Both refuse with 403 Forbidden and the real plugins' messages (``pods "x" is
forbidden: exceeded quota: q, requested: …, used: …, limited: …``) — what ``kubectl`` prints and
what the ReplicaSet controller records in its ``FailedCreate`` event. Usage is counted live from
the store, so admission never races a stale ``status.used``; :class:`QuotaController` keeps
``status.hard``/``status.used`` for clients (``kubectl describe quota``).
"""

from __future__ import annotations

from typing import Any, Optional

from ..k8s.quantity import cpu_millicores, memory_bytes
from ..k8s.store import RESOURCE_TYPES, ApiError, Store

# count/<plural>[.<group>] and the legacy object-count names -> kind
_COUNTED: dict[str, str] = {}
for _rt in RESOURCE_TYPES:
    if _rt.namespaced:
        _COUNTED[f"count/{_rt.plural}.{_rt.group}" if _rt.group else f"count/{_rt.plural}"] = _rt.kind
for _legacy, _kind in (("pods", "Pod"), ("services", "Service"), ("configmaps", "ConfigMap"), ("secrets", "Secret"),
                       ("replicationcontrollers", "ReplicationController"), ("resourcequotas", "ResourceQuota")):
    _COUNTED[_legacy] = _kind
_COMPUTE = {"requests.cpu", "requests.memory", "limits.cpu", "limits.memory", "cpu", "memory"}


# -- quantities -----------------------------------------------------------------------------
def _is_cpu(resource: str) -> bool:
    return resource.endswith("cpu")


def _value(resource: str, q: Any) -> int:
    """A quantity as an integer in the resource's unit (millicores for CPU, bytes otherwise)."""
    if _is_cpu(resource):
        return cpu_millicores(q)
    if resource.endswith("memory") or resource.endswith("storage"):
        return memory_bytes(q)
    return int(float(str(q)))


def format_quantity(resource: str, n: int) -> str:
    """The canonical text the real server prints (``500m``, ``2``, ``640Mi``, ``1Gi``)."""
    if _is_cpu(resource):
        return str(n // 1000) if n % 1000 == 0 else f"{n}m"
    if resource.endswith("memory") or resource.endswith("storage"):
        if n == 0:
            return "0"
        for suffix, mult in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if n % mult == 0:
                return f"{n // mult}{suffix}"
        return str(n)
    return str(n)


# -- what a pod asks for ----------------------------------------------------------------------
def pod_usage(pod: dict[str, Any]) -> dict[str, int]:
    """A pod's charge against compute quota: the sum over its containers (an init container
    counts when it asks for more than the app containers together, as the real evaluator does)."""
    spec = pod.get("spec") or {}
    out: dict[str, int] = {}
    for field, res in (("requests", "cpu"), ("requests", "memory"), ("limits", "cpu"), ("limits", "memory")):
        total = sum(_value(res, (c.get("resources") or {}).get(field, {}).get(res, 0) or 0)
                    for c in spec.get("containers") or [])
        init = max((_value(res, (c.get("resources") or {}).get(field, {}).get(res, 0) or 0)
                    for c in spec.get("initContainers") or []), default=0)
        out[f"{field}.{res}"] = max(total, init)
    out["cpu"], out["memory"] = out["requests.cpu"], out["requests.memory"]
    return out


def _missing(pod: dict[str, Any], resource: str) -> list[str]:
    """Containers that set no ``resource`` (``limits.cpu``…): a quota on it requires one."""
    field, _, res = resource.partition(".") if "." in resource else ("requests", "", resource)
    return [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []
            if res not in ((c.get("resources") or {}).get(field) or {})]


def _counts(obj: dict[str, Any]) -> bool:
    """Does the object count against quota? Terminal pods no longer do."""
    return obj["kind"] != "Pod" or (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


# id(stored pod) -> (that pod, its resourceVersion, pod_usage then): a stored pod's spec only
# changes through the store, which moves its resourceVersion; the entry holds the pod, so its id
# is not reused while cached. Bounded: cleared when it outgrows any cluster's pods.
_USAGE: dict[int, tuple[dict[str, Any], str, dict[str, int]]] = {}


def _stored_pod_usage(pod: dict[str, Any]) -> dict[str, int]:
    """:func:`pod_usage` of a pod read from the store (read-only result)."""
    rv = pod["metadata"].get("resourceVersion", "")
    cached = _USAGE.get(id(pod))
    if cached is not None and cached[0] is pod and cached[1] == rv:
        return cached[2]
    if len(_USAGE) > 4096:
        _USAGE.clear()
    usage = pod_usage(pod)
    _USAGE[id(pod)] = (pod, rv, usage)
    return usage


def namespace_usage(store: Store, namespace: str, resources: set[str]) -> dict[str, int]:
    used = dict.fromkeys(resources, 0)
    compute = resources & _COMPUTE
    if compute:
        for pod in store.list("Pod", namespace):
            if _counts(pod):
                usage = _stored_pod_usage(pod)
                for r in compute:
                    used[r] += usage[r]
    for r in resources - compute:
        kind = _COUNTED.get(r)
        if kind is not None:
            used[r] = sum(1 for o in store.list(kind, namespace) if _counts(o))
    return used


# -- admission ----------------------------------------------------------------------------
def _forbidden(obj: dict[str, Any], message: str) -> ApiError:
    rt = next(r for r in RESOURCE_TYPES if r.kind == obj["kind"])
    md = obj["metadata"]
    name = md.get("name") or md.get("generateName") or ""
    res = f"{rt.plural}.{rt.group}" if rt.group else rt.plural
    return ApiError(403, "Forbidden", f'{res} "{name}" is forbidden: {message}', kind=rt.plural, name=name,
                    group=rt.group)


def _aggregate(errors: list[str]) -> str:
    """``utilerrors.NewAggregate``: one error as itself, several in brackets."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def default_limit_range(lr: dict[str, Any]) -> None:
    """``SetDefaults_LimitRangeItem``: a Container item's max is its default limit, and its
    default (or else min) its default request, where those are not given."""
    for item in (lr.get("spec") or {}).get("limits") or []:
        if item.get("type") != "Container":
            continue
        default = item.setdefault("default", {})
        for k, v in (item.get("max") or {}).items():
            default.setdefault(k, v)
        request = item.setdefault("defaultRequest", {})
        for k, v in default.items():
            request.setdefault(k, v)
        for k, v in (item.get("min") or {}).items():
            request.setdefault(k, v)
        if not default:
            item.pop("default")
        if not request:
            item.pop("defaultRequest")


def _container_items(store: Store, namespace: str) -> list[dict[str, Any]]:
    return [item for lr in store.list("LimitRange", namespace)
            for item in (lr.get("spec") or {}).get("limits") or [] if item.get("type") == "Container"]


def apply_limit_ranges(store: Store, pod: dict[str, Any]) -> None:
    """Mutating: fill each container's missing requests and limits from the ranges' defaults,
    and refuse one that breaks a range's min, max or ratio."""
    items = _container_items(store, pod["metadata"].get("namespace", ""))
    if not items:
        return
    errors: list[str] = []
    for c in (pod.get("spec") or {}).get("containers") or []:
        resources = c.setdefault("resources", {})
        for item in items:
            for field, source in (("limits", "default"), ("requests", "defaultRequest")):
                for k, v in (item.get(source) or {}).items():
                    if k not in (resources.get(field) or {}):
                        resources.setdefault(field, {})[k] = v
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for item in items:
            for k, v in (item.get("min") or {}).items():
                if k not in requests:
                    errors.append(f"minimum {k} usage per Container is {v}.  No request is specified")
                elif _value(k, requests[k]) < _value(k, v):
                    errors.append(f"minimum {k} usage per Container is {v}, but request is {requests[k]}")
            for k, v in (item.get("max") or {}).items():
                if k not in limits:
                    errors.append(f"maximum {k} usage per Container is {v}.  No limit is specified")
                elif _value(k, limits[k]) > _value(k, v):
                    errors.append(f"maximum {k} usage per Container is {v}, but limit is {limits[k]}")
            for k, v in (item.get("maxLimitRequestRatio") or {}).items():
                if k in limits and k in requests and _value(k, requests[k]):
                    ratio = _value(k, limits[k]) / _value(k, requests[k])
                    if ratio > float(str(v)):
                        errors.append(f"{k} max limit to request ratio per Container is {v}, but provided ratio "
                                      f"is {ratio:f}")
    if errors:
        raise _forbidden(pod, _aggregate(errors))


def check_quota(store: Store, obj: dict[str, Any]) -> None:
    """Validating: would creating ``obj`` take any quota of its namespace past ``hard``?"""
    ns = obj["metadata"].get("namespace") or ""
    quotas = store.list("ResourceQuota", ns) if ns else []
    if not quotas or not _counts(obj):
        return
    usage = pod_usage(obj) if obj["kind"] == "Pod" else {}
    for q in quotas:
        hard: dict[str, Any] = (q.get("spec") or {}).get("hard") or {}
        asked = {r: (usage.get(r, 0) if r in _COMPUTE else int(_COUNTED.get(r) == obj["kind"])) for r in hard}
        asked = {r: n for r, n in asked.items() if n or (r in _COMPUTE and obj["kind"] == "Pod")}
        if not asked:
            continue
        if obj["kind"] == "Pod":
            missing = [f"{r} for: {','.join(names)}" for r in sorted(set(asked) & _COMPUTE)
                       if (names := _missing(obj, r))]
            if missing:
                raise _forbidden(obj, f"failed quota: {q['metadata']['name']}: must specify {'; '.join(missing)}")
        used = namespace_usage(store, ns, set(asked))
        over = sorted(r for r, n in asked.items() if used[r] + n > _value(r, hard[r]))
        if over:
            requested = ",".join(f"{r}={format_quantity(r, asked[r])}" for r in over)
            now_used = ",".join(f"{r}={format_quantity(r, used[r])}" for r in over)
            limited = ",".join(f"{r}={format_quantity(r, _value(r, hard[r]))}" for r in over)
            raise _forbidden(obj, f"exceeded quota: {q['metadata']['name']}, requested: {requested}, "
                                  f"used: {now_used}, limited: {limited}")


def admit(store: Store, obj: dict[str, Any]) -> None:
    """Both plugins, in the real server's order (mutating LimitRanger before ResourceQuota);
    raises the 403 the server would answer. Call with the store lock held."""
    if obj.get("kind") == "LimitRange":
        default_limit_range(obj)
    if obj.get("kind") == "Pod":
        apply_limit_ranges(store, obj)
    check_quota(store, obj)


# -- the quota controller -------------------------------------------------------------------------
class QuotaController:
    """Keeps each ResourceQuota's ``status.hard`` (its spec) and ``status.used`` (counted)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._synced: Optional[tuple[int, ...]] = None
        self._kinds = ("ResourceQuota", "Pod", *sorted(set(_COUNTED.values()) - {"Pod", "ResourceQuota"}))
        # uid -> what a quota's status was last made from, after that step's write: (its
        # resourceVersion, the namespace's versions of the kinds its ``hard`` counts). The same
        # inputs give the same status, which the quota then holds already: the step is skipped.
        self._made: dict[str, tuple[str, tuple[int, ...]]] = {}

    @staticmethod
    def _counted_kinds(hard: dict[str, Any]) -> tuple[str, ...]:
        """The kinds namespace_usage reads for these resources (Pod for the compute ones)."""
        return tuple(sorted({"Pod" if r in _COMPUTE else _COUNTED[r] for r in hard if r in _COMPUTE or r in _COUNTED}))

    def reconcile(self) -> None:
        # Skipped unless a quota or something it counts changed (a store version moved).
        inputs = self.store.kind_version(*self._kinds)
        if inputs == self._synced:
            return
        for q in self.store.list("ResourceQuota"):
            hard = (q.get("spec") or {}).get("hard") or {}
            md = q["metadata"]
            ns, kinds = md["namespace"], self._counted_kinds(hard)
            if self._made.get(md["uid"]) == (md["resourceVersion"], self.store.namespace_version(ns, *kinds)):
                continue
            used = namespace_usage(self.store, ns, set(hard))
            status = {"hard": {r: format_quantity(r, _value(r, v)) for r, v in hard.items()},
                      "used": {r: format_quantity(r, used[r]) for r in hard}}
            if q.get("status") != status:
                q["status"] = status
                self.store.touch(q)
            self._made[md["uid"]] = (md["resourceVersion"], self.store.namespace_version(ns, *kinds))
        self._synced = self.store.kind_version(*self._kinds)
