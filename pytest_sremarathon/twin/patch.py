"""The four PATCH flavours the API server accepts.

* JSON merge patch (RFC 7386) — :func:`merge_patch`;
* JSON patch (RFC 6902) — :func:`json_patch` (``null`` members of added values are dropped, as
  decoding into Go types does);
* strategic merge patch — :func:`strategic_merge_patch`, with the merge keys of the built-in
  types (containers/env/volumes by ``name``, container ports by ``containerPort``, volumeMounts
  by ``mountPath``, Service ports by ``port``, conditions by ``type`` …), the ``$patch``
  (replace|delete|merge), ``$setElementOrder/<f>``, ``$deleteFromPrimitiveList/<f>`` and
  ``$retainKeys`` directives, and ``null`` deleting a field;
* server-side apply (``application/apply-patch+yaml``) — approximated by
  :func:`apply_patch`: the applied configuration is merged strategically into the live
  object (fields it omits are kept; field ownership is not tracked).

All functions are pure: they return a new document and never mutate their arguments.
Failures raise :class:`ApiError` with the server's reasons.
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from ..k8s.store import ApiError

# -- schema: where lists merge rather than replace ------------------------------------------


class _L:
    """A list field: merged by ``key`` (maps) or as a set (primitives, key=None)."""

    __slots__ = ("key", "item")

    def __init__(self, key: Optional[str], item: Optional[dict[str, Any]] = None) -> None:
        self.key = key
        self.item = item or {}


_OBJECT_META: dict[str, Any] = {"finalizers": _L(None), "ownerReferences": _L("uid")}
_CONTAINER: dict[str, Any] = {"ports": _L("containerPort"), "env": _L("name"), "volumeMounts": _L("mountPath"),
                              "volumeDevices": _L("devicePath")}
_POD_SPEC: dict[str, Any] = {
    "containers": _L("name", _CONTAINER), "initContainers": _L("name", _CONTAINER),
    "ephemeralContainers": _L("name", _CONTAINER), "volumes": _L("name"), "imagePullSecrets": _L("name"),
    "hostAliases": _L("ip"), "topologySpreadConstraints": _L("topologyKey"), "resourceClaims": _L("name"),
    "schedulingGates": _L("name"),
}
_POD_TEMPLATE: dict[str, Any] = {"metadata": _OBJECT_META, "spec": _POD_SPEC}
_CONDITIONS: dict[str, Any] = {"conditions": _L("type")}
_WORKLOAD: dict[str, Any] = {"metadata": _OBJECT_META, "spec": {"template": _POD_TEMPLATE}, "status": _CONDITIONS}

SCHEMAS: dict[str, dict[str, Any]] = {
    "Pod": {"metadata": _OBJECT_META, "spec": _POD_SPEC,
            "status": {"conditions": _L("type"), "podIPs": _L("ip"), "hostIPs": _L("ip")}},
    "Deployment": _WORKLOAD,
    "ReplicaSet": _WORKLOAD,
    "DaemonSet": _WORKLOAD,
    "Job": _WORKLOAD,
    "CronJob": {"metadata": _OBJECT_META, "spec": {"jobTemplate": {"spec": {"template": _POD_TEMPLATE}}}},
    "Service": {"metadata": _OBJECT_META, "spec": {"ports": _L("port")}, "status": _CONDITIONS},
    "Node": {"metadata": _OBJECT_META, "spec": {"podCIDRs": _L(None)},
             "status": {"conditions": _L("type"), "addresses": _L("type")}},
    "Namespace": {"metadata": _OBJECT_META, "status": _CONDITIONS},
    "Scale": {"metadata": _OBJECT_META},
    "StatefulSet": _WORKLOAD,
}
_DEFAULT_SCHEMA: dict[str, Any] = {"metadata": _OBJECT_META}

_DIRECTIVE = "$patch"
_ORDER = "$setElementOrder/"
_DEL_PRIM = "$deleteFromPrimitiveList/"
_RETAIN = "$retainKeys"


def _invalid_patch(msg: str) -> ApiError:
    return ApiError(400, "BadRequest", msg)


# -- JSON merge patch ---------------------------------------------------------------------------

def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = merge_patch(result.get(k), v)
    return result


# -- JSON patch ------------------------------------------------------------------------------

def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _invalid_patch(f'json patch path "{path}" must start with "/"')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise _missing(path)
            cur = cur[p]
        elif isinstance(cur, list):
            cur = cur[_index(cur, p, path, allow_end=False)]
        else:
            raise _missing(path)
    return cur


def _missing(path: str) -> ApiError:
    return ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                                    f"doc is missing path: \"{path}\": missing value")


def _index(lst: list, p: str, path: str, allow_end: bool) -> int:
    if p == "-" and allow_end:
        return len(lst)
    try:
        i = int(p)
    except ValueError:
        raise _missing(path) from None
    if i < 0 or i > len(lst) or (i == len(lst) and not allow_end):
        raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                                       f"unable to access invalid index: {i}")
    return i


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise _missing(path)
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        raise _invalid_patch("cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _missing(path)
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, path, allow_end=False))
    raise _missing(path)


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise _invalid_patch("json patch must be a list of operations")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise _invalid_patch(f"invalid json patch operation: {op!r}")
        kind, path = op["op"], op.get("path", "")
        parts = _pointer(path)
        if kind == "add":
            doc = _add(doc, parts, drop_nulls(op.get("value")), path)
        elif kind == "remove":
            _remove(doc, parts, path)
        elif kind == "replace":
            if parts:
                _walk(doc, parts, path)  # must exist
                _remove(doc, parts, path)
            doc = _add(doc, parts, drop_nulls(op.get("value")), path)
        elif kind in ("move", "copy"):
            src = op.get("from", "")
            value = copy.deepcopy(_walk(doc, _pointer(src), src))
            if kind == "move":
                _remove(doc, _pointer(src), src)
            doc = _add(doc, parts, value, path)
        elif kind == "test":
            if _walk(doc, parts, path) != op.get("value"):
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                                               f"testing value {path} failed: test failed")
        else:
            raise _invalid_patch(f"Unexpected kind: {kind}")
    return doc


# -- strategic merge patch ------------------------------------------------------------------

def strategic_merge_patch(original: dict[str, Any], patch: Any, kind: str) -> dict[str, Any]:
    if not isinstance(patch, dict):
        raise _invalid_patch("strategic merge patch must be a JSON object")
    schema = SCHEMAS.get(kind, _DEFAULT_SCHEMA)
    out = _merge_map(copy.deepcopy(original), copy.deepcopy(patch), schema)
    if out is None:
        raise _invalid_patch("a strategic merge patch cannot delete the whole object")
    return out


def _sub_schema(schema: dict[str, Any], key: str) -> Any:
    return schema.get(key) if isinstance(schema, dict) else None


def _merge_map(original: Optional[dict[str, Any]], patch: dict[str, Any], schema: Any) -> Optional[dict[str, Any]]:
    directive = patch.pop(_DIRECTIVE, None)
    if directive == "delete":
        return None
    retain = patch.pop(_RETAIN, None)
    if directive == "replace":
        return _strip(patch, schema)
    if directive not in (None, "merge"):
        raise _invalid_patch(f"Unknown patch type: {directive}")
    result = original if isinstance(original, dict) else {}
    orders: dict[str, list] = {}
    deletes: dict[str, list] = {}
    for k in list(patch):
        if k.startswith(_ORDER):
            orders[k[len(_ORDER):]] = patch.pop(k) or []
        elif k.startswith(_DEL_PRIM):
            deletes[k[len(_DEL_PRIM):]] = patch.pop(k) or []
    for field, values in deletes.items():
        if isinstance(result.get(field), list):
            result[field] = [v for v in result[field] if v not in values]
    for k, pv in patch.items():
        sub = _sub_schema(schema, k)
        if pv is None:
            result.pop(k, None)
            continue
        ov = result.get(k)
        if isinstance(pv, dict):
            merged = _merge_map(ov if isinstance(ov, dict) else None, pv, sub if isinstance(sub, dict) else {})
            if merged is None:
                result.pop(k, None)
            else:
                result[k] = merged
        elif isinstance(pv, list):
            if isinstance(sub, _L):
                result[k] = _merge_list(ov if isinstance(ov, list) else [], pv, sub)
            else:
                result[k] = pv
        else:
            result[k] = pv
    for field, order in orders.items():
        sub = _sub_schema(schema, field)
        if isinstance(result.get(field), list) and isinstance(sub, _L):
            result[field] = _apply_order(result[field], order, sub.key)
    if isinstance(retain, list):
        for k in list(result):
            if k not in retain:
                del result[k]
    return result


def _strip(value: Any, schema: Any) -> Any:
    """Remove directives from a value that replaces what was there."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == _DIRECTIVE or k == _RETAIN or k.startswith(_ORDER) or k.startswith(_DEL_PRIM):
                continue
            if v is None:
                continue
            out[k] = _strip(v, _sub_schema(schema, k))
        return out
    if isinstance(value, list):
        if isinstance(schema, _L):
            return _merge_list([], value, schema)
        return value
    return value


def _merge_list(original: list, patch: list, schema: _L) -> list:
    if schema.key is None:  # set of primitives
        result = list(original)
        for v in patch:
            if isinstance(v, dict) and v.get(_DIRECTIVE) == "replace":
                return [x for x in patch if not (isinstance(x, dict) and _DIRECTIVE in x)]
            if v not in result:
                result.append(v)
        return result
    key = schema.key
    if any(isinstance(v, dict) and v.get(_DIRECTIVE) == "replace" for v in patch):
        return [_strip(v, schema.item) for v in patch if not (isinstance(v, dict) and _DIRECTIVE in v)]
    result = [copy.deepcopy(v) for v in original]
    for pv in patch:
        if not isinstance(pv, dict):
            result.append(pv)
            continue
        if key not in pv:
            raise _invalid_patch(f"map: {pv} does not contain declared merge key: {key}")
        idx = next((i for i, ov in enumerate(result) if isinstance(ov, dict) and ov.get(key) == pv[key]), None)
        if pv.get(_DIRECTIVE) == "delete":
            result = [ov for ov in result if not (isinstance(ov, dict) and ov.get(key) == pv[key])]
            continue
        if idx is None:
            merged = _merge_map(None, dict(pv), schema.item)
            if merged is not None:
                result.append(merged)
        else:
            merged = _merge_map(result[idx], dict(pv), schema.item)
            if merged is None:
                del result[idx]
            else:
                result[idx] = merged
    return result


def _apply_order(items: list, order: list, key: Optional[str]) -> list:
    def ident(v: Any) -> Any:
        if key is None:
            return v
        return v.get(key) if isinstance(v, dict) else v

    wanted = [ident(o) if isinstance(o, dict) else o for o in order]
    pos = {repr(w): i for i, w in enumerate(wanted)}
    listed = sorted((v for v in items if repr(ident(v)) in pos), key=lambda v: pos[repr(ident(v))])
    # Items the order does not name (server-only) keep their slots; listed ones fill the rest in order.
    it = iter(listed)
    return [next(it) if repr(ident(v)) in pos else v for v in items]


# -- server-side apply (approximation) --------------------------------------------------------

def apply_patch(live: Optional[dict[str, Any]], applied: Any, kind: str) -> dict[str, Any]:
    if not isinstance(applied, dict):
        raise _invalid_patch("apply patch must be a YAML or JSON object")
    if live is None:
        return _strip(copy.deepcopy(applied), SCHEMAS.get(kind, _DEFAULT_SCHEMA))
    return strategic_merge_patch(live, drop_nulls(applied), kind)


def drop_nulls(v: Any) -> Any:
    """A deep copy without ``null`` members: what decoding into the server's Go types leaves
    (e.g. the ``creationTimestamp: null`` kubectl sends inside pod templates)."""
    if isinstance(v, dict):
        return {k: drop_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [drop_nulls(x) for x in v]
    return v
