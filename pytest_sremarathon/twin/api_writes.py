"""The API server's writes: create, update, patch, scale, delete, deletecollection,
eviction and service account tokens, each computed under the store's lock, put to the policy point outside it, then
committed if the object has not moved meanwhile (otherwise recomputed).

:class:`ObjectWrites` is a part of :class:`~.apiserver.ApiServer`; it reads the server's state
(``store``, ``admission``) and its serialisation and selection (declared below, defined there).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any, Optional

from ..k8s.selectors import selector_string
from ..k8s.store import RESOURCE_TYPES, ApiError, ResourceType, Store, iso
from ..policy import Decision, MutationRequest
from ..serving.http import Admission
from . import admission_quota, defaults, disruption, priority, serviceaccounts, volumes
from . import patch as patching
from .api_common import (
    JSON,
    Ctx,
    Plan,
    bad_request,
    canonical,
    conflict,
    dumps,
    object_not_found,
    qualified,
    status_success,
    truthy,
)

log = logging.getLogger(__name__)

#: Kinds whose DELETE answers with the deleted object rather than a ``Status`` (the real
#: registries' ``ReturnDeletedObject: true``): typed clients decode the answer as that kind (the
#: Python client's ``delete_namespaced_service`` as a ``V1Service``, which a ``Status`` fails).
RETURNS_DELETED_OBJECT = frozenset({"Pod", "Service"})


class ObjectWrites:
    """The write handlers of :class:`~.apiserver.ApiServer`."""

    store: Store
    admission: Admission
    # Called under the store lock with each object a committed write changed or deleted: the
    # twin's controllers react in the same virtual moment, as a real cluster's watches do.
    on_write: Optional[Callable[[dict[str, Any]], None]] = None

    # Defined by the API server: serialisation and selection the writes answer with.
    def _obj_json(self, obj: dict[str, Any]) -> bytes:
        raise NotImplementedError

    def _want_table(self, ctx: Ctx) -> bool:
        raise NotImplementedError

    def _want_metadata(self, ctx: Ctx) -> bool:
        raise NotImplementedError

    def _select(self, ctx: Ctx, rt: ResourceType, ns: Optional[str]) -> list[dict[str, Any]]:
        raise NotImplementedError

    # -- admission-wrapped writes ----------------------------------------------------------------
    def _mutate(self, ctx: Ctx, verb: str, rt: ResourceType, ns: Optional[str], name: Optional[str],
                sub: Optional[str], plan: Callable[[], Plan]) -> tuple[int, str, bytes]:
        dry_run = bool(ctx.query.get("dryRun"))

        def request(body: Any) -> MutationRequest:
            return MutationRequest(actor=ctx.actor, channel="kube", verb=verb, resource=rt.plural, namespace=ns,
                                   name=name, subresource=sub, app=ns, body=body)

        for _attempt in range(25):
            try:
                with self.store.lock:
                    p = plan()
                    after = copy.deepcopy(p.after)
            except ApiError as e:
                try:
                    raw = ctx.body()
                except ApiError:
                    raw = None
                req = request(raw)
                decision = self.admission.decide(req)
                if not decision.allowed:
                    self._record(req, decision, 403)
                    raise self._forbidden(rt, name, decision) from None
                if not dry_run:
                    self._record(req, decision, e.code)
                raise
            req = request(after)
            decision = self.admission.decide(req)
            if not decision.allowed:
                self._record(req, decision, 403)
                raise self._forbidden(rt, name, decision)
            if dry_run:
                return 200 if verb != "create" else 201, JSON, p.render(after)
            try:
                with self.store.lock:
                    if not p.valid():
                        continue
                    status, payload = p.commit()
                    self._react(p.after)
            except ApiError as e:
                self._record(req, decision, e.code)
                raise
            self._record(req, decision, status)
            return status, JSON, payload
        raise conflict(rt, name or "", "the object is being modified too often; please try again")

    def _react(self, obj: Any) -> None:
        """Hand what a write committed to :attr:`on_write` (each item of a deletecollection)."""
        if self.on_write is None or not isinstance(obj, dict):
            return
        items = obj.get("items") or [] if str(obj.get("kind", "")).endswith("List") else [obj]
        for item in items:
            try:
                self.on_write(item)
            except Exception:  # pragma: no cover - a controller's failure must not fail the write
                log.exception("reacting to a write of %s failed", item.get("kind"))

    def _authorize_secret_read(self, ctx: Ctx, rt: ResourceType, ns: Optional[str], name: Optional[str],
                               watch: bool) -> None:
        """Reads that would return Secret data go to the policy point too (``policy.READ_VERBS``);
        a table or metadata-only answer carries no data and needs no decision. Only denials are
        recorded."""
        if self._want_metadata(ctx) or (self._want_table(ctx) and ctx.query.get("includeObject") != "Object"):
            return
        verb = "watch" if watch or truthy(ctx.query.get("watch")) else ("get" if name else "list")
        req = MutationRequest(actor=ctx.actor, channel="kube", verb=verb, resource=rt.plural, namespace=ns,
                              name=name, app=ns)
        decision = self.admission.decide(req)
        if not decision.allowed:
            self._record(req, decision, 403)
            raise self._forbidden(rt, name, decision)

    def _record(self, req: MutationRequest, decision: Decision, status: int) -> None:
        try:
            self.admission.record(req, decision, status)
        except Exception:  # pragma: no cover - recording must never break the API
            log.exception("admission.record failed")

    @staticmethod
    def _forbidden(rt: ResourceType, name: Optional[str], decision: Decision) -> ApiError:
        return ApiError(403, "Forbidden", decision.message or "forbidden", kind=rt.plural, name=name or "",
                        group=rt.group)

    def _rv_unchanged(self, rt: ResourceType, ns: Optional[str], name: str, rv: Optional[str]) -> Callable[[], bool]:
        def check() -> bool:
            cur = self.store.get(rt.kind, ns, name)
            return (cur is None and rv is None) or (cur is not None and cur["metadata"].get("resourceVersion") == rv)
        return check

    # -- create ----------------------------------------------------------------------------------
    def _prepare_new(self, rt: ResourceType, ns: Optional[str], body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format - accepted media types include: "
                               "application/json, application/yaml")
        if body.get("kind") and body["kind"] != rt.kind:
            raise bad_request(f"the API version in the data ({body.get('apiVersion', '')}) does not match the "
                               f"expected API version ({rt.group_version})" if body.get("apiVersion") not in
                               (None, rt.group_version) else f"expected kind {rt.kind}, got {body['kind']}")
        obj = patching.drop_nulls(body)
        obj["kind"], obj["apiVersion"] = rt.kind, rt.group_version
        md = obj.get("metadata")
        if not isinstance(md, dict):
            md = obj["metadata"] = {}
        if rt.namespaced:
            if md.get("namespace") and ns and md["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                                   "request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        for f in ("uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "selfLink"):
            md.pop(f, None)
        if md.get("labels") is None:
            md.pop("labels", None)
        return obj

    def _create(self, ctx: Ctx, rt: ResourceType, ns: Optional[str]) -> tuple[int, str, bytes]:
        body = ctx.body()
        name = (body or {}).get("metadata", {}).get("name") if isinstance(body, dict) else None

        def plan() -> Plan:
            obj = self._prepare_new(rt, ns, body)
            defaults.apply_defaults(obj)
            defaults.initial_status(obj)
            defaults.validate(obj)
            admission_quota.admit(self.store, obj)  # LimitRange defaults, then quota: 403 when over
            volumes.protect(obj)  # a claim's or a volume's in-use protection finalizer
            if rt.kind == "Service":
                self._allocate_service(obj)
            if rt.kind == "Pod":
                priority.admit(self.store, obj)
            oname = obj["metadata"].get("name")
            if oname and self.store.get(rt.kind, ns, oname) is not None:
                raise ApiError(409, "AlreadyExists", f'{qualified(rt)} "{oname}" already exists',
                               kind=rt.plural, name=oname, group=rt.group)

            def commit() -> tuple[int, bytes]:
                created = self.store.create(obj)
                return 201, self._obj_json(created)

            return Plan(obj, lambda: not oname or self.store.get(rt.kind, ns, oname) is None, commit)

        return self._mutate(ctx, "create", rt, ns, name, None, plan)

    def _allocate_service(self, obj: dict[str, Any]) -> None:
        spec = obj.setdefault("spec", {})
        if spec.get("type") == "ExternalName":
            return
        if spec.get("clusterIP") == "None":
            spec["clusterIPs"] = ["None"]
            return
        used = {(s.get("spec") or {}).get("clusterIP") for s in self.store.list("Service")}
        if not spec.get("clusterIP"):
            i = 11  # 10.96.0.1 is the API server's, 10.96.0.10 the cluster DNS's
            while f"10.96.{i // 256}.{i % 256}" in used:
                i += 1
            spec["clusterIP"] = f"10.96.{i // 256}.{i % 256}"
        spec["clusterIPs"] = [spec["clusterIP"]]
        if spec.get("type") in ("NodePort", "LoadBalancer"):
            used_ports = {p.get("nodePort") for s in self.store.list("Service")
                          for p in (s.get("spec") or {}).get("ports") or []}
            nxt = 30000
            for p in spec.get("ports") or []:
                if not p.get("nodePort"):
                    while nxt in used_ports:
                        nxt += 1
                    p["nodePort"] = nxt
                    used_ports.add(nxt)

    # -- update / patch --------------------------------------------------------------------------
    def _finish_update(self, rt: ResourceType, current: dict[str, Any], new: dict[str, Any],
                       subresource: Optional[str]) -> dict[str, Any]:
        md = new.get("metadata")
        if not isinstance(md, dict):
            md = new["metadata"] = {}
        cur_md = current["metadata"]
        new["kind"], new["apiVersion"] = rt.kind, rt.group_version
        md["name"] = cur_md["name"]
        if rt.namespaced:
            md["namespace"] = cur_md["namespace"]
        if not md.get("resourceVersion"):
            md["resourceVersion"] = cur_md["resourceVersion"]
        if subresource == "status":
            result = copy.deepcopy(current)
            result["status"] = new.get("status")
            if result["status"] is None:
                result.pop("status")
            result["metadata"]["resourceVersion"] = md["resourceVersion"]
            return result
        if rt.kind in defaults.STATUS_SUBRESOURCE:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        for f in ("deletionTimestamp", "deletionGracePeriodSeconds", "generation", "uid", "creationTimestamp"):
            if f in cur_md:
                md[f] = cur_md[f]
            elif f.startswith("deletion"):  # (only a DELETE starts a deletion)
                md.pop(f, None)
        if md.get("labels") is None:
            md.pop("labels", None)
        untouched_spec = "spec" in current and canonical(new.get("spec")) == canonical(current["spec"])
        untouched_template = rt.kind in ("Deployment", "ReplicaSet") and \
            canonical((new.get("spec") or {}).get("template")) == \
            canonical((current.get("spec") or {}).get("template"))
        pre_default_template = copy.deepcopy((new.get("spec") or {}).get("template"))
        # Objects made by the simulation need not carry the API's defaults. Default an update only
        # if the stored object is itself defaulted, and never introduce defaults into what the
        # client left alone: a changed pod template starts a rollout, and ``rollout undo`` must
        # restore a template byte for byte to reuse the old ReplicaSet.
        if defaults.apply_defaults(copy.deepcopy(current)) == current:
            defaults.apply_defaults(new)
        if untouched_spec:
            new["spec"] = copy.deepcopy(current["spec"])
        elif untouched_template and isinstance(new.get("spec"), dict) and "template" in current.get("spec", {}):
            new["spec"]["template"] = copy.deepcopy(current["spec"]["template"])
        elif rt.kind == "Deployment" and isinstance(new.get("spec"), dict):
            self._restore_revision_template(current, new, pre_default_template)
        defaults.validate(new, current)
        if rt.kind == "Service":
            spec = new.setdefault("spec", {})
            cur_spec = current.get("spec") or {}
            if not spec.get("clusterIP") and cur_spec.get("clusterIP"):
                spec["clusterIP"] = cur_spec["clusterIP"]
            self._allocate_service(new)
        return new

    def _restore_revision_template(self, current: dict[str, Any], new: dict[str, Any],
                                   sent: Optional[dict[str, Any]]) -> None:
        """If the new pod template is one of the deployment's ReplicaSet templates (``rollout undo``,
        or setting the old image back), use that ReplicaSet's template verbatim, minus
        ``pod-template-hash``: kubectl sends Go's empty values (``resources: {}``,
        ``creationTimestamp: null``) that a JSON-hashing controller would take for a new template."""
        candidates = [canonical(sent), canonical(new["spec"].get("template"))]
        uid = current["metadata"].get("uid")
        for rs in self.store.list("ReplicaSet", current["metadata"].get("namespace")):
            if not any(r.get("uid") == uid for r in rs["metadata"].get("ownerReferences") or []):
                continue
            template = copy.deepcopy((rs.get("spec") or {}).get("template") or {})
            labels = (template.get("metadata") or {}).get("labels") or {}
            labels.pop("pod-template-hash", None)
            if canonical(template) in candidates:
                new["spec"]["template"] = template
                return

    def _update(self, ctx: Ctx, rt: ResourceType, ns: Optional[str], name: str,
                subresource: Optional[str] = None) -> tuple[int, str, bytes]:
        body = ctx.body()
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise bad_request(f"the name of the object ({body_name}) does not match the name on the URL ({name})")
        if body.get("kind") and body["kind"] != rt.kind:
            raise bad_request(f"expected kind {rt.kind}, got {body['kind']}")

        def plan() -> Plan:
            current = self.store.get(rt.kind, ns, name)
            if current is None:
                raise object_not_found(rt, name)
            new = self._finish_update(rt, current, patching.drop_nulls(body), subresource)
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                return 200, self._obj_json(self._replace(rt, new))

            return Plan(new, self._rv_unchanged(rt, ns, name, base_rv), commit)

        return self._mutate(ctx, "update", rt, ns, name, subresource, plan)

    def _replace(self, rt: ResourceType, new: dict[str, Any]) -> dict[str, Any]:
        """Store an update's result. An object being deleted goes once the update leaves it no
        finalizer, as the real registry deletes it then (its dependents with it)."""
        try:
            replaced = self.store.replace(new)
        except ApiError as e:
            if e.reason == "Conflict":
                raise conflict(rt, new["metadata"]["name"]) from None
            raise
        md = replaced["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            return self._delete_now(rt, replaced, {})
        return replaced

    def _apply_patch_body(self, ctx: Ctx, kind: str, current: Optional[dict[str, Any]], body: Any) -> dict[str, Any]:
        ctype = ctx.content_type
        base = current if current is not None else {}
        if ctype == "application/merge-patch+json":
            if not isinstance(body, dict):
                raise bad_request("merge patch must be a JSON object")
            return patching.merge_patch(base, body)
        if ctype == "application/json-patch+json":
            return patching.json_patch(base, body)
        if ctype == "application/strategic-merge-patch+json":
            return patching.strategic_merge_patch(base, body, kind)
        if ctype == "application/apply-patch+yaml":
            return patching.apply_patch(current, body, kind)
        raise ApiError(415, "UnsupportedMediaType",
                       "the body of the request was in an unknown format - accepted media types include: "
                       "application/json-patch+json, application/merge-patch+json, "
                       "application/apply-patch+yaml, application/strategic-merge-patch+json")

    def _patch(self, ctx: Ctx, rt: ResourceType, ns: Optional[str], name: str,
               subresource: Optional[str] = None) -> tuple[int, str, bytes]:
        body = ctx.body()
        if body is None:
            raise bad_request("empty patch")
        is_apply = ctx.content_type == "application/apply-patch+yaml"
        if is_apply and subresource is None and not ctx.query.get("fieldManager"):
            raise bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")

        def plan() -> Plan:
            current = self.store.get(rt.kind, ns, name)
            if current is None:
                if is_apply and subresource is None:
                    obj = self._prepare_new(rt, ns, body)
                    obj["metadata"]["name"] = name
                    obj = patching.apply_patch(None, obj, rt.kind)
                    obj["kind"], obj["apiVersion"] = rt.kind, rt.group_version
                    self._set_managed(obj, ctx)
                    defaults.apply_defaults(obj)
                    defaults.initial_status(obj)
                    defaults.validate(obj)
                    if rt.kind == "Service":
                        self._allocate_service(obj)

                    def create() -> tuple[int, bytes]:
                        return 201, self._obj_json(self.store.create(obj))

                    return Plan(obj, lambda: self.store.get(rt.kind, ns, name) is None, create)
                raise object_not_found(rt, name)
            patched = self._apply_patch_body(ctx, rt.kind, current, body)
            if not isinstance(patched, dict):
                raise bad_request("the patch did not produce an object")
            if is_apply:
                self._set_managed(patched, ctx)
            sent_rv = (patched.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            new = self._finish_update(rt, current, patched, subresource)
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                return 200, self._obj_json(self._replace(rt, new))

            return Plan(new, self._rv_unchanged(rt, ns, name, base_rv), commit)

        return self._mutate(ctx, "patch", rt, ns, name, subresource, plan)

    def _set_managed(self, obj: dict[str, Any], ctx: Ctx) -> None:
        manager = ctx.query.get("fieldManager") or "unknown"
        md = obj.setdefault("metadata", {})
        entries = [m for m in md.get("managedFields") or [] if m.get("manager") != manager
                   or m.get("operation") != "Apply"]
        entries.append({"manager": manager, "operation": "Apply", "apiVersion": obj.get("apiVersion", ""),
                        "time": iso(self.store.clock()), "fieldsType": "FieldsV1", "fieldsV1": {}})
        md["managedFields"] = entries

    # -- scale -----------------------------------------------------------------------------------
    @staticmethod
    def _scale_of(obj: dict[str, Any]) -> dict[str, Any]:
        md = obj["metadata"]
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                             if k in md},
                "spec": {"replicas": int(spec.get("replicas") or 0)},
                "status": {"replicas": int(status.get("replicas") or 0), "selector": _scale_selector(obj)}}

    def _get_scale(self, ctx: Ctx, rt: ResourceType, ns: Optional[str], name: str) -> tuple[int, str, bytes]:
        with self.store.lock:
            obj = self.store.get(rt.kind, ns, name)
            if obj is None:
                raise object_not_found(rt, name)
            return 200, JSON, dumps(self._scale_of(obj))

    def _write_scale(self, ctx: Ctx, rt: ResourceType, ns: Optional[str], name: str) -> tuple[int, str, bytes]:
        body = ctx.body()
        verb = "update" if ctx.method == "PUT" else "patch"

        def plan() -> Plan:
            current = self.store.get(rt.kind, ns, name)
            if current is None:
                raise object_not_found(rt, name)
            scale = self._scale_of(current)
            if verb == "update":
                if not isinstance(body, dict):
                    raise bad_request("the body of the request was in an unknown format")
                new_scale = body
            else:
                new_scale = self._apply_patch_body(ctx, "Scale", scale, body)
            replicas = (new_scale.get("spec") or {}).get("replicas")
            if replicas is None:
                replicas = 0
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
                raise ApiError(422, "Invalid", f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
                                               f'{replicas}: must be greater than or equal to 0', kind="Scale",
                               name=name, causes=[{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                                   "message": f"Invalid value: {replicas}: must be greater than or "
                                                              f"equal to 0"}])
            sent_rv = (new_scale.get("metadata") or {}).get("resourceVersion")
            if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            new = copy.deepcopy(current)
            new.setdefault("spec", {})["replicas"] = replicas
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                return 200, dumps(self._scale_of(self._replace(rt, new)))

            return Plan(new, self._rv_unchanged(rt, ns, name, base_rv), commit,
                         lambda obj: dumps(self._scale_of(obj)))

        return self._mutate(ctx, verb, rt, ns, name, "scale", plan)

    # -- delete ----------------------------------------------------------------------------------
    def _delete_options(self, ctx: Ctx) -> dict[str, Any]:
        body = ctx.body() if ctx.raw_body else None
        opts = dict(body) if isinstance(body, dict) else {}
        for k in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents"):
            if k in ctx.query:
                opts[k] = ctx.query[k]
        return opts

    @staticmethod
    def _check_preconditions(rt: ResourceType, obj: dict[str, Any], opts: dict[str, Any]) -> None:
        pre = opts.get("preconditions") or {}
        md = obj["metadata"]
        if pre.get("uid") and pre["uid"] != md.get("uid"):
            raise conflict(rt, md["name"], f"Precondition failed: UID in precondition: {pre['uid']}, "
                                            f"UID in object meta: {md.get('uid')}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != md.get("resourceVersion"):
            raise conflict(rt, md["name"], f"Precondition failed: ResourceVersion in precondition: "
                                            f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                                            f"{md.get('resourceVersion')}")

    def _delete_or_mark(self, rt: ResourceType, obj: dict[str, Any], opts: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """A DELETE's effect: an object with ``metadata.finalizers`` stays, marked with a
        ``deletionTimestamp`` (kubectl shows it Terminating) until updates have removed every
        finalizer (:meth:`_replace`) — the controllers that own them do that, e.g. the claim
        protection of :mod:`.volumes`; any other is deleted now. Returns the object and whether
        it is gone. Store lock held."""
        md = obj["metadata"]
        if not md.get("finalizers"):
            return self._delete_now(rt, obj, opts), True
        if md.get("deletionTimestamp"):
            return obj, False
        marked = copy.deepcopy(obj)
        mmd = marked["metadata"]
        mmd["deletionTimestamp"] = iso(self.store.clock())
        mmd["deletionGracePeriodSeconds"] = 0
        if "generation" in mmd:  # (the registry counts the deletion as a change of the object)
            mmd["generation"] += 1
        return self.store.replace(marked, check_rv=False), False

    def _delete_now(self, rt: ResourceType, obj: dict[str, Any], opts: dict[str, Any]) -> dict[str, Any]:
        """Delete ``obj`` and (unless orphaning) its dependents. Store lock held."""
        md = obj["metadata"]
        orphan = opts.get("propagationPolicy") == "Orphan" or truthy(str(opts.get("orphanDependents", "")))
        deleted = self.store.delete(rt.kind, md.get("namespace"), md["name"])
        uid = md.get("uid")
        if rt.kind == "Namespace":
            for other in RESOURCE_TYPES:
                if other.namespaced:
                    for o in list(self.store.list(other.kind, md["name"])):
                        self.store.delete(other.kind, md["name"], o["metadata"]["name"])
            return deleted
        if uid:
            self._cascade(uid, md.get("namespace"), orphan)
        return deleted

    def _cascade(self, uid: str, ns: Optional[str], orphan: bool) -> None:
        for other in RESOURCE_TYPES:
            for o in list(self.store.list(other.kind, ns if other.namespaced else None)):
                refs = o["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == uid for r in refs):
                    continue
                if orphan:
                    new = copy.deepcopy(o)
                    new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    if not new["metadata"]["ownerReferences"]:
                        del new["metadata"]["ownerReferences"]
                    self.store.replace(new, check_rv=False)
                else:
                    md = o["metadata"]
                    if self.store.get(other.kind, md.get("namespace"), md["name"]) is not None:
                        self.store.delete(other.kind, md.get("namespace"), md["name"])
                        if md.get("uid"):
                            self._cascade(md["uid"], md.get("namespace"), False)

    def _delete_response(self, rt: ResourceType, deleted: dict[str, Any]) -> bytes:
        if rt.kind in RETURNS_DELETED_OBJECT:
            return dumps(deleted)
        md = deleted["metadata"]
        details = {"name": md["name"], "group": rt.group, "kind": rt.plural, "uid": md.get("uid", "")}
        return dumps(status_success(200, details))

    def _delete(self, ctx: Ctx, rt: ResourceType, ns: Optional[str], name: str) -> tuple[int, str, bytes]:
        opts = self._delete_options(ctx)

        def plan() -> Plan:
            current = self.store.get(rt.kind, ns, name)
            if current is None:
                raise object_not_found(rt, name)
            self._check_preconditions(rt, current, opts)
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                deleted, now = self._delete_or_mark(rt, current, opts)
                # (an object left waiting for its finalizers is answered as it now stands)
                return 200, self._delete_response(rt, deleted) if now else self._obj_json(deleted)

            return Plan(current, self._rv_unchanged(rt, ns, name, base_rv), commit,
                         lambda obj: self._delete_response(rt, obj))

        return self._mutate(ctx, "delete", rt, ns, name, None, plan)

    def _delete_collection(self, ctx: Ctx, rt: ResourceType, ns: Optional[str]) -> tuple[int, str, bytes]:
        opts = self._delete_options(ctx)

        def plan() -> Plan:
            victims = self._select(ctx, rt, ns)
            snapshot = {"kind": rt.kind + "List", "apiVersion": rt.group_version, "metadata": {},
                        "items": victims}

            def commit() -> tuple[int, bytes]:
                gone = []
                for v in victims:
                    md = v["metadata"]
                    if self.store.get(rt.kind, md.get("namespace"), md["name"]) is v:
                        gone.append(self._delete_or_mark(rt, v, opts)[0])
                return 200, dumps({"kind": rt.kind + "List", "apiVersion": rt.group_version,
                                    "metadata": {"resourceVersion": str(self.store.resource_version)},
                                    "items": gone})

            return Plan(snapshot, lambda: True, commit)

        return self._mutate(ctx, "delete", rt, ns, None, None, plan)

    # -- pods/eviction and pods/log --------------------------------------------------------------
    def _evict(self, ctx: Ctx, rt: ResourceType, ns: str, name: str) -> tuple[int, str, bytes]:
        body = ctx.body() or {}
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format")
        ev_name = (body.get("metadata") or {}).get("name")
        if ev_name and ev_name != name:
            raise bad_request("name in URL does not match name in Eviction object")
        opts = dict(body.get("deleteOptions") or {})

        def plan() -> Plan:
            current = self.store.get("Pod", ns, name)
            if current is None:
                raise object_not_found(rt, name)
            self._check_preconditions(rt, current, opts)
            disruption.check_eviction(self.store, current)
            base_rv = current["metadata"]["resourceVersion"]

            def commit() -> tuple[int, bytes]:
                self._delete_or_mark(rt, current, opts)
                return 201, dumps(status_success(201))

            return Plan(current, self._rv_unchanged(rt, ns, name, base_rv), commit,
                         lambda obj: dumps(status_success(201)))

        return self._mutate(ctx, "evict", rt, ns, name, "eviction", plan)

    # -- serviceaccounts/token -------------------------------------------------------------------
    def _create_token(self, ctx: Ctx, rt: ResourceType, ns: str, name: str) -> tuple[int, str, bytes]:
        """``kubectl create token``: a TokenRequest answered (:func:`.serviceaccounts.token_request`),
        admitted as a ``create`` of ``serviceaccounts/token``; nothing is stored."""
        body = ctx.body()

        def plan() -> Plan:
            answer = serviceaccounts.token_request(self.store, ns, name, body)
            payload = dumps(answer)
            return Plan(answer, lambda: True, lambda: (201, payload), lambda obj: payload)

        return self._mutate(ctx, "create", rt, ns, name, "token", plan)


def _scale_selector(obj: dict[str, Any]) -> str:
    """A Scale's ``status.selector``: a ReplicationController's selector is a plain label map."""
    selector = (obj.get("spec") or {}).get("selector")
    if obj.get("kind") == "ReplicationController":
        return ",".join(f"{k}={v}" for k, v in sorted((selector or {}).items()))
    return selector_string(selector).replace("<none>", "")
