"""Objects every Kubernetes cluster has from its first moment, which clients look for:

* the user-facing ClusterRoles (``cluster-admin``, ``admin``, ``edit``, ``view``) and the
  ``cluster-admin`` ClusterRoleBinding to ``system:masters``, labelled as the API server's RBAC
  bootstrap labels them (``kubectl get clusterroles``, ``kubectl describe clusterrole view``);
* an APIService per served group version (``kubectl get apiservices``), ``Available``, as SREs
  check when ``kubectl top`` fails: ``v1beta1.metrics.k8s.io`` too, which the twin's API server
  serves itself (a real cluster's metrics-server registers it with its Service), so every one
  is ``Local``.

The twin enforces no RBAC of its own (the policy point decides; ``twin/api_access.py``): these
roles describe, they do not grant. Their uids are derived from their names, so creating them
shifts no uid of the simulation's own objects.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from ..k8s.store import Store, iso
from .openapi import METRICS_GROUP, METRICS_VERSION, group_versions

_RBAC = "rbac.authorization.k8s.io/v1"
_BOOTSTRAP = {"labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
              "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}
_UIDS = uuid.UUID("0b1f6a4e-2f0c-4d55-9a3e-5c2f7d9e1a40")

_READ = ["get", "list", "watch"]
_WRITE = ["create", "delete", "deletecollection", "patch", "update"]
#: (API groups, resources) the aggregated ``view`` role reads; ``edit`` also writes them.
_WORKLOADS: tuple[tuple[list[str], list[str]], ...] = (
    ([""], ["configmaps", "endpoints", "persistentvolumeclaims", "pods", "pods/log", "pods/status",
            "replicationcontrollers", "resourcequotas", "serviceaccounts", "services", "events", "limitranges"]),
    (["apps"], ["controllerrevisions", "daemonsets", "deployments", "deployments/scale", "replicasets",
                "replicasets/scale", "statefulsets", "statefulsets/scale"]),
    (["autoscaling"], ["horizontalpodautoscalers"]),
    (["batch"], ["cronjobs", "jobs"]),
    (["policy"], ["poddisruptionbudgets"]),
    (["networking.k8s.io"], ["ingresses", "networkpolicies"]),
    (["discovery.k8s.io"], ["endpointslices"]),
)
#: Groups aggregated APIServices of a real cluster rank first (kube-aggregator's priorities).
_PRIORITY = {"": 18000, "apiregistration.k8s.io": 17900, "apps": 17800, "authentication.k8s.io": 17700,
             "authorization.k8s.io": 17600, "autoscaling": 17500, "batch": 17400, "networking.k8s.io": 17200,
             "policy": 17100, "rbac.authorization.k8s.io": 17000, "storage.k8s.io": 16800,
             "scheduling.k8s.io": 16600, "discovery.k8s.io": 16200}


def _uid(kind: str, name: str) -> str:
    return str(uuid.uuid5(_UIDS, f"{kind}/{name}"))


def _role(name: str, rules: list[dict[str, Any]], aggregate: bool) -> dict[str, Any]:
    labels = dict(_BOOTSTRAP["labels"])
    if aggregate:  # (what the aggregated roles carry so that a CRD's roles can join them)
        labels[f"rbac.authorization.k8s.io/aggregate-to-{'admin' if name == 'edit' else 'edit'}"] = "true"
    return {"apiVersion": _RBAC, "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels, "annotations": dict(_BOOTSTRAP["annotations"])},
            "rules": rules}


def cluster_roles() -> list[dict[str, Any]]:
    """The default user-facing ClusterRoles and the ``cluster-admin`` binding."""
    view = [{"apiGroups": groups, "resources": resources, "verbs": _READ} for groups, resources in _WORKLOADS]
    edit = [{"apiGroups": groups, "resources": resources, "verbs": _READ + _WRITE} for groups, resources in _WORKLOADS]
    edit += [{"apiGroups": [""], "resources": ["secrets"], "verbs": _READ + _WRITE},
             {"apiGroups": [""], "resources": ["pods/exec", "pods/attach", "pods/portforward", "pods/eviction"],
              "verbs": ["create", "get"]}]
    admin = edit + [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"],
                     "verbs": _READ + _WRITE},
                    {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"],
                     "verbs": ["create"]}]
    everything = [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                  {"nonResourceURLs": ["*"], "verbs": ["*"]}]
    binding = {"apiVersion": _RBAC, "kind": "ClusterRoleBinding",
               "metadata": {"name": "cluster-admin", **{k: dict(v) for k, v in _BOOTSTRAP.items()}},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]}
    return [_role("cluster-admin", everything, False), _role("admin", admin, False), _role("edit", edit, True),
            _role("view", view, True), binding]


def api_services(now: datetime) -> list[dict[str, Any]]:
    """An APIService per group version the API server serves, available."""
    out = []
    served = sorted({*group_versions(), (METRICS_GROUP, METRICS_VERSION)})
    for group, version in served:
        metrics = group == METRICS_GROUP
        spec: dict[str, Any] = {"version": version,
                                "groupPriorityMinimum": 100 if metrics else _PRIORITY.get(group, 16000),
                                "versionPriority": 100 if metrics else 15}
        if group:
            spec["group"] = group
        available = {"type": "Available", "status": "True", "lastTransitionTime": iso(now), "reason": "Local",
                     "message": "Local APIServices are always available"}
        out.append({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                    "metadata": {"name": f"{version}.{group}"}, "spec": spec, "status": {"conditions": [available]}})
    return out


def create_all(store: Store) -> None:
    """Store them (at the cluster's bootstrap)."""
    for obj in (*cluster_roles(), *api_services(store.clock())):
        store.create(obj, uid=_uid(obj["kind"], obj["metadata"]["name"]))
