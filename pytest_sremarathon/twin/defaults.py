"""What the real API server fills in and refuses on every write.

:func:`apply_defaults` sets the defaults the real server's defaulting functions set (deployment
strategy RollingUpdate 25%/25%, revisionHistoryLimit 10, progressDeadlineSeconds 600, pod
restartPolicy/dnsPolicy/schedulerName/terminationGracePeriodSeconds, container
terminationMessagePath/Policy and imagePullPolicy, Service type/sessionAffinity/ports, …) so
that client models and ``kubectl rollout`` see what they expect. :func:`validate` raises a
422 ``Invalid`` :class:`ApiError` with ``details.causes`` for the required fields, bad names,
label/selector mismatches and immutable fields. Both mutate/inspect plain dicts in place and
are usable by controllers as well as by the API server.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any, Optional

from ..k8s.quantity import memory_bytes
from ..k8s.selectors import match_selector_object
from ..k8s.store import BY_KIND, ApiError
from .autoscaler import default_hpa
from .priority import default_class, validate_class

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

#: kinds whose ``status`` is only writable through the ``/status`` subresource
STATUS_SUBRESOURCE = frozenset({"Pod", "Deployment", "ReplicaSet", "Node", "Namespace", "Service",
                                "ReplicationController", "APIService", "HorizontalPodAutoscaler",
                                "PodDisruptionBudget", "StatefulSet", "PersistentVolumeClaim", "PersistentVolume",
                                "DaemonSet", "Job", "CronJob"})


# -- defaulting --------------------------------------------------------------------------------

def _image_pull_policy(image: str) -> str:
    last = (image or "").rsplit("/", 1)[-1]
    if "@" in last:
        return "IfNotPresent"
    tag = last.split(":", 1)[1] if ":" in last else ""
    return "Always" if tag in ("", "latest") else "IfNotPresent"


def _default_container(c: dict[str, Any]) -> None:
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", _image_pull_policy(c.get("image", "")))
    c.setdefault("resources", {})
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")
    for env in c.get("env") or []:
        ref = (env.get("valueFrom") or {}).get("fieldRef")
        if ref is not None:
            ref.setdefault("apiVersion", "v1")
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = c.get(probe_name)
        if isinstance(probe, dict):
            probe.setdefault("timeoutSeconds", 1)
            probe.setdefault("periodSeconds", 10)
            probe.setdefault("successThreshold", 1)
            probe.setdefault("failureThreshold", 3)
            http = probe.get("httpGet")
            if isinstance(http, dict):
                http.setdefault("path", "/")
                http.setdefault("scheme", "HTTP")


def default_pod_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(c, dict):
            _default_container(c)
    for v in spec.get("volumes") or []:
        if isinstance(v, dict):
            if "configMap" in v and isinstance(v["configMap"], dict):
                v["configMap"].setdefault("defaultMode", 420)
            if "secret" in v and isinstance(v["secret"], dict):
                v["secret"].setdefault("defaultMode", 420)
            if not any(k for k in v if k != "name"):
                v["emptyDir"] = {}


def _default_pod(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    default_pod_spec(spec)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
    spec.setdefault("serviceAccountName", spec.get("serviceAccount", "default"))
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations if isinstance(t, dict)):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})


def _default_template(spec: dict[str, Any]) -> None:
    template = spec.get("template")
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        if isinstance(template.get("spec"), dict):
            default_pod_spec(template["spec"])


def _default_deployment(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _default_template(spec)


def _default_replicaset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _default_template(spec)


def _default_replication_controller(obj: dict[str, Any]) -> None:
    """The real defaulter: one replica; selector and labels from the template's labels."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    template = spec.get("template")
    labels = ((template or {}).get("metadata") or {}).get("labels") or {}
    if labels and not spec.get("selector"):
        spec["selector"] = dict(labels)
    md = obj.setdefault("metadata", {})
    if labels and not md.get("labels"):
        md["labels"] = dict(labels)
    if isinstance(template, dict):
        _default_template(spec)


def _default_service(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if "port" in p:
                p.setdefault("targetPort", p["port"])
    if spec.get("type") != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")


def _default_namespace(obj: dict[str, Any]) -> None:
    md = obj.setdefault("metadata", {})
    if md.get("name"):
        md.setdefault("labels", {})
        if md["labels"] is None:
            md["labels"] = {}
        md["labels"]["kubernetes.io/metadata.name"] = md["name"]
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])


def _default_endpoints(obj: dict[str, Any]) -> None:
    for subset in obj.get("subsets") or []:
        for p in subset.get("ports") or []:
            p.setdefault("protocol", "TCP")


def _default_secret(obj: dict[str, Any]) -> None:
    obj.setdefault("type", "Opaque")


_DEFAULTERS = {
    "Pod": _default_pod, "Deployment": _default_deployment, "ReplicaSet": _default_replicaset,
    "Service": _default_service, "Namespace": _default_namespace, "Endpoints": _default_endpoints,
    "Secret": _default_secret, "ReplicationController": _default_replication_controller,
    "HorizontalPodAutoscaler": default_hpa, "PriorityClass": default_class,
}


def apply_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    fn = _DEFAULTERS.get(obj.get("kind", "")) or _BATCH_DEFAULTERS.get(obj.get("kind", ""))
    if fn:
        fn(obj)
    return obj


def initial_status(obj: dict[str, Any]) -> None:
    """The status a freshly created object starts with (the client's status is ignored)."""
    kind = obj.get("kind")
    if kind == "Pod":
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj.get("spec") or {})}
    elif kind == "Deployment":
        obj["status"] = {}
    elif kind in ("ReplicaSet", "ReplicationController"):
        obj["status"] = {"replicas": 0}  # not omitempty in Go: typed clients require it
    elif kind == "APIService":
        obj["status"] = {}
    elif kind == "HorizontalPodAutoscaler":  # desiredReplicas is required (not omitempty)
        obj["status"] = {"currentReplicas": 0, "desiredReplicas": 0}
    elif kind == "PodDisruptionBudget":  # the four counts are required
        obj["status"] = {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0,
                         "observedGeneration": 0}
    elif kind in _BATCH_STATUS:
        obj["status"] = copy.deepcopy(_BATCH_STATUS[kind])
    elif kind == "Namespace":
        obj["status"] = {"phase": "Active"}
    elif kind == "Service":
        obj["status"] = {"loadBalancer": {}}
    elif kind in _INITIAL_STATUS:
        obj["status"] = copy.deepcopy(_INITIAL_STATUS[kind])


def qos_class(spec: dict[str, Any]) -> str:
    requests_set, guaranteed = False, True
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            requests_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and req[r] != lim[r]):
                guaranteed = False
    if not requests_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


# -- validation --------------------------------------------------------------------------------

class _Errors:
    def __init__(self) -> None:
        self.causes: list[dict[str, str]] = []
        self.texts: list[str] = []

    def required(self, field: str) -> None:
        self.causes.append({"reason": "FieldValueRequired", "message": "Required value", "field": field})
        self.texts.append(f"{field}: Required value")

    def invalid(self, field: str, value: Any, detail: str) -> None:
        msg = f"Invalid value: {_go_repr(value)}: {detail}"
        self.causes.append({"reason": "FieldValueInvalid", "message": msg, "field": field})
        self.texts.append(f"{field}: {msg}")

    def forbidden(self, field: str, detail: str) -> None:
        self.causes.append({"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field})
        self.texts.append(f"{field}: Forbidden: {detail}")

    def unsupported(self, field: str, value: Any, allowed: list[str]) -> None:
        supported = ", ".join(f'"{a}"' for a in allowed)
        msg = f"Unsupported value: {_go_repr(value)}: supported values: {supported}"
        self.causes.append({"reason": "FieldValueNotSupported", "message": msg, "field": field})
        self.texts.append(f"{field}: {msg}")

    def raise_for(self, kind: str, name: str) -> None:
        if not self.causes:
            return
        rt = BY_KIND.get(kind)
        qualified = f"{kind}.{rt.group}" if rt and rt.group else kind
        body = self.texts[0] if len(self.texts) == 1 else "[" + ", ".join(self.texts) + "]"
        raise ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {body}', kind=kind, name=name,
                       causes=self.causes)


def _go_repr(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, dict):
        inner = ", ".join(f'"{k}":"{v}"' for k, v in value.items())
        return "map[string]string{" + inner + "}"
    if value is None:
        return "null"
    return str(value)


def _check_name(errs: _Errors, field: str, name: Any, pattern: re.Pattern, what: str, max_len: int = 253) -> None:
    if not isinstance(name, str) or not name:
        errs.required(field)
    elif len(name) > max_len or not pattern.match(name):
        errs.invalid(field, name, f"a lowercase RFC 1123 {what} must consist of lower case alphanumeric characters, "
                                  f"'-' or '.', and must start and end with an alphanumeric character")


def _validate_containers(errs: _Errors, containers: Any, field: str, required: bool = True) -> None:
    if not containers:
        if required:
            errs.required(field)
        return
    if not isinstance(containers, list):
        errs.invalid(field, "object", "must be a list of containers")
        return
    seen = set()
    for i, c in enumerate(containers):
        f = f"{field}[{i}]"
        if not isinstance(c, dict):
            errs.invalid(f, c, "must be an object")
            continue
        name = c.get("name")
        if not name:
            errs.required(f"{f}.name")
        elif not _DNS1123_LABEL.match(str(name)):
            errs.invalid(f"{f}.name", name, "a lowercase RFC 1123 label must consist of lower case alphanumeric "
                                            "characters or '-', and must start and end with an alphanumeric character")
        elif name in seen:
            errs.causes.append({"reason": "FieldValueDuplicate", "message": f'Duplicate value: "{name}"',
                                "field": f"{f}.name"})
            errs.texts.append(f'{f}.name: Duplicate value: "{name}"')
        seen.add(name)
        if not c.get("image"):
            errs.required(f"{f}.image")
        ipp = c.get("imagePullPolicy")
        if ipp is not None and ipp not in ("Always", "IfNotPresent", "Never"):
            errs.unsupported(f"{f}.imagePullPolicy", ipp, ["Always", "IfNotPresent", "Never"])


def _validate_pod_spec(errs: _Errors, spec: Any, field: str) -> None:
    if not isinstance(spec, dict):
        errs.required(f"{field}.containers")
        return
    _validate_containers(errs, spec.get("containers"), f"{field}.containers")
    _validate_containers(errs, spec.get("initContainers"), f"{field}.initContainers", required=False)
    rp = spec.get("restartPolicy")
    if rp is not None and rp not in ("Always", "OnFailure", "Never"):
        errs.unsupported(f"{field}.restartPolicy", rp, ["Always", "OnFailure", "Never"])


def _validate_replication_controller(errs: _Errors, obj: dict[str, Any]) -> None:
    """A ReplicationController's selector is a plain map that its template's labels must carry."""
    sent = obj.get("spec")
    spec: dict[str, Any] = sent if isinstance(sent, dict) else {}
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0):
        errs.invalid("spec.replicas", replicas, "must be greater than or equal to 0")
    selector = spec.get("selector") or {}
    if not selector:
        errs.required("spec.selector")
    template = spec.get("template")
    if not isinstance(template, dict):
        errs.required("spec.template")
        return
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector and any(labels.get(k) != v for k, v in selector.items()):
        errs.invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`")
    _validate_pod_spec(errs, template.get("spec"), "spec.template.spec")


def _validate_workload(errs: _Errors, obj: dict[str, Any], old: Optional[dict[str, Any]]) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        errs.required("spec.selector")
        errs.required("spec.template.spec.containers")
        return
    replicas = spec.get("replicas")
    if replicas is not None and (not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0):
        errs.invalid("spec.replicas", replicas, "must be greater than or equal to 0")
    selector = spec.get("selector")
    if not selector:
        errs.required("spec.selector")
    elif not (selector.get("matchLabels") or selector.get("matchExpressions")):
        errs.invalid("spec.selector", "v1.LabelSelector{MatchLabels:map[string]string(nil)}",
                     "empty selector is invalid for deployment")
    template = spec.get("template")
    if not isinstance(template, dict):
        errs.required("spec.template.spec.containers")
        return
    labels = (template.get("metadata") or {}).get("labels") or {}
    if selector and (selector.get("matchLabels") or selector.get("matchExpressions")) and \
            not match_selector_object(selector, labels):
        errs.invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`")
    _validate_pod_spec(errs, template.get("spec"), "spec.template.spec")
    rp = (template.get("spec") or {}).get("restartPolicy")
    if rp not in (None, "Always"):
        errs.unsupported("spec.template.spec.restartPolicy", rp, ["Always"])
    if obj.get("kind") == "Deployment":
        strategy = (spec.get("strategy") or {}).get("type")
        if strategy not in (None, "RollingUpdate", "Recreate"):
            errs.unsupported("spec.strategy.type", strategy, ["Recreate", "RollingUpdate"])
    if old is not None and old.get("spec", {}).get("selector") != selector and selector:
        errs.invalid("spec.selector", selector, "field is immutable")


_POD_MUTABLE = ("`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                "`spec.tolerations` (only additions to existing tolerations),"
                "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")


def _pod_spec_comparable(spec: dict[str, Any]) -> dict[str, Any]:
    s = {k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds", "tolerations",
                                                      "terminationGracePeriodSeconds")}
    for field in ("containers", "initContainers"):
        if isinstance(s.get(field), list):
            s[field] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                        for c in s[field]]
    return s


def validate(obj: dict[str, Any], old: Optional[dict[str, Any]] = None) -> None:
    """Raise 422 Invalid if ``obj`` (being created, or replacing ``old``) is not acceptable."""
    kind = obj.get("kind", "")
    md = obj.get("metadata") or {}
    name = md.get("name") or md.get("generateName") or ""
    errs = _Errors()
    if not md.get("name") and not md.get("generateName"):
        errs.required("metadata.name")
    elif md.get("name"):
        if kind == "Namespace":
            _check_name(errs, "metadata.name", md["name"], _DNS1123_LABEL, "label", 63)
        elif kind == "Service":
            if not _DNS1035_LABEL.match(md["name"]) or len(md["name"]) > 63:
                errs.invalid("metadata.name", md["name"], "a DNS-1035 label must consist of lower case alphanumeric "
                                                          "characters or '-', start with an alphabetic character, "
                                                          "and end with an alphanumeric character")
        else:
            _check_name(errs, "metadata.name", md["name"], _DNS1123_SUBDOMAIN, "subdomain")
    old_md = (old or {}).get("metadata") or {}
    if old_md.get("deletionTimestamp"):
        added = [f for f in md.get("finalizers") or [] if f not in (old_md.get("finalizers") or [])]
        if added:
            errs.forbidden("metadata.finalizers", "no new finalizers can be added if the object is being deleted, "
                                                  f"found new finalizers []string{{{', '.join(_go_repr(f) for f in added)}}}")
    for field in ("labels", "annotations"):
        value = md.get(field)
        if value is not None and not isinstance(value, dict):
            errs.invalid(f"metadata.{field}", value, "must be a map of strings")
        elif isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(v, str):
                    errs.invalid(f"metadata.{field}", v, f"value of {k!r} must be a string")
    if kind == "Pod":
        _validate_pod_spec(errs, obj.get("spec"), "spec")
        if old is not None and isinstance(obj.get("spec"), dict) and isinstance(old.get("spec"), dict):
            # compare defaulted copies: objects made by controllers need not carry every default
            new_spec = apply_defaults(copy.deepcopy({"kind": "Pod", "spec": obj["spec"]}))["spec"]
            old_spec = apply_defaults(copy.deepcopy({"kind": "Pod", "spec": old["spec"]}))["spec"]
            if _pod_spec_comparable(new_spec) != _pod_spec_comparable(old_spec):
                errs.forbidden("spec", f"pod updates may not change fields other than {_POD_MUTABLE}")
    elif kind in ("Deployment", "ReplicaSet"):
        _validate_workload(errs, obj, old)
    elif kind == "Service":
        spec = obj.get("spec") or {}
        stype = spec.get("type", "ClusterIP")
        if stype not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
            errs.unsupported("spec.type", stype, ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"])
        if stype != "ExternalName" and not spec.get("ports") and spec.get("clusterIP") != "None":
            errs.required("spec.ports")
        for i, p in enumerate(spec.get("ports") or []):
            if not isinstance(p, dict) or not isinstance(p.get("port"), int):
                errs.required(f"spec.ports[{i}].port")
        if old is not None:
            old_ip = (old.get("spec") or {}).get("clusterIP")
            if old_ip and spec.get("clusterIP") and spec.get("clusterIP") != old_ip:
                errs.invalid("spec.clusterIPs[0]", spec.get("clusterIP"), "may not change once set")
    elif kind == "ReplicationController":
        _validate_replication_controller(errs, obj)
    elif kind in ("RoleBinding", "ClusterRoleBinding"):
        ref = obj.get("roleRef")
        if not isinstance(ref, dict) or not ref.get("name"):
            errs.required("roleRef.name")
        elif ref.get("kind") not in ("Role", "ClusterRole") or (kind == "ClusterRoleBinding" and ref["kind"] != "ClusterRole"):
            errs.unsupported("roleRef.kind", ref.get("kind"), ["ClusterRole"] if kind == "ClusterRoleBinding"
                             else ["ClusterRole", "Role"])
        elif old is not None and old.get("roleRef") != ref:
            errs.invalid("roleRef", ref, "cannot change roleRef")
    elif kind in ("Role", "ClusterRole"):
        for i, rule in enumerate(obj.get("rules") or []):
            if not isinstance(rule, dict) or not rule.get("verbs"):
                errs.required(f"rules[{i}].verbs")
    elif kind == "ConfigMap":
        for field in ("data",):
            for k, v in (obj.get(field) or {}).items():
                if not isinstance(v, str):
                    errs.invalid(f"{field}[{k}]", v, "must be a string")
    elif kind == "Event":
        if not obj.get("involvedObject"):
            errs.required("involvedObject")
    elif kind == "HorizontalPodAutoscaler":
        _validate_hpa(errs, obj.get("spec") or {})
    elif kind == "PodDisruptionBudget":
        spec = obj.get("spec") or {}
        if "minAvailable" in spec and "maxUnavailable" in spec:
            errs.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set")
    elif kind == "PriorityClass":
        validate_class(obj)
    elif kind in _VALIDATORS:
        _VALIDATORS[kind](errs, obj, old)
    elif kind in ("DaemonSet", "Job", "CronJob"):
        _validate_batch(errs, obj, old)
    errs.raise_for(kind, name)


def _validate_hpa(errs: _Errors, spec: dict[str, Any]) -> None:
    ref = spec.get("scaleTargetRef") or {}
    if not ref.get("kind"):
        errs.required("spec.scaleTargetRef.kind")
    if not ref.get("name"):
        errs.required("spec.scaleTargetRef.name")
    hi, lo = spec.get("maxReplicas"), spec.get("minReplicas", 1)
    if not isinstance(hi, int) or hi < 1:
        errs.invalid("spec.maxReplicas", hi, "must be greater than 0")
    elif isinstance(lo, int) and lo > hi:
        errs.invalid("spec.maxReplicas", hi, "must be greater than or equal to `minReplicas`")
    if isinstance(lo, int) and lo < 1:
        errs.invalid("spec.minReplicas", lo, "must be greater than or equal to 1")


# -- stateful workloads and storage (twin/statefulsets.py, twin/volumes.py) -----------------------

def _default_statefulset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    for tmpl in spec.get("volumeClaimTemplates") or []:
        if isinstance(tmpl, dict):
            tmpl.setdefault("apiVersion", "v1")
            tmpl.setdefault("kind", "PersistentVolumeClaim")
            _default_claim_spec(tmpl.setdefault("spec", {}))
            tmpl.setdefault("status", {"phase": "Pending"})
    _default_template(spec)


def _default_claim_spec(spec: dict[str, Any]) -> None:
    spec.setdefault("volumeMode", "Filesystem")


def _default_pvc(obj: dict[str, Any]) -> None:
    _default_claim_spec(obj.setdefault("spec", {}))


def _default_pv(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
    spec.setdefault("volumeMode", "Filesystem")


def _default_storage_class(obj: dict[str, Any]) -> None:
    obj.setdefault("reclaimPolicy", "Delete")
    obj.setdefault("volumeBindingMode", "Immediate")


_DEFAULTERS.update({"StatefulSet": _default_statefulset, "PersistentVolumeClaim": _default_pvc,
                    "PersistentVolume": _default_pv, "StorageClass": _default_storage_class})
_INITIAL_STATUS: dict[str, dict[str, Any]] = {
    "StatefulSet": {"replicas": 0, "availableReplicas": 0},
    "PersistentVolumeClaim": {"phase": "Pending"},
    "PersistentVolume": {"phase": "Pending"},
}
#: The fields of a StatefulSet's spec an update may change (the real validation's list).
_STS_MUTABLE = ("replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy",
                "minReadySeconds")


def _validate_statefulset(errs: _Errors, obj: dict[str, Any], old: Optional[dict[str, Any]]) -> None:
    _validate_workload(errs, obj, old)
    spec = obj.get("spec") or {}
    if not spec.get("selector"):
        errs.required("spec.selector")
    policy = spec.get("podManagementPolicy")
    if policy not in (None, "OrderedReady", "Parallel"):
        errs.unsupported("spec.podManagementPolicy", policy, ["OrderedReady", "Parallel"])
    if old is None:
        return
    before = old.get("spec") or {}
    if any(spec.get(k) != before.get(k) for k in set(spec) | set(before) if k not in _STS_MUTABLE):
        errs.forbidden("spec", "updates to statefulset spec for fields other than 'replicas', 'ordinals', "
                               "'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and "
                               "'minReadySeconds' are forbidden")


def _claim_storage(obj: Optional[dict[str, Any]]) -> Any:
    return ((((obj or {}).get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage")


def _validate_pvc(errs: _Errors, obj: dict[str, Any], old: Optional[dict[str, Any]]) -> None:
    spec = obj.get("spec") or {}
    if not spec.get("accessModes"):
        errs.required("spec.accessModes")
    if _claim_storage(obj) is None:
        errs.required("spec.resources[storage]")
    if old is None:
        return
    before = old.get("spec") or {}

    def comparable(s: dict[str, Any]) -> dict[str, Any]:
        # a claim's class may be set once (retroactively, by the default class); its size may grow
        out = {k: v for k, v in s.items() if k not in ("resources", "volumeAttributesClassName")}
        if before.get("storageClassName") is None:
            out.pop("storageClassName", None)
        if not before.get("volumeName"):
            out.pop("volumeName", None)
        return out

    if comparable(spec) != comparable(before):
        errs.forbidden("spec", "spec is immutable after creation except resources.requests and "
                               "volumeAttributesClassName for bound claims")
    new_size, old_size = _claim_storage(obj), _claim_storage(old)
    if new_size is not None and old_size is not None and memory_bytes(str(new_size)) < memory_bytes(str(old_size)):
        errs.forbidden("spec.resources.requests.storage", "field can not be less than status.capacity")


_VALIDATORS: dict[str, Callable[[_Errors, dict[str, Any], Optional[dict[str, Any]]], None]] = {
    "StatefulSet": _validate_statefulset, "PersistentVolumeClaim": _validate_pvc,
}


# -- DaemonSet, Job, CronJob (the real defaulters and the checks clients meet) ----------------

def _default_daemonset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    strategy = spec.setdefault("updateStrategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = strategy.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", 1)
        ru.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    _default_template(spec)


def _default_job_spec(spec: dict[str, Any]) -> None:
    # Neither completions nor parallelism set: one pod to one success (the real defaulter).
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    _default_template(spec)


def _default_job(obj: dict[str, Any]) -> None:
    _default_job_spec(obj.setdefault("spec", {}))


def _default_cronjob(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    template = spec.get("jobTemplate")
    if isinstance(template, dict):
        template.setdefault("metadata", {})
        if isinstance(template.get("spec"), dict):
            # The API server defaults a CronJob's job template as the pod template of a Job
            # (completions and parallelism stay as written: a Job made from it is defaulted then).
            _default_template(template["spec"])


_BATCH_DEFAULTERS = {"DaemonSet": _default_daemonset, "Job": _default_job, "CronJob": _default_cronjob}
#: Status fields the typed clients require (not omitempty in Go).
_BATCH_STATUS: dict[str, dict[str, Any]] = {
    "DaemonSet": {"currentNumberScheduled": 0, "desiredNumberScheduled": 0, "numberMisscheduled": 0,
                  "numberReady": 0},
    "Job": {},
    "CronJob": {},
}


def _validate_batch(errs: _Errors, obj: dict[str, Any], old: Optional[dict[str, Any]]) -> None:
    from .cron import CronError, parse_schedule, zone  # noqa: PLC0415 (a leaf module; only on these writes)
    kind = obj.get("kind")
    sent = obj.get("spec")
    spec: dict[str, Any] = sent if isinstance(sent, dict) else {}
    if kind == "CronJob":
        schedule = spec.get("schedule")
        if not schedule:
            errs.required("spec.schedule")
        else:
            try:
                parse_schedule(str(schedule))
            except CronError as e:
                errs.invalid("spec.schedule", schedule, str(e))
        if spec.get("timeZone") is not None and zone(str(spec["timeZone"])) is None:
            errs.invalid("spec.timeZone", spec["timeZone"], "unknown time zone " + str(spec["timeZone"]))
        policy = spec.get("concurrencyPolicy")
        if policy not in (None, "Allow", "Forbid", "Replace"):
            errs.unsupported("spec.concurrencyPolicy", policy, ["Allow", "Forbid", "Replace"])
        job = (spec.get("jobTemplate") or {}).get("spec")
        if not isinstance(job, dict):
            errs.required("spec.jobTemplate.spec.template.spec.containers")
            return
        spec, prefix = job, "spec.jobTemplate.spec"
    else:
        prefix = "spec"
    template = spec.get("template")
    if not isinstance(template, dict):
        errs.required(f"{prefix}.template.spec.containers")
        return
    _validate_pod_spec(errs, template.get("spec"), f"{prefix}.template.spec")
    rp = (template.get("spec") or {}).get("restartPolicy")
    if kind == "DaemonSet":
        selector = spec.get("selector")
        labels = (template.get("metadata") or {}).get("labels") or {}
        if not selector:
            errs.required("spec.selector")
        elif not match_selector_object(selector, labels):
            errs.invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`")
        if rp not in (None, "Always"):
            errs.unsupported("spec.template.spec.restartPolicy", rp, ["Always"])
        if old is not None and selector and (old.get("spec") or {}).get("selector") != selector:
            errs.invalid("spec.selector", selector, "field is immutable")
    elif rp not in ("OnFailure", "Never"):
        errs.unsupported(f"{prefix}.template.spec.restartPolicy", rp or "Always", ["OnFailure", "Never"])
    for field in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished", "parallelism", "completions"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            errs.invalid(f"{prefix}.{field}", value, "must be greater than or equal to 0")
    if kind == "Job" and old is not None and isinstance(old.get("spec"), dict):
        if old["spec"].get("template") != spec.get("template") and not old["spec"].get("suspend"):
            errs.invalid("spec.template", "core.PodTemplateSpec{...}", "field is immutable")
        if old["spec"].get("completions") != spec.get("completions"):
            errs.invalid("spec.completions", spec.get("completions"), "field is immutable")
