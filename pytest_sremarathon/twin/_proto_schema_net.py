"""Protobuf field tables for the network and admission kinds clients send as protobuf
(``kubectl create quota``, ``kubectl create ingress``) and for the identity review ``kubectl auth
whoami`` POSTs, in :mod:`._proto_schema`'s format, transcribed from
``k8s.io/api/{core,networking,authentication}/v1/generated.proto``. Kept apart from the generated file, which
``tools/gen_proto_schema.py`` rewrites whole."""

_META = "k8s.io.apimachinery.pkg.apis.meta.v1."
_QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
_CORE = "k8s.io.api.core.v1."
_NET = "k8s.io.api.networking.v1."
_AUTHN = "k8s.io.api.authentication.v1."

MESSAGES: dict[str, dict[int, tuple]] = {
    _CORE + "ResourceQuota": {1: ("metadata", "", _META + "ObjectMeta"), 2: ("spec", "", _CORE + "ResourceQuotaSpec"),
                              3: ("status", "", _CORE + "ResourceQuotaStatus")},
    _CORE + "ResourceQuotaSpec": {1: ("hard", "map", "string", _QUANTITY), 2: ("scopes", "repeated", "string"),
                                  3: ("scopeSelector", "", _CORE + "ScopeSelector")},
    _CORE + "ResourceQuotaStatus": {1: ("hard", "map", "string", _QUANTITY), 2: ("used", "map", "string", _QUANTITY)},
    _CORE + "ScopeSelector": {1: ("matchExpressions", "repeated", _CORE + "ScopedResourceSelectorRequirement")},
    _CORE + "ScopedResourceSelectorRequirement": {1: ("scopeName", "", "string"), 2: ("operator", "", "string"),
                                                  3: ("values", "repeated", "string")},
    _NET + "Ingress": {1: ("metadata", "", _META + "ObjectMeta"), 2: ("spec", "", _NET + "IngressSpec"),
                       3: ("status", "", _NET + "IngressStatus")},
    _NET + "IngressSpec": {1: ("defaultBackend", "", _NET + "IngressBackend"), 2: ("tls", "repeated", _NET + "IngressTLS"),
                           3: ("rules", "repeated", _NET + "IngressRule"), 4: ("ingressClassName", "", "string")},
    _NET + "IngressBackend": {3: ("resource", "", _CORE + "TypedLocalObjectReference"),
                              4: ("service", "", _NET + "IngressServiceBackend")},
    _NET + "IngressServiceBackend": {1: ("name", "", "string"), 2: ("port", "", _NET + "ServiceBackendPort")},
    _NET + "ServiceBackendPort": {1: ("name", "", "string"), 2: ("number", "", "int32")},
    _NET + "IngressRule": {1: ("host", "", "string"), 2: ("ingressRuleValue", "inline", _NET + "IngressRuleValue")},
    _NET + "IngressRuleValue": {1: ("http", "", _NET + "HTTPIngressRuleValue")},
    _NET + "HTTPIngressRuleValue": {1: ("paths", "repeated", _NET + "HTTPIngressPath")},
    _NET + "HTTPIngressPath": {1: ("path", "", "string"), 2: ("backend", "", _NET + "IngressBackend"),
                               3: ("pathType", "", "string")},
    _NET + "IngressTLS": {1: ("hosts", "repeated", "string"), 2: ("secretName", "", "string")},
    _NET + "IngressStatus": {},
    _AUTHN + "SelfSubjectReview": {1: ("metadata", "", _META + "ObjectMeta"),
                                   2: ("status", "", _AUTHN + "SelfSubjectReviewStatus")},
    _AUTHN + "SelfSubjectReviewStatus": {1: ("userInfo", "", _AUTHN + "UserInfo")},
    _AUTHN + "UserInfo": {1: ("username", "", "string"), 2: ("uid", "", "string"), 3: ("groups", "repeated", "string"),
                          4: ("extra", "map", "string", _AUTHN + "ExtraValue")},
    _AUTHN + "ExtraValue": {1: ("items", "repeated", "string")},
}
