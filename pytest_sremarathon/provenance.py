"""Provenance: which recorded action put each object into the state a mitigation condition reads.

A repair is the agent's only when the evidence links the state change that made the fault's
mitigation condition true to an agent action (SCORING.md §3, "causal repair credit"). This
module keeps that link for the objects conditions read, on either backend:

* it listens to the cluster store (twin or mirror) and, when the marathon asks it to
  :meth:`observe`, looks at every object that moved since the last look;
* for each object it compares only the **aspects** a condition can read — a Deployment's pod
  template, replica count and container resources, a Service's spec, a ConfigMap's or Secret's data, a node's cordon.
  A write that leaves every aspect as it was (labels or annotations on ``metadata``, a status
  update, a no-op patch) has no cause and changes nothing here;
* a changed aspect is attributed to the most recent matching **expected cause**: an agent
  action recorded by the policy point (matched on its target object, or on its app for
  pipeline actions) or an orchestrator deploy (matched on its app). Nothing matching means the
  orchestrator's own hand (fault injection, cleanup, controllers);
* a pod's cause is the cause of the template it runs — the write that last made its
  Deployment's template what the pod was created from (a revert deployed, ``rollout undo`` or
  ``restart``, ``set image``/``set env``, an edit) — or, for a pod that replaces one the agent
  deleted or evicted, that deletion.

Causes are kept per ``(kind, namespace, name, aspect)``; :meth:`causes` answers for the
evidence a fault kind names (:meth:`FaultKind.evidence`). Everything here is a function of the
store's changes and the recorded actions, so the same run gives the same attribution.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Optional

#: How long an expected cause waits for the change it explains (a real cluster's mirror sees
#: an agent's write at the next sync, one tick later).
EXPECT_FOR = timedelta(seconds=90)
#: The aspects of each kind that a mitigation condition can read.
ASPECTS: dict[str, tuple[str, ...]] = {
    "Deployment": ("template", "replicas", "resources"),
    "Service": ("spec",),
    "ConfigMap": ("data",),
    "Secret": ("data",),
    "Node": ("unschedulable",),
    "HorizontalPodAutoscaler": ("spec",),
    "PodDisruptionBudget": ("spec",),
    "StatefulSet": ("template", "replicas", "resources"),
    "PersistentVolumeClaim": ("size",),  # an expansion
    "NetworkPolicy": ("spec",), "ResourceQuota": ("spec",), "LimitRange": ("spec",),
    "CronJob": ("spec",),
}
_RESOURCE_KIND = {"deployments": "Deployment", "services": "Service", "configmaps": "ConfigMap",
                  "secrets": "Secret", "nodes": "Node", "pods": "Pod", "replicasets": "ReplicaSet",
                  "horizontalpodautoscalers": "HorizontalPodAutoscaler", "poddisruptionbudgets": "PodDisruptionBudget",
                  "statefulsets": "StatefulSet", "persistentvolumeclaims": "PersistentVolumeClaim",
                  "networkpolicies": "NetworkPolicy", "resourcequotas": "ResourceQuota", "limitranges": "LimitRange",
                  "cronjobs": "CronJob", "jobs": "Job"}
POD_TEMPLATE_HASH = "pod-template-hash"
REVISION_HASH = "controller-revision-hash"  # a StatefulSet pod's revision: its ControllerRevision is <set>-<hash>


@dataclass(frozen=True)
class Cause:
    """Whose hand put an aspect into its present state, and when."""

    actor: str  # "agent" | "orchestrator"
    t: datetime
    action: Optional[str] = None  # the agent's Action.id

    @property
    def by_agent(self) -> bool:
        return self.actor == "agent"


@dataclass(frozen=True)
class EvidenceRef:
    """One thing a mitigation condition reads: an aspect of an object, or a pod's origin
    (``kind="Pod"``, ``aspect="origin"``)."""

    kind: str
    namespace: Optional[str]
    name: str
    aspect: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace or '-'}/{self.name}#{self.aspect}"


@dataclass
class _Expected:
    cause: Cause
    kind: Optional[str]  # None: anything in the namespace (a pipeline deploy)
    namespace: Optional[str]
    name: Optional[str]
    seq: int

    def matches(self, kind: str, namespace: Optional[str], name: str) -> bool:
        if self.kind is None:
            return (namespace or None) == self.namespace
        return self.kind == kind and (self.namespace or None) == (namespace or None) and self.name == name


@dataclass(frozen=True)
class Attribution:
    """Whose hand made a mitigation condition true (see :meth:`Provenance.attribute`)."""

    by: Literal["agent", "orchestrator"]
    actions: tuple[str, ...] = ()  # the agent's Action.ids, oldest first
    evidence: tuple[str, ...] = ()  # the evidence items those actions set


@dataclass(frozen=True)
class Effect:
    """An aspect an agent action changed (recorded as ``truth.effect``)."""

    action: str
    object: str
    aspect: str


def _sig(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _template_sig(template: Any) -> str:
    """A pod template's signature, without the label the deployment controller adds (so a
    ReplicaSet's template and the Deployment's it came from have the same one)."""
    t = dict(template or {})
    md = dict(t.get("metadata") or {})
    labels = {k: v for k, v in (md.get("labels") or {}).items() if k != POD_TEMPLATE_HASH}
    md["labels"] = labels
    t["metadata"] = md
    return _sig(t)


def aspects_of(obj: dict[str, Any]) -> dict[str, str]:
    kind = obj.get("kind", "")
    spec = obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet"):
        template = spec.get("template") or {}
        containers = (template.get("spec") or {}).get("containers") or []
        return {"template": _template_sig(template), "replicas": _sig(spec.get("replicas", 1)),
                "resources": _sig([c.get("resources") for c in containers])}
    if kind == "Service":
        return {"spec": _sig({k: v for k, v in spec.items() if k not in ("clusterIP", "clusterIPs")})}
    if kind in ("ConfigMap", "Secret"):
        return {"data": _sig([obj.get("data"), obj.get("binaryData"), obj.get("stringData")])}
    if kind == "Node":
        return {"unschedulable": _sig(bool(spec.get("unschedulable")))}
    if kind in ("HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "ResourceQuota", "LimitRange",
                "CronJob"):
        return {"spec": _sig(spec)}
    if kind == "PersistentVolumeClaim":
        return {"size": _sig(((spec.get("resources") or {}).get("requests") or {}).get("storage"))}
    return {}


def parse_target(target: str) -> Optional[tuple[Optional[str], Optional[str], Optional[str], Optional[str]]]:
    """``kube/<ns>/<resource>/<name>[/<sub>]`` or ``kube/<resource>/<name>`` ->
    (kind, namespace, name, subresource); ``pipeline/<app>/…`` -> (None, app, None, None)."""
    parts = target.split("/")
    if not parts:
        return None
    if parts[0] == "pipeline" and len(parts) >= 2:
        return (None, parts[1], None, None)
    if parts[0] != "kube" or len(parts) < 2:
        return None
    rest = parts[1:]
    if rest[0] in _RESOURCE_KIND:  # cluster-scoped: kube/nodes/<name>
        return (_RESOURCE_KIND[rest[0]], None, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None)
    if len(rest) >= 2 and rest[1] in _RESOURCE_KIND:
        return (_RESOURCE_KIND[rest[1]], rest[0], rest[2] if len(rest) > 2 else None,
                rest[3] if len(rest) > 3 else None)
    return None


@dataclass
class Provenance:
    """Causes of the aspects of a store's objects; see the module docstring."""

    store: Any  # k8s.store.Store (or the kube backend's MirrorStore)
    _dirty: dict[tuple[str, str, str], None] = field(default_factory=dict)
    _pod_events: list[tuple[str, str, str, Optional[str]]] = field(default_factory=list)
    _state: dict[tuple[str, str, str], dict[str, str]] = field(default_factory=dict)
    _causes: dict[tuple[str, str, str, str], Cause] = field(default_factory=dict)
    _template_causes: dict[tuple[str, str, str], Cause] = field(default_factory=dict)
    _replacements: dict[tuple[str, str], list[Cause]] = field(default_factory=dict)
    _expected: list[_Expected] = field(default_factory=list)
    _seq: int = 0
    _expect_lock: threading.Lock = field(default_factory=threading.Lock)  # expect() runs on request threads
    effects: list[Effect] = field(default_factory=list)  # agent effects since the last drain

    def __post_init__(self) -> None:
        now = self.store.clock()
        origin = Cause("orchestrator", now)
        for kind in ASPECTS:
            for obj in self.store.list(kind):
                self._settle(obj, origin)
        for pod in self.store.list("Pod"):
            md = pod["metadata"]
            self._causes[("Pod", md.get("namespace", ""), md["name"], "origin")] = origin
        self.store.listeners.append(self._on_change)

    # -- what the marathon tells it ------------------------------------------------------
    def expect(self, cause: Cause, target: str) -> None:
        """A recorded action whose effects may show up at the next looks (``target`` as the
        policy point records it: ``kube/…`` or ``pipeline/<app>/…``)."""
        parsed = parse_target(target)
        if parsed is None:
            return
        kind, ns, name, _subresource = parsed  # a pod's eviction matches the pod
        with self._expect_lock:
            self._seq += 1
            self._expected.append(_Expected(cause, kind, ns, name, self._seq))

    def observe(self, *, only: Optional[str] = None) -> None:
        """Attribute every change since the last look. ``only`` limits which expected causes
        may explain them ("agent" right after an agent step, "orchestrator" right after the
        orchestrator acted); the rest stay expected."""
        now = self.store.clock()
        with self.store.lock:
            dirty, self._dirty = self._dirty, {}
            pod_events, self._pod_events = self._pod_events, []
        for ev_type, ns, name, owner in pod_events:
            if ev_type == "DELETED":
                cause = self._match("Pod", ns, name, only)
                if cause is not None and owner:
                    self._replacements.setdefault((ns, owner), []).append(cause)
        for kind, ns, name in dirty:
            obj = self.store.get(kind, ns or None, name)
            if obj is None:
                self._state.pop((kind, ns, name), None)
                continue
            self._settle(obj, None, only=only)
        for ev_type, ns, name, owner in pod_events:
            if ev_type == "ADDED" and self.store.get("Pod", ns, name) is not None:
                self._causes[("Pod", ns, name, "origin")] = self._pod_origin(ns, name, owner, now)
        with self._expect_lock:
            self._expected = [e for e in self._expected if now - e.cause.t <= EXPECT_FOR]

    def drain_effects(self) -> list[Effect]:
        out, self.effects = self.effects, []
        return out

    # -- what the judge asks -------------------------------------------------------------
    def cause_of(self, ref: EvidenceRef) -> Optional[Cause]:
        return self._causes.get((ref.kind, ref.namespace or "", ref.name, ref.aspect))

    def causes(self, evidence: Iterable[EvidenceRef]) -> list[tuple[EvidenceRef, Cause]]:
        out = []
        for ref in evidence:
            cause = self.cause_of(ref)
            if cause is not None:
                out.append((ref, cause))
        return out

    def attribute(self, evidence: Iterable[EvidenceRef], since: datetime) -> Attribution:
        """The agent's, when one of the things a condition reads is in its present state
        because of an agent action made at or after ``since`` (the fault's start); else the
        orchestrator's (its deploys and cleanups, controllers, the fault healing)."""
        hands = sorted(((ref, c) for ref, c in self.causes(evidence) if c.by_agent and c.action and c.t >= since),
                       key=lambda rc: (rc[1].t, rc[1].action or "", str(rc[0])))
        if not hands:
            return Attribution("orchestrator")
        return Attribution("agent", tuple(dict.fromkeys(c.action for _, c in hands if c.action)),
                           tuple(dict.fromkeys(str(ref) for ref, _ in hands)))

    # -- internals -----------------------------------------------------------------------
    def _on_change(self, type_: str, obj: dict[str, Any]) -> None:
        kind = obj.get("kind", "")
        md = obj.get("metadata") or {}
        if kind == "Pod":
            if type_ in ("ADDED", "DELETED"):
                owner = next((r.get("name") for r in md.get("ownerReferences") or []
                              if r.get("kind") in ("ReplicaSet", "StatefulSet")), None)
                self._pod_events.append((type_, md.get("namespace", ""), md.get("name", ""), owner))
        elif kind in ASPECTS:
            key = (kind, md.get("namespace", "") or "", md.get("name", ""))
            if self.store.acting_as == "controller" and type_ != "DELETED":
                # A control loop's spec write (an autoscaler's replicas, a maintenance cordon) is
                # the orchestrator's, even right after a client touched the same object.
                self._dirty.pop(key, None)
                self._settle(obj, Cause("orchestrator", self.store.clock()))
            else:
                self._dirty[key] = None

    def _match(self, kind: str, ns: Optional[str], name: str, only: Optional[str]) -> Optional[Cause]:
        best: Optional[_Expected] = None
        with self._expect_lock:
            expected = list(self._expected)
        for e in expected:
            if only is not None and e.cause.actor != only:
                continue
            if e.matches(kind, ns, name) and (best is None or (e.cause.t, e.seq) >= (best.cause.t, best.seq)):
                best = e
        return best.cause if best is not None else None

    def _settle(self, obj: dict[str, Any], cause: Optional[Cause], *, only: Optional[str] = None) -> None:
        kind = obj["kind"]
        md = obj["metadata"]
        key = (kind, md.get("namespace", "") or "", md["name"])
        now = self.store.clock()
        before = self._state.get(key, {})
        after = aspects_of(obj)
        self._state[key] = after
        for aspect, sig in after.items():
            if before.get(aspect) == sig:
                continue
            c = cause or self._match(kind, key[1] or None, key[2], only) or Cause("orchestrator", now)
            self._causes[key + (aspect,)] = c
            if kind in ("Deployment", "StatefulSet") and aspect == "template":
                self._template_causes[(key[1], key[2], sig)] = c
            if c.by_agent and c.action and cause is None:
                self.effects.append(Effect(c.action, f"{kind}/{key[1] or '-'}/{key[2]}", aspect))

    def _pod_origin(self, ns: str, name: str, owner: Optional[str], now: datetime) -> Cause:
        if owner:
            queue = self._replacements.get((ns, owner))
            while queue:  # the replacement of a pod the agent deleted, made soon after it
                deletion = queue.pop(0)
                if now - deletion.t <= EXPECT_FOR:
                    return deletion
            rs = self.store.get("ReplicaSet", ns, owner)
            if rs is not None:
                deployment = next((r.get("name") for r in rs["metadata"].get("ownerReferences") or []
                                   if r.get("kind") == "Deployment"), None)
                if deployment:
                    sig = _template_sig((rs.get("spec") or {}).get("template"))
                    hit = self._template_causes.get((ns, deployment, sig))
                    if hit is not None:
                        return hit
            else:  # a StatefulSet's pod: the template of the revision it was created from
                pod = self.store.get("Pod", ns, name)
                revision = (((pod or {}).get("metadata") or {}).get("labels") or {}).get(REVISION_HASH)
                cr = self.store.get("ControllerRevision", ns, f"{owner}-{revision}") if revision else None
                if cr is not None:
                    template = dict((((cr.get("data") or {}).get("spec") or {}).get("template")) or {})
                    template.pop("$patch", None)
                    hit = self._template_causes.get((ns, owner, _template_sig(template)))
                    if hit is not None:
                        return hit
        return Cause("orchestrator", now)
