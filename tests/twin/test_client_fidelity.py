"""The official Python client's typed calls against the twin: every answer decodes into its
model (the client's pydantic models reject a ``Status`` where an object is declared) and error
``Status`` bodies read as the real server writes them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import utils
from kubernetes.client.rest import ApiException

NS = "shop"


def _service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {"name": name}},
            "spec": {"ports": [{"name": "port", "port": 80, "protocol": "TCP", "targetPort": 80}],
                     "selector": {"name": name}}}


def test_service_calls_answer_complete_services(twin: Any) -> None:
    v1 = k8s.CoreV1Api(twin.operator_client())  # the policy keeps the agent from deleting Services
    created = v1.create_namespaced_service(NS, _service("front"))
    assert created.metadata.name == "front" and created.status is not None
    assert created.spec.cluster_ip and created.spec.cluster_ip == created.spec.cluster_ips[0]
    replaced = v1.replace_namespaced_service("front", NS, created)
    assert replaced.spec.cluster_ip == created.spec.cluster_ip
    patched = v1.patch_namespaced_service("front", NS, {"spec": {"ports": [
        {"name": "new", "port": 8080, "protocol": "TCP", "targetPort": 8080}]}})
    assert sorted(p.port for p in patched.spec.ports) == [80, 8080]  # ports merge by port
    # A Service's DELETE answers with the Service (ReturnDeletedObject), which the client decodes
    # as a V1Service; a Status there raised a pydantic ValidationError client-side.
    deleted = v1.delete_namespaced_service("front", NS, body={})
    assert isinstance(deleted, k8s.V1Service) and deleted.metadata.name == "front"
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_service("front", NS)
    assert err.value.status == 404


def test_create_from_yaml_reports_conflicts_in_the_real_servers_words(client: Any, tmp_path: Any) -> None:
    """``utils.create_from_yaml`` prints each failure's body verbatim; the real server's text has
    ``details`` (``name``, ``group``, ``kind``) before ``code``."""
    manifest = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "twice"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "twice"}},
                         "template": {"metadata": {"labels": {"app": "twice"}},
                                      "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}}
    path = tmp_path / "twice.yaml"
    path.write_text(json.dumps(manifest) + "\n---\n" + json.dumps(manifest))
    with pytest.raises(utils.FailToCreateError) as err:
        utils.create_from_yaml(client, str(path), namespace=NS)
    assert str(err.value) == (
        'Error from server (Conflict): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"deployments.apps \\"twice\\" already exists","reason":"AlreadyExists",'
        '"details":{"name":"twice","group":"apps","kind":"deployments"},"code":409}\n')


def test_typed_writes_of_every_kind_decode_into_complete_models(twin: Any) -> None:
    """create, replace and patch of each served kind through its typed call: every answer passes
    the client's model validation (a missing required field or a Status raises client-side)."""
    api_client = twin.operator_client()
    core, apps = k8s.CoreV1Api(api_client), k8s.AppsV1Api(api_client)
    rbac, reg = k8s.RbacAuthorizationV1Api(api_client), k8s.ApiregistrationV1Api(api_client)
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}
    workload = {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": template}
    cases: list[tuple[Any, ...]] = [
        (core.create_namespaced_config_map, core.replace_namespaced_config_map, core.patch_namespaced_config_map,
         {"metadata": {"name": "x"}, "data": {"a": "1"}}),
        (core.create_namespaced_secret, core.replace_namespaced_secret, core.patch_namespaced_secret,
         {"metadata": {"name": "x"}, "stringData": {"a": "1"}}),
        (core.create_namespaced_pod, core.replace_namespaced_pod, core.patch_namespaced_pod,
         {"metadata": {"name": "x", "labels": {"app": "x"}}, "spec": template["spec"]}),
        (core.create_namespaced_replication_controller, core.replace_namespaced_replication_controller,
         core.patch_namespaced_replication_controller,
         {"metadata": {"name": "x"}, "spec": {"replicas": 1, "selector": {"app": "x"}, "template": template}}),
        (apps.create_namespaced_deployment, apps.replace_namespaced_deployment, apps.patch_namespaced_deployment,
         {"metadata": {"name": "x"}, "spec": workload}),
        (apps.create_namespaced_replica_set, apps.replace_namespaced_replica_set, apps.patch_namespaced_replica_set,
         {"metadata": {"name": "x"}, "spec": workload}),
        (rbac.create_namespaced_role, rbac.replace_namespaced_role, rbac.patch_namespaced_role,
         {"metadata": {"name": "x"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        (rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding,
         rbac.patch_namespaced_role_binding,
         {"metadata": {"name": "x"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                 "name": "x"}}),
    ]
    for create, replace, patch, body in cases:
        created = create(NS, body)
        assert created.metadata.name == "x" and created.metadata.uid, create.__name__
        replaced = replace("x", NS, created)
        assert replaced.metadata.resource_version, replace.__name__
        patched = patch("x", NS, {"metadata": {"labels": {"patched": "yes"}}})
        assert patched.metadata.labels["patched"] == "yes", patch.__name__
    ns = core.create_namespace({"metadata": {"name": "typed"}})
    assert core.replace_namespace("typed", ns).status.phase == "Active"
    assert core.patch_node("node-a1", {"metadata": {"labels": {"x": "y"}}}).status.node_info.kubelet_version
    role = rbac.create_cluster_role({"metadata": {"name": "x"}, "rules": []})
    assert rbac.replace_cluster_role("x", role).metadata.name == "x"
    binding = rbac.create_cluster_role_binding({"metadata": {"name": "x"}, "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "x"}})
    assert rbac.patch_cluster_role_binding("x", {"metadata": {"labels": {"a": "b"}}}).role_ref.name == "x"
    assert binding.subjects is None
    svc = reg.create_api_service({"metadata": {"name": "v1.x.io"}, "spec": {
        "group": "x.io", "version": "v1", "groupPriorityMinimum": 1, "versionPriority": 1}})
    assert reg.replace_api_service("v1.x.io", svc).spec.group == "x.io"
    assert reg.patch_api_service("v1.x.io", {"metadata": {"labels": {"a": "b"}}}).metadata.labels == {"a": "b"}
