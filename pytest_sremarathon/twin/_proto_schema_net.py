"""Protobuf field tables for the network and admission kinds clients send as protobuf
(``kubectl create quota``), in :mod:`._proto_schema`'s format, transcribed from
``k8s.io/api/core/v1/generated.proto``. Kept apart from the generated file, which
``tools/gen_proto_schema.py`` rewrites whole."""

_META = "k8s.io.apimachinery.pkg.apis.meta.v1."
_QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
_CORE = "k8s.io.api.core.v1."

MESSAGES: dict[str, dict[int, tuple]] = {
    _CORE + "ResourceQuota": {1: ("metadata", "", _META + "ObjectMeta"), 2: ("spec", "", _CORE + "ResourceQuotaSpec"),
                              3: ("status", "", _CORE + "ResourceQuotaStatus")},
    _CORE + "ResourceQuotaSpec": {1: ("hard", "map", "string", _QUANTITY), 2: ("scopes", "repeated", "string"),
                                  3: ("scopeSelector", "", _CORE + "ScopeSelector")},
    _CORE + "ResourceQuotaStatus": {1: ("hard", "map", "string", _QUANTITY), 2: ("used", "map", "string", _QUANTITY)},
    _CORE + "ScopeSelector": {1: ("matchExpressions", "repeated", _CORE + "ScopedResourceSelectorRequirement")},
    _CORE + "ScopedResourceSelectorRequirement": {1: ("scopeName", "", "string"), 2: ("operator", "", "string"),
                                                  3: ("values", "repeated", "string")},
}
