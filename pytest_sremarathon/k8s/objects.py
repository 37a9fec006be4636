"""Small helpers over Kubernetes object dicts shared by the controllers."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any, Optional

from .store import Store, iso

_HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def _pruned(value: Any) -> Any:
    """Drop nulls and empty maps/lists: two spellings of one template hash alike."""
    if isinstance(value, dict):
        return _pruned_map(value)
    if isinstance(value, list):
        return _pruned_list(value)
    return value


# The helpers below run millions of times a marathon (every pod, controller and StatefulSet,
# every tick): they test keys with ``in`` and read them by subscript rather than calling
# dict.get, and skip the plain scalar leaves by their exact type before any isinstance.
_SCALARS = (str, int, float, bool)


# _pruned's two halves, recursing only into maps and lists (a leaf is its own pruned value).
def _pruned_map(value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in value.items():
        kind = type(v)
        if kind in _SCALARS:
            pass
        elif v is None:
            continue
        elif isinstance(v, dict):
            v = _pruned_map(v)
            if not v:
                continue
        elif isinstance(v, list):
            if not v:
                continue
            v = _pruned_list(v)
        out[k] = v
    return out


def _pruned_list(value: list[Any]) -> list[Any]:
    return [v if type(v) in _SCALARS else _pruned_map(v) if isinstance(v, dict) else
            _pruned_list(v) if isinstance(v, list) else v for v in value]


_HASH_BASE = len(_HASH_ALPHABET)


def template_hash(template: dict[str, Any]) -> str:
    """A pod-template-hash in the style of the real controller (10 safe characters)."""
    digest = hashlib.sha256(json.dumps(_pruned(template), sort_keys=True, separators=(",", ":")).encode()).digest()
    n = int.from_bytes(digest[:8], "big")
    out = ""
    for _ in range(10):
        out += _HASH_ALPHABET[n % _HASH_BASE]
        n //= _HASH_BASE
    return out


def owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def is_owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    uid = owner["metadata"]["uid"]
    return any(r.get("uid") == uid and r.get("controller") for r in obj["metadata"].get("ownerReferences") or [])


def controller_of(obj: dict[str, Any]) -> Optional[dict[str, Any]]:
    md = obj["metadata"]
    if "ownerReferences" in md:
        for ref in md["ownerReferences"] or ():
            if "controller" in ref and ref["controller"]:
                return ref
    return None


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against a label set."""
    if not selector:
        return False
    if "matchLabels" in selector:
        for k, v in (selector["matchLabels"] or {}).items():
            if (labels[k] if k in labels else None) != v:
                return False
    expressions = selector["matchExpressions"] if "matchExpressions" in selector else None
    if not expressions:
        return True  # (most selectors: matchLabels only)
    for expr in expressions:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def condition(obj: dict[str, Any], type_: str) -> Optional[dict[str, Any]]:
    if "status" in obj:
        status = obj["status"]
        if "conditions" in status:
            for c in status["conditions"] or ():
                if c["type"] == type_:
                    return c
    return None


def set_condition(obj: dict[str, Any], type_: str, status: str, now: datetime, reason: str = "",
                  message: str = "", *, with_update_time: bool = False) -> bool:
    """Set a status condition; returns True when anything changed."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    for c in conditions:
        if c["type"] == type_:
            if c["status"] == status and c.get("reason", "") == reason and c.get("message", "") == message:
                return False
            if c["status"] != status:
                c["lastTransitionTime"] = iso(now)
            c.update(status=status, reason=reason, message=message)
            if with_update_time:
                c["lastUpdateTime"] = iso(now)
            if not reason:
                c.pop("reason", None)
            if not message:
                c.pop("message", None)
            return True
    c = {"type": type_, "status": status, "lastTransitionTime": iso(now)}
    if with_update_time:
        c["lastUpdateTime"] = iso(now)
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    conditions.append(c)
    return True


def pod_is_ready(pod: dict[str, Any]) -> bool:
    c = condition(pod, "Ready")
    if c is None or c["status"] != "True":
        return False
    md = pod["metadata"]
    return "deletionTimestamp" not in md or md["deletionTimestamp"] is None


def pod_is_active(pod: dict[str, Any]) -> bool:
    if "status" in pod:
        status = pod["status"]
        if "phase" in status and status["phase"] in ("Succeeded", "Failed"):
            return False
    md = pod["metadata"]
    return "deletionTimestamp" not in md or md["deletionTimestamp"] is None


class EventRecorder:
    """Writes core/v1 Events the way the real components do, aggregating repeats."""

    def __init__(self, store: Store, ttl_seconds: float = 3600.0) -> None:
        self.store = store
        self.ttl_seconds = ttl_seconds
        self._index: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._counter = 0

    def record(self, obj: dict[str, Any], type_: str, reason: str, message: str, component: str,
               host: str | None = None) -> None:
        md = obj["metadata"]
        ns = md.get("namespace") or "default"
        key = (ns, md["uid"], reason, message)
        now = iso(self.store.clock())
        existing = self._index.get(key)
        if existing is not None and self.store.get("Event", ns, existing["metadata"]["name"]) is existing:
            existing["count"] += 1
            existing["lastTimestamp"] = now
            self.store.touch(existing)
            return
        self._counter += 1
        source: dict[str, str] = {"component": component}
        if host:
            source["host"] = host
        ev: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{md['name']}.{self._counter:016x}", "namespace": ns},
            "involvedObject": {"kind": obj["kind"], "namespace": md.get("namespace", ""), "name": md["name"],
                               "uid": md["uid"], "apiVersion": obj.get("apiVersion", "v1"),
                               "resourceVersion": md.get("resourceVersion", "")},
            "reason": reason, "message": message, "type": type_, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now, "source": source,
            "reportingComponent": component, "reportingInstance": host or "",
        }
        if not md.get("namespace"):
            ev["involvedObject"].pop("namespace")
        self._index[key] = self.store.create(ev)

    def expire(self) -> None:
        """Drop events older than the TTL (the real API server's --event-ttl, 1 h)."""
        # Whole-second ISO timestamps order as the times they name: compare the text.
        cutoff = self.store.clock() - timedelta(seconds=self.ttl_seconds)
        text = iso(cutoff)  # to the second
        late = bool(cutoff.microsecond)
        # Only the expired few are put in list order (namespace, name), the order they are
        # deleted in, rather than all the live events (new ones every tick undo the store's
        # sorted list).
        expired = sorted((ev for ev in self.store.unordered("Event")
                          if ev["lastTimestamp"] < text or (late and ev["lastTimestamp"] == text)),
                         key=lambda ev: (ev["metadata"]["namespace"] or "", ev["metadata"]["name"]))
        for ev in expired:
            md = ev["metadata"]
            self.store.delete("Event", md["namespace"], md["name"])
            # Its aggregation entry goes with it. (An entry whose event went another way, an
            # API delete, stays until its key is recorded again: record() checks that the event
            # is still the stored one before counting on it.)
            key = (md["namespace"], str((ev.get("involvedObject") or {}).get("uid")), str(ev.get("reason")),
                   str(ev.get("message")))
            if self._index.get(key) is ev:
                del self._index[key]


#: ``dnsConfig`` options that make glibc's resolver send its A and AAAA queries one after the
#: other (or over TCP), so the conntrack race of parallel UDP queries cannot drop one.
SERIAL_RESOLVER_OPTIONS = frozenset({"single-request-reopen", "single-request", "use-vc"})


def serial_resolver(pod_spec: dict[str, Any]) -> bool:
    """Does a pod's resolver avoid the parallel-query conntrack race (its ``dnsConfig``)?"""
    options = (pod_spec.get("dnsConfig") or {}).get("options") or []
    return any(isinstance(o, dict) and o.get("name") in SERIAL_RESOLVER_OPTIONS for o in options)


#: The kinds that run a service's pods: its Deployment, or for a datastore with its data on a
#: claim per pod, its StatefulSet (the apps' manifests name either after the service).
WORKLOAD_KINDS = ("Deployment", "StatefulSet")


def service_workload(store: Store, namespace: str, service: str) -> Optional[dict[str, Any]]:
    """The Deployment or StatefulSet named after a service (None when it has neither)."""
    for kind in WORKLOAD_KINDS:
        obj = store.get(kind, namespace, service)
        if obj is not None:
            return obj
    return None


def workload_kind(store: Store, namespace: str, service: str) -> str:
    """The kind of a service's workload: ``StatefulSet`` when it has one, else ``Deployment``."""
    return "StatefulSet" if store.get("StatefulSet", namespace, service) is not None else "Deployment"


def aof_rewrite_enabled(pod: dict[str, Any]) -> bool:
    """The redis server's automatic AOF rewrite as its command line sets it: off with
    ``--auto-aof-rewrite-percentage 0`` (redis.conf's way of disabling it)."""
    for c in pod["spec"].get("containers") or []:
        argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
        for i, a in enumerate(argv[:-1]):
            if a == "--auto-aof-rewrite-percentage" and argv[i + 1].strip() == "0":
                return False
    return True
