"""ReplicationController, RBAC (Role, RoleBinding, ClusterRole, ClusterRoleBinding) and APIService
are served as a real API server serves them: discovery, CRUD (kubectl's typed clients POST RBAC
objects as protobuf), server-side tables, describe — and a ReplicationController keeps its
replicas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from support.admission import RecordingAdmission
from support.kubectl import Kubectl, kubectl_for
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.k8s.objects import pod_is_active
from pytest_sremarathon.scenario import load_scenario


def test_rbac_through_kubectl(kubectl: Kubectl) -> None:
    kubectl("create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods", "-n", "shop")
    kubectl("create", "rolebinding", "read-pods", "--role=pod-reader", "--user=jane",
            "--serviceaccount=shop:bot", "-n", "shop")
    kubectl("create", "clusterrole", "node-reader", "--verb=get,list", "--resource=nodes")
    kubectl("create", "clusterrolebinding", "read-nodes", "--clusterrole=node-reader", "--group=ops")
    rows = kubectl("get", "rolebindings", "-n", "shop", "-o", "wide").splitlines()
    assert rows[0].split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert rows[1].split()[:2] == ["read-pods", "Role/pod-reader"] and rows[1].split()[-1] == "shop/bot"
    assert kubectl("get", "clusterroles").splitlines()[0].split() == ["NAME", "CREATED", "AT"]
    assert "ClusterRole/node-reader" in kubectl("get", "clusterrolebinding", "read-nodes")
    described = kubectl("describe", "role", "pod-reader", "-n", "shop")
    assert "pods" in described and "[get list watch]" in described
    resources = kubectl("api-resources", "--api-group=rbac.authorization.k8s.io", "-o", "name").split()
    assert resources == ["clusterrolebindings.rbac.authorization.k8s.io", "clusterroles.rbac.authorization.k8s.io",
                         "rolebindings.rbac.authorization.k8s.io", "roles.rbac.authorization.k8s.io"]
    bad = kubectl.run("create", "clusterrolebinding", "broken", "--clusterrole=", "--group=ops", check=False)
    assert bad.returncode != 0
    kubectl("delete", "role", "pod-reader", "-n", "shop")
    assert kubectl("get", "roles", "-n", "shop", "-o", "name").strip() == ""


def test_rbac_and_apiservices_through_the_python_client(twin: Any) -> None:
    api_client = twin.operator_client()
    rbac = k8s.RbacAuthorizationV1Api(api_client)
    role = rbac.create_namespaced_role("shop", {"metadata": {"name": "r"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})
    assert role.rules[0].resources == ["pods"] and role.metadata.uid
    patched = rbac.patch_namespaced_role("r", "shop", {"metadata": {"labels": {"team": "sre"}}})
    assert patched.metadata.labels == {"team": "sre"} and patched.rules[0].verbs == ["get"]
    binding = rbac.create_namespaced_role_binding("shop", {
        "metadata": {"name": "b"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "User", "name": "jane", "apiGroup": "rbac.authorization.k8s.io"}]})
    assert binding.role_ref.name == "r"
    binding.role_ref.name = "other"
    with pytest.raises(k8s.ApiException) as err:
        rbac.replace_namespaced_role_binding("b", "shop", binding)
    assert err.value.status == 422  # roleRef is immutable
    assert [r.metadata.name for r in rbac.list_role_binding_for_all_namespaces().items] == ["b"]
    reg = k8s.ApiregistrationV1Api(api_client)
    svc = reg.create_api_service({"metadata": {"name": "v1alpha1.wardle.k8s.io"}, "spec": {
        "group": "wardle.k8s.io", "version": "v1alpha1", "groupPriorityMinimum": 1000, "versionPriority": 15,
        "service": {"name": "api", "namespace": "wardle"}, "insecureSkipTLSVerify": True}})
    assert svc.spec.group == "wardle.k8s.io"
    assert reg.read_api_service("v1alpha1.wardle.k8s.io").spec.version == "v1alpha1"
    reg.delete_api_service("v1alpha1.wardle.k8s.io")
    assert reg.list_api_service().items == []


TOKEN = "kinds-agent-token"


@pytest.fixture
def sim(tmp_path: Path) -> Any:
    s = BackendTwin(load_scenario(DEFAULT_SCENARIO), tmp_path, admission=RecordingAdmission(),
                    tokens={TOKEN: "agent"})
    s.kubeconfig = s.backend.server.write_kubeconfig(tmp_path / "sim.kubeconfig", TOKEN)  # type: ignore[attr-defined]
    s.run(60)
    yield s
    s.close()


def _rc_pods(sim: BackendTwin) -> list[dict[str, Any]]:
    return [p for p in sim.store.list("Pod", "shop") if p["metadata"]["labels"].get("app") == "legacy"
            and pod_is_active(p)]


def test_a_replication_controller_keeps_its_replicas(sim: Any, tmp_path: Path) -> None:
    kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
    from kubernetes import config

    core = k8s.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig)))
    rc = core.create_namespaced_replication_controller("shop", {
        "apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"},
        "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "legacy"}},
                                             "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}})
    assert rc.spec.selector == {"app": "legacy"} and rc.metadata.labels == {"app": "legacy"}  # defaulted
    assert len(_rc_pods(sim)) == 2  # created at once, as the controller reacts to the write
    victim = _rc_pods(sim)[0]["metadata"]["name"]
    kc("delete", "pod", victim, "-n", "shop", "--wait=false")
    sim.run(60)
    pods = _rc_pods(sim)
    assert len(pods) == 2 and victim not in {p["metadata"]["name"] for p in pods}
    kc("scale", "rc", "legacy", "--replicas=3", "-n", "shop")
    assert len(_rc_pods(sim)) == 3
    rows = kc("get", "rc", "legacy", "-n", "shop", "-o", "wide").splitlines()
    assert rows[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert rows[1].split()[:3] == ["legacy", "3", "3"] and rows[1].split()[-1] == "app=legacy"
    assert "Replicas:     3 current / 3 desired" in kc("describe", "rc", "legacy", "-n", "shop")
    assert "replicationcontroller/legacy" in kc("get", "all", "-n", "shop", "-o", "name")
    core.delete_namespaced_replication_controller("legacy", "shop", propagation_policy="Background")
    assert _rc_pods(sim) == []
