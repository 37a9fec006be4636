"""The twin's single source of truth: Kubernetes-shaped objects with resourceVersions and a
watch history.

Objects are plain dicts in the exact JSON shape the real API server uses. Internal callers
(controllers, kubelet) may read the live dicts; every change goes through :meth:`Store.create`,
:meth:`Store.replace`, :meth:`Store.touch` or :meth:`Store.delete`, which bump the global
resourceVersion and append to the watch history — the same contract etcd gives the real server.

A store may keep the history of only the kinds some client has asked about (``history_kinds``,
what the twin's API server does): freezing every change of every kind cost a default marathon
a few per cent of its time for watches nobody made. A kind's history then starts at the
resourceVersion where its first request found the store, which is all a client can resume from:
its list (or get, or write) returned that resourceVersion or a newer one. An older one gets
410 Expired, which clients answer by listing again, as they do after a real server's watch
cache has moved on.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import hashlib
import itertools
import json
import marshal
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
    categories: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_ALL = ("all",)
_RBAC = "rbac.authorization.k8s.io"
_AUTHZ = "authorization.k8s.io"
_AUTHN = "authentication.k8s.io"
RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "namespace", "Namespace", False, ("ns",)),
    ResourceType("", "v1", "nodes", "node", "Node", False, ("no",)),
    ResourceType("", "v1", "pods", "pod", "Pod", True, ("po",), categories=_ALL),
    ResourceType("", "v1", "services", "service", "Service", True, ("svc",), categories=_ALL),
    ResourceType("", "v1", "endpoints", "endpoints", "Endpoints", True, ("ep",)),
    ResourceType("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
    ResourceType("", "v1", "secrets", "secret", "Secret", True),
    ResourceType("", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", True, ("sa",)),
    ResourceType("", "v1", "events", "event", "Event", True, ("ev",)),
    ResourceType("apps", "v1", "deployments", "deployment", "Deployment", True, ("deploy",), categories=_ALL),
    ResourceType("apps", "v1", "replicasets", "replicaset", "ReplicaSet", True, ("rs",), categories=_ALL),
    ResourceType("", "v1", "replicationcontrollers", "replicationcontroller", "ReplicationController", True, ("rc",),
                 categories=_ALL),
    ResourceType(_RBAC, "v1", "roles", "role", "Role", True),
    ResourceType(_RBAC, "v1", "rolebindings", "rolebinding", "RoleBinding", True),
    ResourceType(_RBAC, "v1", "clusterroles", "clusterrole", "ClusterRole", False),
    ResourceType(_RBAC, "v1", "clusterrolebindings", "clusterrolebinding", "ClusterRoleBinding", False),
    ResourceType("apiregistration.k8s.io", "v1", "apiservices", "apiservice", "APIService", False,
                 categories=("api-extensions",)),
    # Reviews are asked, never stored: a POST answers (twin/api_access.py), nothing else is served.
    ResourceType(_AUTHZ, "v1", "selfsubjectaccessreviews", "selfsubjectaccessreview", "SelfSubjectAccessReview",
                 False, verbs=("create",)),
    ResourceType(_AUTHZ, "v1", "selfsubjectrulesreviews", "selfsubjectrulesreview", "SelfSubjectRulesReview",
                 False, verbs=("create",)),
    ResourceType(_AUTHN, "v1", "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", False,
                 verbs=("create",)),  # ``kubectl auth whoami``
    # Scaling and disruption (twin/autoscaler.py, twin/disruption.py, twin/priority.py).
    ResourceType("autoscaling", "v2", "horizontalpodautoscalers", "horizontalpodautoscaler",
                 "HorizontalPodAutoscaler", True, ("hpa",), categories=_ALL),
    ResourceType("policy", "v1", "poddisruptionbudgets", "poddisruptionbudget", "PodDisruptionBudget", True,
                 ("pdb",)),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "priorityclass", "PriorityClass", False, ("pc",)),
    # Stateful workloads and their storage (twin/statefulsets.py, twin/volumes.py).
    ResourceType("apps", "v1", "statefulsets", "statefulset", "StatefulSet", True, ("sts",), categories=_ALL),
    ResourceType("apps", "v1", "controllerrevisions", "controllerrevision", "ControllerRevision", True),
    ResourceType("", "v1", "persistentvolumeclaims", "persistentvolumeclaim", "PersistentVolumeClaim", True, ("pvc",)),
    ResourceType("", "v1", "persistentvolumes", "persistentvolume", "PersistentVolume", False, ("pv",)),
    ResourceType("storage.k8s.io", "v1", "storageclasses", "storageclass", "StorageClass", False, ("sc",)),
    # Network and admission kinds (issue 18): twin/network_policy.py, twin/endpointslices.py,
    # twin/admission_quota.py give them their behaviour; Ingress/IngressClass are stored only.
    ResourceType("networking.k8s.io", "v1", "networkpolicies", "networkpolicy", "NetworkPolicy", True, ("netpol",)),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "endpointslice", "EndpointSlice", True),
    ResourceType("", "v1", "resourcequotas", "resourcequota", "ResourceQuota", True, ("quota",)),
    ResourceType("", "v1", "limitranges", "limitrange", "LimitRange", True, ("limits",)),
    ResourceType("networking.k8s.io", "v1", "ingresses", "ingress", "Ingress", True, ("ing",)),
    ResourceType("networking.k8s.io", "v1", "ingressclasses", "ingressclass", "IngressClass", False),
    # Node agents and batch work (twin/daemonsets.py, twin/jobs.py, twin/cronjobs.py); a
    # ControllerRevision is a DaemonSet's (or a StatefulSet's) template history.
    ResourceType("apps", "v1", "daemonsets", "daemonset", "DaemonSet", True, ("ds",), categories=_ALL),
    ResourceType("batch", "v1", "jobs", "job", "Job", True, categories=_ALL),
    ResourceType("batch", "v1", "cronjobs", "cronjob", "CronJob", True, ("cj",), categories=_ALL),
)
#: The review kinds: answered on create, never stored.
REVIEW_KINDS = frozenset({"SelfSubjectAccessReview", "SelfSubjectRulesReview", "SelfSubjectReview"})
BY_KIND: dict[str, ResourceType] = {r.kind: r for r in RESOURCE_TYPES}


class ApiError(Exception):
    """A Kubernetes ``Status`` failure; the API server renders it verbatim."""

    def __init__(self, code: int, reason: str, message: str, *, kind: str = "", name: str = "",
                 causes: Optional[list[dict[str, str]]] = None, group: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.kind = kind
        self.name = name
        self.group = group
        self.causes = causes or []

    def status(self) -> dict[str, Any]:
        """The ``Status`` in the real server's field order (Go's struct order: ``details`` before
        ``code``; ``name``, ``group``, ``kind`` in details): clients that print it verbatim (the
        Python client's ``FailToCreateError``) are compared against that text."""
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.group:
            details["group"] = self.group
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason}
        if details:
            body["details"] = details
        body["code"] = self.code
        return body


def not_found(kind: str, name: str) -> ApiError:
    rt = BY_KIND.get(kind)
    res = f"{rt.plural}.{rt.group}" if rt and rt.group else (rt.plural if rt else kind.lower())
    return ApiError(404, "NotFound", f'{res} "{name}" not found', kind=rt.plural if rt else kind, name=name,
                    group=rt.group if rt else "")


class WatchEvent:
    """One change in the watch history: the object frozen at the time of the change."""

    __slots__ = ("rv", "type", "kind", "namespace", "name", "_frozen", "_body")

    def __init__(self, rv: int, type_: str, kind: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        self.rv, self.type, self.kind, self.namespace, self.name = rv, type_, kind, namespace, name
        # Every change is frozen (~30k a default marathon) but few are ever watched: marshal's
        # copy costs a quarter of JSON's, and the JSON is made from it on first read (the same
        # text: marshal keeps key order, types and floats exactly).
        try:
            self._frozen: Optional[bytes] = marshal.dumps(obj)
            self._body: Optional[str] = None
        except ValueError:  # a value marshal does not know (a dict subclass): JSON at once
            self._frozen, self._body = None, _SNAPSHOT.encode(obj)

    @property
    def body(self) -> str:
        """The object as compact JSON."""
        body = self._body
        if body is None:  # (watch threads may race here: each makes the same text)
            assert self._frozen is not None
            body = self._body = _SNAPSHOT.encode(marshal.loads(self._frozen))
        return body


# The watch history's JSON: json.dumps's compact output, from one encoder without the cycle
# check (API objects are trees; it costs a fifth).
_SNAPSHOT = json.JSONEncoder(separators=(",", ":"), check_circular=False)


_ZEROS = itertools.repeat(0)  # the default of every dict.get in kind_version


def _key(kind: str, namespace: str | None, name: str) -> tuple[str, str, str]:
    return (kind, namespace or "", name)


@dataclass
class Store:
    clock: Callable[[], datetime]
    history_size: int = 20000
    lock: threading.RLock = field(default_factory=threading.RLock)
    _objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    _by_kind: dict[str, dict[tuple[str, str, str], dict[str, Any]]] = field(default_factory=dict)
    _history: deque = field(init=False)
    _rv: int = 1
    _sorted: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # kind -> objects in list order
    _sorted_ns: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # kind -> ns -> the same
    _kind_rv: dict[str, int] = field(default_factory=dict)  # kind -> resourceVersion of its last change
    _ns_rv: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, namespace) -> the same
    # The objects of a kind by the uid of their controlling owner (the first ownerReference with
    # ``controller``), kept by _record from every change of a live object: the key an object is
    # filed under is remembered, so an owner change (a replace, an in-place edit then touch)
    # moves it. _owned_rv is the resourceVersion of the last change to a group (a member
    # written, added or gone); _owned_sorted the group in list order, dropped on any change.
    _owned: dict[tuple[str, str], dict[tuple[str, str, str], dict[str, Any]]] = field(default_factory=dict)
    _owner_of: dict[tuple[str, str, str], str] = field(default_factory=dict)
    _owned_rv: dict[tuple[str, str], int] = field(default_factory=dict)
    _owned_sorted: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    _changed: threading.Condition = field(init=False)
    _uids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    # Called as ``listener(type, obj)`` for every recorded change, under the lock: observers
    # that must not miss a change between two looks (provenance) note what moved here.
    listeners: list[Callable[[str, dict[str, Any]], None]] = field(default_factory=list)
    #: Who is writing now, for the listeners: ``"controller"`` while a control loop that changes
    #: specs (the autoscaler's replica counts, maintenance's cordons) writes, else None (the API,
    #: the pipeline, the orchestrator). Provenance must not credit such a write to the last client
    #: that touched the object (see :meth:`acting`).
    acting_as: Optional[str] = None
    uid_namespace: uuid.UUID = uuid.UUID("6f1c0b7e-5d0e-4c4e-9d7a-2f6a1d3b9e10")
    #: The kinds whose changes the watch history keeps (None: every kind), each from the
    #: resourceVersion :meth:`keep_history` found (see the module's docstring).
    history_kinds: Optional[set[str]] = None
    _history_from: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._history = deque(maxlen=self.history_size)
        self._changed = threading.Condition(self.lock)

    # -- reading ---------------------------------------------------------------------------
    @property
    def resource_version(self) -> int:
        return self._rv

    @property
    def oldest_watchable(self) -> int:
        """The oldest resourceVersion a watch can still resume from (older ones get 410)."""
        with self.lock:
            return self._history[0].rv - 1 if len(self._history) == self._history.maxlen else 0

    def keep_history(self, kind: str) -> None:
        """Keep ``kind``'s changes in the watch history from now on (a client asked about it)."""
        kinds = self.history_kinds
        if kinds is not None and kind not in kinds:
            with self.lock:
                if kind not in kinds:
                    self._history_from[kind] = self._rv
                    kinds.add(kind)

    def oldest_watchable_of(self, kind: str) -> int:
        """The oldest resourceVersion a watch of ``kind`` can resume from (older ones get 410)."""
        with self.lock:
            if self.history_kinds is not None and kind not in self.history_kinds:
                return self._rv
            return max(self.oldest_watchable, self._history_from.get(kind, 0))

    def kind_version(self, *kinds: str) -> tuple[int, ...]:
        """The resourceVersion of the last change to any object of each kind: a control loop
        whose inputs are these kinds can skip a pass when they have not moved."""
        return tuple(map(self._kind_rv.get, kinds, _ZEROS))  # (a generator's frame cost more than the lookups)

    def namespace_version(self, namespace: str, *kinds: str) -> tuple[int, ...]:
        """:meth:`kind_version` within one namespace ("" for cluster-scoped objects)."""
        return tuple(self._ns_rv.get((k, namespace), 0) for k in kinds)

    def owned(self, kind: str, owner_uid: str) -> list[dict[str, Any]]:
        """The live objects of ``kind`` whose controlling owner has ``owner_uid`` (any namespace),
        in :meth:`list` order; the list is shared: read it, do not change it."""
        group = (kind, owner_uid)
        ordered = self._owned_sorted.get(group)
        if ordered is None:
            members = self._owned.get(group)
            ordered = self._owned_sorted[group] = [obj for _, obj in sorted(members.items())] if members else []
        return ordered

    def owned_version(self, kind: str, owner_uid: str) -> int:
        """The resourceVersion of the last change to :meth:`owned`'s objects (0: none yet)."""
        return self._owned_rv.get((kind, owner_uid), 0)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self._objects.get((kind, namespace or "", name))  # _key, inline: the most frequent read

    def must_get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.get(kind, namespace, name)
        if obj is None:
            raise not_found(kind, name)
        return obj

    def list(self, kind: str, namespace: str | None = None,
             labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Live objects of one kind, sorted by namespace and name (the real server's order)."""
        ordered = self._sorted.get(kind)
        if ordered is None:
            ordered = self._sorted[kind] = [obj for _, obj in sorted(self._by_kind.get(kind, {}).items())]
        if namespace:
            per_ns = self._sorted_ns.setdefault(kind, {})
            in_ns = per_ns.get(namespace)
            if in_ns is None:
                in_ns = per_ns[namespace] = [o for o in ordered if o["metadata"].get("namespace", "") == namespace]
            ordered = in_ns
        if not labels:
            return list(ordered)
        return [obj for obj in ordered if matches_labels(obj, labels)]

    def unordered(self, kind: str) -> builtins.list[dict[str, Any]]:
        """Live objects of one kind in no particular order: for a pass that puts only the few
        it picks in :meth:`list` order (by ``(namespace or "", name)``), not all of them."""
        return builtins.list(self._by_kind.get(kind, {}).values())

    # -- writing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def acting(self, writer: str) -> Iterator[None]:
        """Mark the writes made inside as ``writer``'s (under the lock: a request thread's write
        cannot slip in under the mark)."""
        with self.lock:
            before, self.acting_as = self.acting_as, writer
            try:
                yield
            finally:
                self.acting_as = before

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _record(self, type_: str, obj: dict[str, Any]) -> None:
        md = obj["metadata"]
        kind, ns = obj["kind"], md.get("namespace") or ""
        self._kind_rv[kind] = self._rv
        self._ns_rv[(kind, ns)] = self._rv
        self._index_owner(type_, kind, ns, obj)
        if self.history_kinds is None or kind in self.history_kinds:
            self._history.append(WatchEvent(self._rv, type_, kind, md.get("namespace", ""), md["name"], obj))
        for listener in self.listeners:
            listener(type_, obj)
        self._changed.notify_all()

    def _index_owner(self, type_: str, kind: str, ns: str, obj: dict[str, Any]) -> None:
        """File a changed object under its controlling owner (see ``_owned``). A touch of an
        object no longer stored changes no group: :meth:`list` does not show it either."""
        md = obj["metadata"]
        key = (kind, ns, md["name"])
        before = self._owner_of.get(key)
        uid: Optional[str] = None
        if type_ != "DELETED":
            if self._objects.get(key) is not obj:
                return
            for ref in md.get("ownerReferences") or []:
                if ref.get("controller"):
                    uid = ref.get("uid")
                    break
        if before is not None and before != uid:
            group = (kind, before)
            del self._owned[group][key]
            del self._owner_of[key]
            self._owned_rv[group] = self._rv
            self._owned_sorted.pop(group, None)
        if uid is not None:
            group = (kind, uid)
            self._owned.setdefault(group, {})[key] = obj
            self._owner_of[key] = uid
            self._owned_rv[group] = self._rv
            self._owned_sorted.pop(group, None)

    def create(self, obj: dict[str, Any], *, uid: Optional[str] = None) -> dict[str, Any]:
        """Store a new object. ``uid``: its uid, instead of the next one of the store's sequence
        (a controller's objects that must not shift the uids of the simulation's own)."""
        with self.lock:
            kind = obj["kind"]
            rt = BY_KIND[kind]
            md = obj.setdefault("metadata", {})
            if not rt.namespaced:
                md.pop("namespace", None)
            elif not md.get("namespace"):
                md["namespace"] = "default"
            if not md.get("name") and md.get("generateName"):
                md["name"] = md["generateName"] + self._suffix()
            name = md.get("name")
            if not name:
                raise ApiError(422, "Invalid", f"{kind} is invalid: metadata.name: Required value",
                               kind=kind, causes=[{"reason": "FieldValueRequired", "message": "Required value",
                                                   "field": "metadata.name"}])
            key = _key(kind, md.get("namespace"), name)
            if key in self._objects:
                raise ApiError(409, "AlreadyExists", f'{rt.plural}{"." + rt.group if rt.group else ""} "{name}" already exists',
                               kind=rt.plural, name=name, group=rt.group)
            if rt.namespaced and kind != "Namespace" and self.get("Namespace", None, md["namespace"]) is None:
                raise ApiError(404, "NotFound", f'namespaces "{md["namespace"]}" not found', kind="namespaces",
                               name=md["namespace"])
            obj.setdefault("apiVersion", rt.group_version)
            md["uid"] = uid or _uuid5(self.uid_namespace, str(next(self._uids)))
            md["creationTimestamp"] = _iso(self.clock())
            md.setdefault("labels", {})
            if "spec" in obj:
                md["generation"] = 1
            md["resourceVersion"] = str(self._next_rv())
            self._objects[key] = obj
            self._by_kind.setdefault(kind, {})[key] = obj
            self._sorted.pop(kind, None)
            self._sorted_ns.pop(kind, None)
            self._record("ADDED", obj)
            return obj

    def replace(self, obj: dict[str, Any], *, check_rv: bool = True) -> dict[str, Any]:
        """Swap in a new version of an object (an update/patch result)."""
        with self.lock:
            md = obj["metadata"]
            kind = obj["kind"]
            current = self.must_get(kind, md.get("namespace"), md["name"])
            sent_rv = md.get("resourceVersion")
            if check_rv and sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                rt = BY_KIND[kind]
                raise ApiError(409, "Conflict",
                               f'Operation cannot be fulfilled on {rt.plural}{"." + rt.group if rt.group else ""} '
                               f'"{md["name"]}": the object has been modified; please apply your changes to the '
                               f'latest version and try again', kind=rt.plural, name=md["name"], group=rt.group)
            for immutable in ("uid", "creationTimestamp", "namespace"):
                if immutable in current["metadata"]:
                    md[immutable] = current["metadata"][immutable]
            if "generation" in current["metadata"]:
                gen = current["metadata"]["generation"]
                md["generation"] = gen + 1 if obj.get("spec") != current.get("spec") else gen
            if obj == current:
                return current
            md["resourceVersion"] = str(self._next_rv())
            key = _key(kind, md.get("namespace"), md["name"])
            self._objects[key] = obj
            self._by_kind[kind][key] = obj
            self._sorted.pop(kind, None)
            self._sorted_ns.pop(kind, None)
            self._record("MODIFIED", obj)
            return obj

    def touch(self, obj: dict[str, Any], *, spec_changed: bool = False) -> None:
        """Publish an in-place change made by a controller to a live object."""
        with self.lock:
            md = obj["metadata"]
            if spec_changed and "generation" in md:
                md["generation"] += 1
            md["resourceVersion"] = str(self._next_rv())
            self._record("MODIFIED", obj)

    def delete(self, kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        with self.lock:
            key = _key(kind, namespace, name)
            obj = self._objects.pop(key, None)
            if obj is None:
                raise not_found(kind, name)
            del self._by_kind[kind][key]
            self._sorted.pop(kind, None)
            self._sorted_ns.pop(kind, None)
            obj["metadata"]["resourceVersion"] = str(self._next_rv())
            self._record("DELETED", obj)
            return obj

    # -- watching --------------------------------------------------------------------------
    def changes_since(self, rv: int, kinds: Iterable[str] | None = None) -> builtins.list[WatchEvent]:
        """The watch history's changes newer than ``rv`` (of ``kinds``; those it keeps)."""
        with self.lock:
            wanted = set(kinds) if kinds else None
            return [e for e in self._history if e.rv > rv and (wanted is None or e.kind in wanted)]

    def events_after(self, rv: int, kind: str) -> builtins.list[WatchEvent]:
        """Watch events of one kind newer than ``rv``, oldest first. Scans from the newest end:
        a watch that keeps up asks for the last few events of a long history. The caller holds
        ``lock``."""
        out = []
        for ev in reversed(self._history):
            if ev.rv <= rv:
                break
            if ev.kind == kind:
                out.append(ev)
        out.reverse()
        return out

    def wake_watchers(self) -> None:
        """Wake every thread in :meth:`wait_for_change` (a server shutting its streams down)."""
        with self._changed:
            self._changed.notify_all()

    def __contains__(self, key: tuple[str, str, str]) -> bool:
        """``(kind, namespace or "", name) in store``: is there such an object now?"""
        return key in self._objects

    def __len__(self) -> int:
        return len(self._objects)

    def wait_for_change(self, rv: int, timeout: float) -> bool:
        """Block until the store moves past ``rv`` (or the timeout); True if it did."""
        with self._changed:
            if self._rv > rv:
                return True
            self._changed.wait(timeout)
            return self._rv > rv

    # -- helpers ---------------------------------------------------------------------------
    _suffix_counter: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def _suffix(self) -> str:
        # Deterministic "random" suffixes: the same run gives the same pod names.
        n = next(self._suffix_counter)
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        s = ""
        x = (n * 2654435761) % (27 ** 5)
        for _ in range(5):
            s += alphabet[x % 27]
            x //= 27
        return s

    def generate_name(self, prefix: str) -> str:
        """The name :meth:`create` would give a ``generateName`` of ``prefix``: admission that
        names the object in its refusal (a quota's ``pods "x" is forbidden``) draws it first."""
        with self.lock:
            return prefix + self._suffix()

    def snapshot(self, obj: dict[str, Any]) -> dict[str, Any]:
        return copy.deepcopy(obj)


def _uuid5(namespace: uuid.UUID, name: str) -> str:
    """``str(uuid.uuid5(namespace, name))`` without the UUID object (every create makes one, half
    of them Events): the same SHA-1 bytes, version and variant bits (RFC 4122 4.3)."""
    digest = bytearray(hashlib.sha1(namespace.bytes + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def matches_labels(obj: dict[str, Any], selector: dict[str, str]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _iso(t: datetime) -> str:
    # The virtual clock hands out one datetime per tick, which a tick formats hundreds of times
    # (every Event, condition and status it writes): the last one's text is kept with it. A
    # datetime is immutable and the cache holds it alive, so the same object is the same text.
    global _last_iso
    last = _last_iso  # (one read: another thread may replace the pair meanwhile)
    if last[0] is t:
        return last[1]
    text = t.strftime("%Y-%m-%dT%H:%M:%SZ")
    _last_iso = (t, text)
    return text


_last_iso: tuple[Optional[datetime], str] = (None, "")


iso = _iso
