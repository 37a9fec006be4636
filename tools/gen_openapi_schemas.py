"""Regenerate ``pytest_sremarathon/twin/openapi_schemas.json``: the OpenAPI v3 component schemas
of the kinds the twin serves, with their real fields (what ``kubectl explain`` reads).

    python tools/gen_openapi_schemas.py

The official Python client (a dependency) is generated from Kubernetes' own OpenAPI spec and
keeps all of it on its models: each field's JSON name, type (``openapi_types``), whether it is
required, and its description. The schemas are rebuilt from those models, so explain answers as
a real API server of the client's Kubernetes version does. (Built here rather than at run time:
importing the client's models takes seconds.)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

import kubernetes
from kubernetes import client as k8s_client

from pytest_sremarathon.k8s.store import RESOURCE_TYPES
from pytest_sremarathon.twin import openapi

OUT = Path(openapi.__file__).with_name("openapi_schemas.json")

META = "io.k8s.apimachinery.pkg.apis.meta.v1"
#: Types of ``meta/v1`` (apimachinery), not of an API group: named as the real spec names them.
_META_TYPES = {"ObjectMeta", "ListMeta", "LabelSelector", "LabelSelectorRequirement", "OwnerReference",
               "ManagedFieldsEntry", "Condition", "Status", "StatusDetails", "StatusCause", "DeleteOptions",
               "Preconditions"}
_PRIMITIVES: dict[str, dict[str, Any]] = {
    "str": {"type": "string"}, "int": {"type": "integer", "format": "int32"}, "float": {"type": "number",
                                                                                     "format": "double"},
    "bool": {"type": "boolean"}, "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"}, "bytearray": {"type": "string", "format": "byte"},
    "bytes": {"type": "string", "format": "byte"},
    "object": {"x-kubernetes-preserve-unknown-fields": True},  # IntOrString, RawExtension: any JSON value
}
# CoreV1Event, V1PodSpec, V2HorizontalPodAutoscaler, V1beta1…: (group prefix, version, type name)
_MODEL_NAME = re.compile(r"^([A-Z][a-z]+)?(V\d+(?:alpha\d+|beta\d+)?)([A-Z].*)$")


def model_of(group: str, version: str, kind: str) -> Optional[type]:
    """The client's model class of ``kind`` (``V1StatefulSet``, ``CoreV1Event`` …), if any."""
    v = version[0].upper() + version[1:]
    prefix = "".join(p.capitalize() for p in (group or "core").split(".")[0].split("-"))
    for name in (v + kind, prefix + v + kind):
        model = getattr(k8s_client, name, None)
        if isinstance(model, type) and hasattr(model, "openapi_types"):
            return model
    return None


def _parse(model_name: str) -> tuple[str, str]:
    """(version, type name) of a model class name: ``V1PodTemplateSpec`` -> (v1, PodTemplateSpec)."""
    m = _MODEL_NAME.match(model_name)
    return (m.group(2).lower(), m.group(3)) if m else ("v1", model_name)


class SchemaSet:
    """The component schemas one group-version's document needs: its kinds and every type they
    reach. A type reachable from a core/v1 kind is named as core's (``io.k8s.api.core.v1.PodSpec``),
    one of meta/v1 as apimachinery's, any other as the document's own group's."""

    def __init__(self, package: str, core_types: frozenset[str], kinds: dict[str, dict[str, str]],
                 schemas: Optional[dict[str, Any]] = None) -> None:
        self.package = package  # io.k8s.api.apps (without the version)
        self.core_types = core_types
        self.kinds = kinds  # model class name -> the group, version and kind it is served as
        self.schemas: dict[str, Any] = {} if schemas is None else schemas  # name -> schema

    def name(self, model: type) -> str:
        version, short = _parse(model.__name__)
        if short in _META_TYPES:
            return f"{META}.{short}"
        if model.__name__ in self.core_types:
            return f"io.k8s.api.core.{version}.{short}"
        return f"{self.package}.{version}.{short}"

    def add(self, model: type) -> str:
        name = self.name(model)
        if name in self.schemas:
            return name
        self.schemas[name] = schema = {"type": "object", "description": _description(model)}
        props: dict[str, Any] = {}
        required = []
        fields = model.model_fields  # type: ignore[attr-defined]
        for attr, typ in model.openapi_types.items():  # type: ignore[attr-defined]
            field = fields.get(attr) or fields["var_" + attr.lstrip("_")]  # _exec -> var_exec
            key = model.attribute_map[attr]  # type: ignore[attr-defined]
            prop = self._type(typ)
            if "$ref" in prop:  # as the real documents hold an object-typed field
                prop = {"allOf": [prop], "default": {}}
            # (The client keeps no description of an object-typed field: explain prints the
            # type's own description once it is navigated into.)
            if field.description:
                prop["description"] = field.description
            props[key] = prop
            if field.is_required():
                required.append(key)
        schema["properties"] = props
        if required:
            schema["required"] = required
        if model.__name__ in self.kinds:  # a served kind, in whichever document it appears
            schema["x-kubernetes-group-version-kind"] = [self.kinds[model.__name__]]
        return name

    def _type(self, typ: str) -> dict[str, Any]:
        """The schema of an ``openapi_types`` entry: ``int``, ``List[V1Container]``,
        ``Dict[str, str]``, ``V1PodSpec`` …"""
        if typ in _PRIMITIVES:
            return dict(_PRIMITIVES[typ])
        if typ.lower().startswith("list[") and typ.endswith("]"):
            item = self._type(typ[5:-1])
            return {"type": "array", "items": {"allOf": [item], "default": {}} if "$ref" in item else item}
        if typ.lower().startswith("dict[") and typ.endswith("]"):
            return {"type": "object", "additionalProperties": self._type(typ[5:-1].split(",", 1)[1].strip())}
        model = getattr(k8s_client, typ, None)
        if not isinstance(model, type) or not hasattr(model, "openapi_types"):
            return dict(_PRIMITIVES["object"])
        return {"$ref": f"#/components/schemas/{self.add(model)}"}


def _description(model: type) -> str:
    doc = (model.__doc__ or "").strip()
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip() if doc else ""


def core_types() -> frozenset[str]:
    """Every model class a core/v1 kind reaches (what the real spec files under core/v1)."""
    seen: set[str] = set()

    def walk(model: type) -> None:
        if model.__name__ in seen:
            return
        seen.add(model.__name__)
        for typ in model.openapi_types.values():  # type: ignore[attr-defined]
            for name in re.findall(r"[A-Za-z0-9]+", typ):
                nested = getattr(k8s_client, name, None)
                if isinstance(nested, type) and hasattr(nested, "openapi_types"):
                    walk(nested)

    for rt in RESOURCE_TYPES:
        if not rt.group:
            model = model_of(rt.group, rt.version, rt.kind)
            if model is not None:
                walk(model)
    return frozenset(seen)


def generate() -> dict[str, Any]:
    """{"kubernetes": client version, "schemas": {name: schema}, "documents": {"apis/apps/v1":
    [the schema names its document holds]}}."""
    core = core_types()
    kinds: dict[str, dict[str, str]] = {"V1Scale": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                                        "AuthenticationV1TokenRequest": dict(openapi.TOKEN_REQUEST_GVK)}
    for (group, version), types in openapi.group_versions().items():
        for rt in types:
            model = model_of(group, version, rt.kind)
            if model is not None:
                kinds[model.__name__] = {"group": group, "version": version, "kind": rt.kind}
    schemas: dict[str, Any] = {}
    documents: dict[str, list[str]] = {}
    for (group, version), types in openapi.group_versions().items():
        models = SchemaSet(openapi.schema_name(types[0]).rsplit(".", 2)[0], core, kinds, {})
        for rt in types:
            model = model_of(group, version, rt.kind)
            if model is not None:
                models.add(model)
            if rt.kind in openapi.SCALE_KINDS:  # autoscaling/v1's Scale, named as autoscaling's
                SchemaSet("io.k8s.api.autoscaling", frozenset(), kinds, models.schemas).add(k8s_client.V1Scale)
            if rt.kind == "ServiceAccount":  # serviceaccounts/token's TokenRequest, named as authentication's
                SchemaSet("io.k8s.api.authentication", frozenset(), kinds, models.schemas).add(
                    k8s_client.AuthenticationV1TokenRequest)
        for name, schema in models.schemas.items():
            if schemas.setdefault(name, schema) != schema:
                raise SystemExit(f"{name}: two different schemas under one name")
        documents[f"apis/{group}/{version}" if group else f"api/{version}"] = sorted(models.schemas)
    return {"kubernetes": kubernetes.__version__, "schemas": dict(sorted(schemas.items())),
            "documents": dict(sorted(documents.items()))}


def render(data: dict[str, Any]) -> str:
    """One schema per line: a regenerated file's diff shows which types changed."""
    lines = ["{", f'"kubernetes": {json.dumps(data["kubernetes"])},', f'"documents": {json.dumps(data["documents"])},',
             '"schemas": {']
    items = list(data["schemas"].items())
    lines += [f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" + ("," if i < len(items) - 1 else "")
              for i, (k, v) in enumerate(items)]
    return "\n".join(lines + ["}}", ""])


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else OUT
    out.write_text(render(generate()))
    print(f"wrote {out}")
