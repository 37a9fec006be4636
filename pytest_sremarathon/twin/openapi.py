"""Discovery documents and the OpenAPI v3 spec the twin API server publishes.

Legacy discovery (``/api``, ``/apis``, ``/api/v1``, ``/apis/{g}/{v}``) lists every type of
:data:`RESOURCE_TYPES` with its subresources (``deployments/scale`` as ``autoscaling/v1
Scale``, ``pods/eviction`` as ``policy/v1 Eviction``, ``serviceaccounts/token`` as ``authentication.k8s.io/v1
TokenRequest``, ``pods/log``, ``*/status``) and the
``metrics.k8s.io/v1beta1`` group that ``kubectl top`` needs.

OpenAPI v3 carries each kind's real fields, their types and descriptions (generated from the
official client's models: ``openapi_schemas.json``), so ``kubectl explain`` answers down any
field path; a kind without a generated schema gets one whose ``spec`` and ``status`` accept
anything. Each PATCH operation carries ``x-kubernetes-group-version-kind`` and a
``fieldValidation`` query parameter (so kubectl's default ``--validate=strict`` delegates
validation to the server instead of downloading OpenAPI v2). PATCH request bodies list
json-patch, merge-patch and apply-patch but *not* strategic-merge-patch: kubectl then computes
``apply``'s three-way strategic merge patch from its compiled-in Go types — exactly the patch
metadata the real server has — rather than from these schemas, which carry no merge keys.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib.resources import files
from typing import Any

from ..k8s.store import RESOURCE_TYPES, ResourceType
from .api_hpa_v1 import HPA_V1

SERVER_VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.4-sremarathon", "gitCommit": "0" * 40,
    "gitTreeState": "clean", "buildDate": "2026-01-05T00:00:00Z", "goVersion": "go1.23.8",
    "compiler": "gc", "platform": "linux/amd64",
}

METRICS_GROUP, METRICS_VERSION = "metrics.k8s.io", "v1beta1"

_STATUS_KINDS = ("Pod", "Deployment", "ReplicaSet", "Node", "Namespace", "Service", "ReplicationController",
                 "APIService", "HorizontalPodAutoscaler", "PodDisruptionBudget", "StatefulSet",
                 "PersistentVolumeClaim", "PersistentVolume", "DaemonSet", "Job", "CronJob")
SCALE_KINDS = ("Deployment", "ReplicaSet", "ReplicationController", "StatefulSet")  # with a ``/scale`` subresource
#: What ``serviceaccounts/<name>/token`` takes and answers (twin/serviceaccounts.py).
TOKEN_REQUEST_GVK = {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}
TOKEN_REQUEST_SCHEMA = "io.k8s.api.authentication.v1.TokenRequest"


def _resource_entry(rt: ResourceType) -> dict[str, Any]:
    verbs = list(rt.verbs)
    if rt.namespaced and "deletecollection" not in verbs:
        verbs.insert(1, "deletecollection")
    entry: dict[str, Any] = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                             "kind": rt.kind, "verbs": sorted(verbs)}
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    entry["storageVersionHash"] = hashlib.sha256(f"{rt.group}/{rt.version}/{rt.kind}".encode()).hexdigest()[:11]
    return entry


def _subresources(rt: ResourceType) -> list[dict[str, Any]]:
    subs: list[dict[str, Any]] = []
    base = {"singularName": "", "namespaced": rt.namespaced}
    if rt.kind in _STATUS_KINDS:
        subs.append({"name": f"{rt.plural}/status", **base, "kind": rt.kind, "verbs": ["get", "patch", "update"]})
    if rt.kind in SCALE_KINDS:
        subs.append({"name": f"{rt.plural}/scale", **base, "group": "autoscaling", "version": "v1", "kind": "Scale",
                     "verbs": ["get", "patch", "update"]})
    if rt.kind == "Pod":
        subs.append({"name": "pods/eviction", **base, "group": "policy", "version": "v1", "kind": "Eviction",
                     "verbs": ["create"]})
        subs.append({"name": "pods/log", **base, "kind": "Pod", "verbs": ["get"]})
        subs.append({"name": "pods/attach", **base, "kind": "PodAttachOptions", "verbs": ["create", "get"]})
        subs.append({"name": "pods/exec", **base, "kind": "PodExecOptions", "verbs": ["create", "get"]})
        subs.append({"name": "pods/portforward", **base, "kind": "PodPortForwardOptions", "verbs": ["create", "get"]})
    if rt.kind == "ServiceAccount":
        subs.append({"name": "serviceaccounts/token", **base, "group": TOKEN_REQUEST_GVK["group"],
                     "version": TOKEN_REQUEST_GVK["version"], "kind": "TokenRequest", "verbs": ["create"]})
    return subs


def group_versions() -> dict[tuple[str, str], list[ResourceType]]:
    out: dict[tuple[str, str], list[ResourceType]] = {}
    for rt in (*RESOURCE_TYPES, HPA_V1):  # HPA_V1: a second served version of a stored kind
        out.setdefault((rt.group, rt.version), []).append(rt)
    return out


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    gv = f"{group}/{version}" if group else version
    if (group, version) == (METRICS_GROUP, METRICS_VERSION):
        resources = [
            {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics", "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics", "verbs": ["get", "list"]},
        ]
        return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
    types = group_versions().get((group, version))
    if types is None:
        return None
    resources = []
    for rt in sorted(types, key=lambda r: r.plural):
        resources.append(_resource_entry(rt))
        resources.extend(_subresources(rt))
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def api_versions() -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}]}


def _group(name: str, versions: list[str]) -> dict[str, Any]:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def groups() -> list[dict[str, Any]]:
    names: dict[str, list[str]] = {}
    for (g, v) in group_versions():
        if g:
            names.setdefault(g, []).append(v)
    out = [_group(g, vs) for g, vs in names.items()]
    out.append(_group(METRICS_GROUP, [METRICS_VERSION]))
    return out


def api_group_list() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups()}


def api_group(name: str) -> dict[str, Any] | None:
    for g in groups():
        if g["name"] == name:
            return {"kind": "APIGroup", "apiVersion": "v1", **g}
    return None


def root_paths() -> dict[str, Any]:
    paths = ["/api", "/api/v1", "/apis", "/apis/", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"]
    for g in groups():
        paths.append(f"/apis/{g['name']}")
        paths.extend(f"/apis/{v['groupVersion']}" for v in g["versions"])
    return {"paths": sorted(paths)}


# -- OpenAPI v3 ---------------------------------------------------------------------------------

_PKG = {"": "io.k8s.api.core.v1", "apps": "io.k8s.api.apps.v1",
        "apiregistration.k8s.io": "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1",
        "rbac.authorization.k8s.io": "io.k8s.api.rbac.v1", "authorization.k8s.io": "io.k8s.api.authorization.v1"}
_META = "io.k8s.apimachinery.pkg.apis.meta.v1"


def schema_name(rt: ResourceType) -> str:
    return f"{_PKG.get(rt.group, 'io.k8s.api.' + rt.group + '.' + rt.version)}.{rt.kind}"


def _param(name: str, description: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": {"type": kind, "uniqueItems": True}}


_WRITE_PARAMS = [
    _param("dryRun", "When present, indicates that modifications should not be persisted."),
    _param("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
    _param("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request "
                              "(POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: Ignore, "
                              "Warn, Strict."),
]
_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")


def _ok(ref: str) -> dict[str, Any]:
    return {"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": ref}}}},
            "401": {"description": "Unauthorized"}}


def _operations(rt: ResourceType, gvk: dict[str, str], ref: str, item: bool, op_suffix: str) -> dict[str, Any]:
    ops: dict[str, Any] = {}
    tag = f"{rt.group or 'core'}_{rt.version}"
    if item:
        ops["get"] = {"operationId": f"read{op_suffix}", "tags": [tag], "responses": _ok(ref),
                      "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk}
        ops["put"] = {"operationId": f"replace{op_suffix}", "tags": [tag], "parameters": list(_WRITE_PARAMS),
                      "requestBody": {"content": {"*/*": {"schema": {"$ref": ref}}}, "required": True},
                      "responses": _ok(ref), "x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk}
        ops["patch"] = {"operationId": f"patch{op_suffix}", "tags": [tag],
                        "parameters": list(_WRITE_PARAMS) + [_param("force", "Force is going to \"force\" Apply "
                                                                             "requests.", "boolean")],
                        "requestBody": {"content": {t: {"schema": {"$ref": f"#/components/schemas/{_META}.Patch"}}
                                                    for t in _PATCH_TYPES}, "required": True},
                        "responses": _ok(ref), "x-kubernetes-action": "patch",
                        "x-kubernetes-group-version-kind": gvk}
        ops["delete"] = {"operationId": f"delete{op_suffix}", "tags": [tag], "parameters": [_WRITE_PARAMS[0]],
                         "responses": _ok(f"#/components/schemas/{_META}.Status"),
                         "x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk}
    else:
        ops["get"] = {"operationId": f"list{op_suffix}", "tags": [tag], "responses": _ok(ref + "List"),
                      "x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk}
        ops["post"] = {"operationId": f"create{op_suffix}", "tags": [tag], "parameters": list(_WRITE_PARAMS),
                       "requestBody": {"content": {"*/*": {"schema": {"$ref": ref}}}, "required": True},
                       "responses": _ok(ref), "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk}
    return ops


def _object_schema(rt: ResourceType) -> dict[str, Any]:
    loose = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props: dict[str, Any] = {
        "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this "
                                                        "representation of an object."},
        "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this "
                                                  "object represents."},
        "metadata": {"allOf": [{"$ref": f"#/components/schemas/{_META}.ObjectMeta"}], "default": {}},
    }
    for field in ("spec", "status", "data", "binaryData", "subsets", "involvedObject", "source", "series",
                  "related", "roleRef", "aggregationRule", "addressType", "endpoints", "ports"):
        props[field] = dict(loose)
    for field in ("rules", "subjects"):  # RBAC's top-level lists
        props[field] = {"type": "array", "items": dict(loose)}
    return {"type": "object", "description": f"{rt.kind} (sremarathon twin; permissive schema)",
            "properties": props, "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-group-version-kind": [{"group": rt.group, "version": rt.version, "kind": rt.kind}]}


def openapi_index() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for gv in ["api", "apis", "version"]:
        paths[gv] = {"serverRelativeURL": f"/openapi/v3/{gv}?hash={_hash(gv)}"}
    for (g, v) in group_versions():
        key = f"apis/{g}/{v}" if g else f"api/{v}"
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={_hash(key)}"}
    return {"paths": paths}


def _hash(key: str) -> str:
    openapi_document(key)
    return _HASHES.get(key, "0")


_HASHES: dict[str, str] = {}
_DOCS: dict[str, dict[str, Any]] = {}


def openapi_document(key: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document for ``api/v1``, ``apis/apps/v1`` … (``None`` if unknown)."""
    if key in _DOCS:
        return _DOCS[key]
    doc = _build_document(key)
    if doc is not None:
        _DOCS[key] = doc
        _HASHES[key] = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:128].upper()
    return doc


@cache
def _generated() -> dict[str, Any]:
    return json.loads(files(__package__).joinpath("openapi_schemas.json").read_text())


def _real_schemas(key: str) -> dict[str, Any]:
    """The component schemas the document ``key`` holds, with every field of the kinds and the
    types they reach (``openapi_schemas.json``, made by ``tools/gen_openapi_schemas.py`` from the
    official client's models): what ``kubectl explain`` prints, down any field path."""
    data = _generated()
    return {name: data["schemas"][name] for name in data["documents"].get(key, ())}


def _build_document(key: str) -> dict[str, Any] | None:
    info = {"title": "Kubernetes", "version": SERVER_VERSION["gitVersion"]}
    if key in ("api", "apis", "version"):
        return {"openapi": "3.0.0", "info": info, "paths": {}, "components": {}}
    parts = key.split("/")
    if parts[0] == "api" and len(parts) == 2:
        group, version = "", parts[1]
    elif parts[0] == "apis" and len(parts) == 3:
        group, version = parts[1], parts[2]
    else:
        return None
    types = group_versions().get((group, version))
    if types is None:
        return None
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    group_camel = "".join(p.capitalize() for p in (group or "core").split(".")) + version.capitalize()
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {
        f"{_META}.ObjectMeta": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                "description": "ObjectMeta is metadata that all persisted resources must have."},
        f"{_META}.Patch": {"type": "object", "description": "Patch is provided to give a concrete name and type to "
                                                            "the Kubernetes PATCH request body."},
        f"{_META}.Status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        f"{_META}.ListMeta": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    }
    real = _real_schemas(key)
    for rt in types:
        gvk = {"group": rt.group, "version": rt.version, "kind": rt.kind}
        name = schema_name(rt)
        ref = f"#/components/schemas/{name}"
        if name not in real:  # a kind without a generated schema: any fields
            schemas[name] = _object_schema(rt)
        schemas[name + "List"] = {
            "type": "object", "required": ["items"],
            "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                           "items": {"type": "array", "items": {"allOf": [{"$ref": ref}], "default": {}}},
                           "metadata": {"allOf": [{"$ref": f"#/components/schemas/{_META}.ListMeta"}],
                                        "default": {}}},
            "x-kubernetes-group-version-kind": [{"group": rt.group, "version": rt.version, "kind": rt.kind + "List"}]}
        scope = "Namespaced" if rt.namespaced else ""
        coll = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
        suffix = f"{group_camel}{scope}{rt.kind}"
        ns_param = [{"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}}] \
            if rt.namespaced else []
        name_param = [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}]
        paths[coll] = {**_operations(rt, gvk, ref, False, suffix), "parameters": ns_param}
        paths[coll + "/{name}"] = {**_operations(rt, gvk, ref, True, suffix), "parameters": name_param + ns_param}
        if rt.kind in _STATUS_KINDS:
            paths[coll + "/{name}/status"] = {**_operations(rt, gvk, ref, True, suffix + "Status"),
                                              "parameters": name_param + ns_param}
        if rt.kind in SCALE_KINDS:
            scale_gvk = {"group": "autoscaling", "version": "v1", "kind": "Scale"}
            scale_ref = "#/components/schemas/io.k8s.api.autoscaling.v1.Scale"
            schemas.setdefault("io.k8s.api.autoscaling.v1.Scale", {
                "type": "object", "x-kubernetes-preserve-unknown-fields": True,
                "x-kubernetes-group-version-kind": [scale_gvk]})
            paths[coll + "/{name}/scale"] = {**_operations(rt, scale_gvk, scale_ref, True, suffix + "Scale"),
                                             "parameters": name_param + ns_param}
        if rt.kind == "ServiceAccount":  # `kubectl create token`: a TokenRequest POSTed, answered
            token_ref = f"#/components/schemas/{TOKEN_REQUEST_SCHEMA}"
            schemas.setdefault(TOKEN_REQUEST_SCHEMA, {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                                                      "x-kubernetes-group-version-kind": [TOKEN_REQUEST_GVK]})
            paths[coll + "/{name}/token"] = {
                "post": {"operationId": f"create{suffix}Token", "tags": [f"{group or 'core'}_{version}"],
                         "parameters": list(_WRITE_PARAMS),
                         "requestBody": {"content": {"*/*": {"schema": {"$ref": token_ref}}}, "required": True},
                         "responses": _ok(token_ref), "x-kubernetes-action": "post",
                         "x-kubernetes-group-version-kind": TOKEN_REQUEST_GVK},
                "parameters": name_param + ns_param}
        if rt.namespaced:
            paths[f"{prefix}/{rt.plural}"] = {
                "get": {"operationId": f"list{group_camel}{rt.kind}ForAllNamespaces", "tags": [f"{group or 'core'}_"
                                                                                               f"{version}"],
                        "responses": _ok(ref + "List"), "x-kubernetes-action": "list",
                        "x-kubernetes-group-version-kind": gvk}}
    schemas.update(real)  # the kinds' real schemas, and every type they reach
    return {"openapi": "3.0.0", "info": info, "paths": paths, "components": {"schemas": schemas}}


# -- OpenAPI v2 (protobuf) ----------------------------------------------------------------------
#
# kubectl 1.27/1.28 decide whether the server validates fields (``--validate=strict``) from the
# OpenAPI *v2* document, which client-go only accepts as gnostic protobuf. The document below
# holds just what that check reads: one PATCH operation per kind, carrying the
# ``x-kubernetes-group-version-kind`` extension and the ``fieldValidation`` query parameter.
# It has no definitions, so kubectl's apply computes strategic merge patches from its built-in
# types (as it does with the v3 documents above).

OPENAPI_V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _pb(num: int, value: bytes | str | bool) -> bytes:
    """One protobuf field: length-delimited for bytes/str (sub-messages are bytes), varint for bool."""
    if isinstance(value, bool):
        return _varint(num << 3) + _varint(int(value))
    data = value.encode() if isinstance(value, str) else value
    return _varint((num << 3) | 2) + _varint(len(data)) + data


def _named_any(name: str, yaml_text: str) -> bytes:
    return _pb(1, name) + _pb(2, _pb(2, yaml_text))  # NamedAny{name, value: Any{yaml}}


def _query_param(name: str, kind: str = "string") -> bytes:
    qp = _pb(2, "query") + _pb(4, name) + _pb(6, kind) + _pb(20, True)
    return _pb(1, _pb(2, _pb(3, qp)))  # ParametersItem{parameter: Parameter{non_body_parameter: {query: qp}}}


def openapi_v2_protobuf() -> bytes:
    import yaml

    paths = b""
    for rt in RESOURCE_TYPES:
        prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
        path = (f"{prefix}/namespaces/{{namespace}}/{rt.plural}/{{name}}" if rt.namespaced
                else f"{prefix}/{rt.plural}/{{name}}")
        gvk = yaml.safe_dump({"group": rt.group, "kind": rt.kind, "version": rt.version})
        op = (_pb(1, f"{rt.group or 'core'}_{rt.version}") + _pb(5, f"patch{rt.kind}")
              + b"".join(_pb(7, t) for t in _PATCH_TYPES + ("application/strategic-merge-patch+json",))
              + b"".join(_pb(8, _query_param(p)) for p in ("dryRun", "fieldManager", "fieldValidation"))
              + _pb(8, _query_param("force", "boolean"))
              + _pb(9, _pb(1, _pb(1, "200") + _pb(2, _pb(1, _pb(1, "OK")))))
              + _pb(13, _named_any("x-kubernetes-action", "patch\n"))
              + _pb(13, _named_any("x-kubernetes-group-version-kind", gvk)))
        paths += _pb(2, _pb(1, path) + _pb(2, _pb(8, op)))
    info = _pb(1, "Kubernetes") + _pb(2, SERVER_VERSION["gitVersion"])
    return _pb(1, "2.0") + _pb(2, info) + _pb(8, paths)
