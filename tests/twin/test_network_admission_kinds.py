"""EndpointSlice, ResourceQuota, LimitRange, NetworkPolicy, Ingress and IngressClass as a real
cluster serves them to ``kubectl`` and the official Python client: discovery, tables, describe,
and their controllers' and admission plugins' behaviour on the default scenario's twin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config
from support.admission import RecordingAdmission
from support.kubectl import kubectl_for
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.scenario import load_scenario

TOKEN = "net-kinds-agent-token"


@pytest.fixture
def sim(tmp_path: Path) -> Any:
    s = BackendTwin(load_scenario(DEFAULT_SCENARIO), tmp_path, admission=RecordingAdmission(),
                    tokens={TOKEN: "agent"})
    s.kubeconfig = s.backend.server.write_kubeconfig(tmp_path / "sim.kubeconfig", TOKEN)  # type: ignore[attr-defined]
    s.run(120)
    yield s
    s.close()


def _client(sim: Any) -> Any:
    return config.new_client_from_config(config_file=str(sim.kubeconfig))


def test_endpointslices_follow_endpoints_in_the_same_moment(sim: Any, tmp_path: Path) -> None:
    kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
    rows = kc("get", "endpointslices", "-n", "shop", "-l", "kubernetes.io/service-name=cart").splitlines()
    assert rows[0].split() == ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
    assert rows[1].split()[1:3] == ["IPv4", "8080"]
    disc = k8s.DiscoveryV1Api(_client(sim))
    (slice_,) = disc.list_namespaced_endpoint_slice("shop", label_selector="kubernetes.io/service-name=cart").items
    ep = k8s.CoreV1Api(_client(sim)).read_namespaced_endpoints("cart", "shop")
    ready_ips = sorted(a.ip for s in ep.subsets or [] for a in s.addresses or [])
    assert sorted(a for e in slice_.endpoints if e.conditions.ready for a in e.addresses) == ready_ips
    assert all(e.zone in ("zone-a", "zone-b") and e.node_name and e.target_ref.kind == "Pod"
               for e in slice_.endpoints)
    assert slice_.metadata.owner_references[0].kind == "Service"
    # scaling down moves Endpoints and the slice in the same write, before any tick
    kc("scale", "deployment/cart", "-n", "shop", "--replicas=1")
    ep = k8s.CoreV1Api(_client(sim)).read_namespaced_endpoints("cart", "shop")
    (slice_,) = disc.list_namespaced_endpoint_slice("shop", label_selector="kubernetes.io/service-name=cart").items
    assert len(slice_.endpoints) == sum(len(s.addresses or []) + len(s.not_ready_addresses or [])
                                        for s in ep.subsets or []) == 1


def test_quota_refuses_pods_over_hard_and_describe_shows_used(sim: Any, tmp_path: Path) -> None:
    kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
    row = kc("get", "quota", "-n", "shop").splitlines()  # the shop's own quota (manifests/quota.yaml)
    assert row[0].split() == ["NAME", "AGE", "REQUEST", "LIMIT"]
    used_pods = len([p for p in sim.store.list("Pod", "shop") if p["status"].get("phase") not in ("Succeeded",
                                                                                                  "Failed")])
    assert row[1].split()[0] == "compute" and f"pods: {used_pods}/60" in row[1] and "limits.memory: " in row[1]
    described = kc("describe", "quota", "compute", "-n", "shop")
    assert "Resource" in described and "Used" in described and "Hard" in described
    assert any(line.split()[:1] == ["requests.cpu"] and line.split()[-1] == "5" for line in described.splitlines())
    # a pod asking for more CPU than is left is refused as the real server refuses it
    out = kc.run("run", "big", "-n", "shop", "--image=busybox", "--overrides", json.dumps({"spec": {"containers": [
        {"name": "big", "image": "busybox", "resources": {"requests": {"cpu": "3"}, "limits": {"cpu": "3"}}}]}}),
        check=False)
    assert out.returncode != 0
    assert 'Error from server (Forbidden): pods "big" is forbidden: exceeded quota: compute, requested: ' \
           'requests.cpu=3, used: requests.cpu=' in out.stderr and "limited: requests.cpu=5" in out.stderr
    # kubectl create quota (sent as protobuf) adds one
    kc("create", "quota", "objects", "-n", "shop", "--hard=count/configmaps=100")
    sim.run(30)
    assert "count/configmaps: " in kc("get", "quota", "objects", "-n", "shop")


def test_a_rollout_over_quota_records_failed_create_and_replica_failure(sim: Any, tmp_path: Path) -> None:
    kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
    running = len([p for p in sim.store.list("Pod", "shop") if p["status"].get("phase") not in ("Succeeded",
                                                                                                 "Failed")])
    kc("create", "quota", "pods", "-n", "shop", f"--hard=pods={running}")
    kc("delete", "hpa", "currency", "-n", "shop")  # its autoscaler would set a hand-made scale back
    kc("scale", "deployment/currency", "-n", "shop", "--replicas=4")
    sim.run(30)
    apps = k8s.AppsV1Api(_client(sim))
    d = apps.read_namespaced_deployment("currency", "shop")
    failure = next(c for c in d.status.conditions if c.type == "ReplicaFailure")
    assert failure.status == "True" and failure.reason == "FailedCreate"
    assert "exceeded quota: pods, requested: pods=1, used: pods=" in failure.message
    events = kc("get", "events", "-n", "shop", "--field-selector", "reason=FailedCreate")
    assert "Error creating: pods \"currency-" in events and "is forbidden: exceeded quota: pods" in events
    assert d.status.ready_replicas == 2
    kc("delete", "quota", "pods", "-n", "shop")
    sim.run(180)
    d = apps.read_namespaced_deployment("currency", "shop")
    assert d.status.ready_replicas == 4 and all(c.type != "ReplicaFailure" for c in d.status.conditions)


def test_limitrange_defaults_and_rejects_with_the_real_messages(sim: Any, tmp_path: Path) -> None:
    core = k8s.CoreV1Api(_client(sim))
    core.create_namespaced_limit_range("default", {"metadata": {"name": "bounds"}, "spec": {"limits": [
        {"type": "Container", "max": {"cpu": "1", "memory": "512Mi"}, "min": {"cpu": "10m"},
         "defaultRequest": {"cpu": "50m", "memory": "32Mi"}}]}})
    kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
    assert kc("get", "limits", "-n", "shop").splitlines()[0].split() == ["NAME", "CREATED", "AT"]
    pod = core.create_namespaced_pod("default", {"metadata": {"name": "plain"}, "spec": {"containers": [
        {"name": "c", "image": "busybox"}]}})
    res = pod.spec.containers[0].resources
    assert res.requests == {"cpu": "50m", "memory": "32Mi"} and res.limits == {"cpu": "1", "memory": "512Mi"}
    with pytest.raises(k8s.ApiException) as err:
        core.create_namespaced_pod("default", {"metadata": {"name": "huge"}, "spec": {"containers": [
            {"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "2"}}}]}})
    assert err.value.status == 403
    assert json.loads(err.value.body)["message"] == \
        'pods "huge" is forbidden: maximum cpu usage per Container is 1, but limit is 2'
    # the shop's own LimitRange: a rollout whose pods break it cannot create them
    kc("set", "resources", "deployment/currency", "-n", "shop", "--limits=cpu=5")
    sim.run(30)
    d = k8s.AppsV1Api(_client(sim)).read_namespaced_deployment("currency", "shop")
    failure = next(c for c in d.status.conditions if c.type == "ReplicaFailure")
    assert "maximum cpu usage per Container is 4, but limit is 5" in failure.message


def test_networkpolicy_ingress_and_ingressclass_are_served(sim: Any, tmp_path: Path) -> None:
    kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
    manifest = tmp_path / "net.yaml"
    manifest.write_text("""\
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: only-frontend, namespace: shop}
spec:
  podSelector: {matchLabels: {app: cart}}
  policyTypes: [Ingress]
  ingress:
  - from: [{podSelector: {matchLabels: {app: frontend}}}]
    ports: [{port: 8080}]
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx}
spec: {controller: k8s.io/ingress-nginx}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: storefront, namespace: shop}
spec:
  ingressClassName: nginx
  rules:
  - host: shop.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: frontend, port: {number: 8080}}}}
""")
    kc("apply", "-f", str(manifest))
    netpol = kc("get", "netpol", "only-frontend", "-n", "shop").splitlines()
    assert netpol[0].split() == ["NAME", "POD-SELECTOR", "AGE"] and netpol[1].split()[:2] == ["only-frontend", "app=cart"]
    ing = kc("get", "ing", "-n", "shop").splitlines()
    assert ing[0].split() == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    assert ing[1].split()[:3] == ["storefront", "nginx", "shop.example.com"]
    assert kc("get", "ingressclass").splitlines()[1].split()[:3] == ["nginx", "k8s.io/ingress-nginx", "<none>"]
    resources = kc("api-resources", "--api-group=networking.k8s.io", "-o", "name").split()
    assert resources == ["ingressclasses.networking.k8s.io", "ingresses.networking.k8s.io",
                         "networkpolicies.networking.k8s.io"]
    assert "KIND:       NetworkPolicy" in kc("explain", "networkpolicy")
    net = k8s.NetworkingV1Api(_client(sim))
    assert net.read_namespaced_network_policy("only-frontend", "shop").spec.pod_selector.match_labels == {"app": "cart"}
    assert [i.metadata.name for i in net.list_ingress_for_all_namespaces().items] == ["storefront"]
    # kubectl's generators send these as protobuf
    kc("create", "ingress", "api", "-n", "shop", "--class=nginx", "--rule=api.example.com/v1*=frontend:8080,tls=api-tls")
    ing = net.read_namespaced_ingress("api", "shop")
    rule = ing.spec.rules[0]
    assert (rule.host, rule.http.paths[0].path, rule.http.paths[0].path_type) == ("api.example.com", "/v1", "Prefix")
    assert rule.http.paths[0].backend.service.port.number == 8080 and ing.spec.tls[0].secret_name == "api-tls"
    assert kc("get", "ing", "api", "-n", "shop").splitlines()[1].split()[3:5] == ["80,", "443"]  # no ADDRESS yet
    described = kc("describe", "netpol", "only-frontend", "-n", "shop")
    assert "PodSelector:     app=cart" in described and "Allowing ingress traffic:" in described


# -- NetworkPolicy enforcement -----------------------------------------------------------------------

CART_FROM_FRONTEND_ONLY = {
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "cart-callers", "namespace": "shop"},
    "spec": {"podSelector": {"matchLabels": {"app": "cart"}}, "policyTypes": ["Ingress"],
             "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "frontend"}}},
                                   {"podSelector": {"matchLabels": {"access": "cart"}}}],
                          "ports": [{"port": "http"}]}]}}


def _debug_pod(kc: Any, name: str, namespace: str, labels: str = "") -> None:
    kc("run", name, "-n", namespace, "--image=nicolaka/netshoot", *(["--labels", labels] if labels else []),
       "--", "sleep", "infinity")


def test_a_networkpolicy_drops_the_callers_it_does_not_allow(sim: Any, tmp_path: Path) -> None:
    kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
    kc("delete", "netpol", "--all", "-n", "shop")  # the shop's own policies (manifests/network-policies.yaml)
    _debug_pod(kc, "allowed", "shop", "access=cart")
    _debug_pod(kc, "stranger", "shop")
    sim.run(30)
    url = "http://cart.shop:8080/healthz"
    assert kc("exec", "-n", "shop", "stranger", "--", "curl", "-s", "-m", "2", url) == "ok"
    k8s.NetworkingV1Api(_client(sim)).create_namespaced_network_policy("shop", CART_FROM_FRONTEND_ONLY)
    # an exec'd client in a pod the policy does not allow: dropped, so a connect timeout (curl 28), not a refusal
    denied = kc.run("exec", "-n", "shop", "stranger", "--", "curl", "-s", "-m", "2", url, check=False)
    assert denied.returncode == 28
    assert kc("exec", "-n", "shop", "allowed", "--", "curl", "-s", "-m", "2", url) == "ok"
    # checkout, a legitimate caller of cart, now times out calling it: its errors say so
    sim.run(120)
    logs = kc("logs", "-n", "shop", "-l", "app=checkout", "--tail", "200")
    assert "cart: HTTP 504: deadline exceeded" in logs
    assert _errors(sim, "checkout") > 0.5 and _errors(sim, "frontend") > 0
    assert _errors(sim, "cart") == 0.0  # cart itself never saw the dropped calls
    # the policy removed, checkout reaches cart again
    kc("delete", "netpol", "cart-callers", "-n", "shop")
    sim.run(60)
    checkout = [k for k in sim.cluster.traffic.samples if k[:2] == ("shop", "checkout")]
    assert checkout and all(k[4] == "200" for k in checkout)  # this tick's calls all succeed


def test_namespace_selectors_and_default_deny(sim: Any, tmp_path: Path) -> None:
    kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
    kc("delete", "netpol", "--all", "-n", "shop")
    _debug_pod(kc, "outsider", "hotel")
    _debug_pod(kc, "watcher", "default")
    sim.run(30)
    net = k8s.NetworkingV1Api(_client(sim))
    net.create_namespaced_network_policy("shop", {"metadata": {"name": "default-deny"}, "spec": {
        "podSelector": {}, "policyTypes": ["Ingress"]}})
    net.create_namespaced_network_policy("shop", {"metadata": {"name": "from-ops"}, "spec": {
        "podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring", "default"]}]}}]}]}})
    url = "http://productcatalog.shop:8080/healthz"
    assert kc("exec", "watcher", "--", "curl", "-s", "-m", "2", url) == "ok"
    assert kc.run("exec", "-n", "hotel", "outsider", "--", "curl", "-s", "-m", "2", url, check=False).returncode == 28
    # the load balancer's traffic is dropped at the storefront too: every request fails
    sim.run(60)
    assert not any(k[:2] == ("shop", "frontend") for k in sim.cluster.traffic.samples)  # no pod reached
    net.create_namespaced_network_policy("shop", {"metadata": {"name": "public-storefront"}, "spec": {
        "podSelector": {"matchLabels": {"app": "frontend"}}, "ingress": [{"from": [{"ipBlock": {
            "cidr": "0.0.0.0/0"}}]}]}})
    sim.run(30)
    assert any(k[:2] == ("shop", "frontend") for k in sim.cluster.traffic.samples)


def _errors(sim: Any, service: str) -> float:
    """The service's error ratio over the last two ticks (the callers' view of its calls)."""
    window = sim.cluster.metrics.window("shop", service, "error_ratio", 2)
    return sum(window) / len(window) if window else 0.0
