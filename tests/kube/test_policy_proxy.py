"""The policy proxy in front of an API server — here the twin's, reached over plain HTTP with
the orchestrator's token, exactly as the proxy reaches a kind cluster over TLS. The agent's
side is real: the proxy's TLS, a real ``kubectl`` and the official Python client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.admission import RecordingAdmission
from support.http import request
from support.kube import ORCHESTRATOR_TOKEN, Upstream
from support.kubectl import Kubectl, kubectl_for

from pytest_sremarathon.backends.agent_api import PREFIX, make_handler
from pytest_sremarathon.kube.api import KubeApi
from pytest_sremarathon.kube.proxy import PolicyProxy, mutation_verb, parse_path

AGENT_TOKEN = "agent-token-through-the-proxy-42"


class Proxied:
    def __init__(self, upstream: Upstream, tmp: Path) -> None:
        self.upstream = upstream
        self.admission = RecordingAdmission()
        backend = upstream.backend
        self.proxy = PolicyProxy(KubeApi(server=upstream.url, token=ORCHESTRATOR_TOKEN),
                                 tokens={AGENT_TOKEN: "agent"}, admission=self.admission,
                                 extensions={PREFIX: make_handler(backend.pipelines, backend.cluster.metrics,
                                                                  self.admission)}).start()
        self.kubeconfig = self.proxy.write_kubeconfig(tmp / "agent.kubeconfig", AGENT_TOKEN)

    def records(self, verb: str, resource: str) -> list:
        return [(r, d, s) for r, d, s in self.admission.records if r.verb == verb and r.resource == resource]

    def request(self, method: str, path: str, body: Any = None, token: str | None = AGENT_TOKEN,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        resp = request(self.proxy.port, method, path, body, token=token,
                       headers={"Accept": "application/json", **(headers or {})}, ca_pem=self.proxy.ca_pem,
                       timeout=20)
        raw = resp.body
        return resp.status, json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw.decode()


@pytest.fixture(scope="module")
def proxied(upstream: Upstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    p = Proxied(upstream, tmp_path_factory.mktemp("proxy"))
    yield p
    p.proxy.stop()


@pytest.fixture
def kubectl(proxied: Proxied, tmp_path: Path) -> Kubectl:
    return kubectl_for(proxied.kubeconfig, tmp_path / "kube-cache")


def test_paths_and_verbs() -> None:
    rp = parse_path("/apis/apps/v1/namespaces/shop/deployments/cart/scale")
    assert (rp.group, rp.version, rp.namespace, rp.resource, rp.name, rp.subresource) == \
        ("apps", "v1", "shop", "deployments", "cart", "scale")
    ns = parse_path("/api/v1/namespaces/shop")
    assert (ns.resource, ns.name, ns.namespace) == ("namespaces", "shop", None)
    assert parse_path("/api/v1/namespaces/shop/status").subresource == "status"
    assert parse_path("/api/v1/watch/namespaces/shop/pods").watch
    assert parse_path("/version") is None and parse_path("/sremarathon/v1/pipeline/shop/status") is None
    assert mutation_verb("POST", parse_path("/api/v1/namespaces/shop/pods/p/eviction")) == "evict"
    assert [mutation_verb(m, ns) for m in ("POST", "PUT", "PATCH", "DELETE")] == ["create", "update", "patch", "delete"]


def test_kubectl_reads_the_cluster_through_the_proxy(kubectl: Kubectl) -> None:
    pods = kubectl("get", "pods", "-n", "shop")
    assert "frontend-" in pods and "Running" in pods
    nodes = kubectl("get", "nodes", "-L", "topology.kubernetes.io/zone")
    assert "zone-a" in nodes and "zone-b" in nodes
    logs = kubectl("logs", "deploy/frontend", "-n", "shop")
    assert "INFO frontend listening on :8080" in logs
    assert kubectl.json("get", "deploy", "cart", "-n", "shop")["spec"]["replicas"] == 2


def test_an_allowed_patch_reaches_the_cluster_and_is_recorded(kubectl: Kubectl, proxied: Proxied) -> None:
    kubectl("patch", "deployment", "cart", "-n", "shop", "-p", '{"spec":{"replicas":3}}')
    live = proxied.upstream.backend.store.get("Deployment", "shop", "cart")
    assert live["spec"]["replicas"] == 3
    req, decision, status = proxied.records("patch", "deployments")[-1]
    assert (req.actor, req.namespace, req.name, decision.allowed, status) == ("agent", "shop", "cart", True, 200)
    assert req.body["spec"]["replicas"] == 3 and req.body["kind"] == "Deployment"  # the object after the change
    # the cluster saw the orchestrator's credentials, never the agent's
    upstream_actors = {r.actor for r, _, _ in proxied.upstream.admission.records}
    assert upstream_actors <= {"orchestrator"}


def test_scaling_to_zero_is_judged_on_the_result_and_denied(kubectl: Kubectl, proxied: Proxied) -> None:
    proc = kubectl.run("scale", "deployment/cart", "-n", "shop", "--replicas=0", check=False)
    assert proc.returncode != 0
    assert "forbidden" in proc.stderr.lower() and "no-scale-to-zero" in proc.stderr, proc.stderr
    assert proxied.upstream.backend.store.get("Deployment", "shop", "cart")["spec"]["replicas"] >= 2
    req, decision, status = proxied.records("patch", "deployments")[-1]
    assert (req.subresource, decision.rule, status) == ("scale", "no-scale-to-zero", 403)


def test_deleting_a_namespace_is_denied_with_the_rule_and_never_reaches_the_cluster(kubectl: Kubectl,
                                                                                    proxied: Proxied) -> None:
    before = len(proxied.upstream.admission.records)
    proc = kubectl.run("delete", "namespace", "shop", "--wait=false", check=False)
    assert proc.returncode != 0
    assert "no-delete-namespace" in proc.stderr and "deleting or changing namespaces is not allowed" in proc.stderr
    assert proxied.upstream.backend.store.get("Namespace", None, "shop") is not None
    req, decision, status = proxied.records("delete", "namespaces")[-1]
    assert (req.name, decision.allowed, decision.rule, status) == ("shop", False, "no-delete-namespace", 403)
    assert not [r for r, _, _ in proxied.upstream.admission.records[before:] if r.verb == "delete"]


def test_secret_names_are_visible_but_their_data_is_not(kubectl: Kubectl, proxied: Proxied) -> None:
    assert "cart-cache-auth" in kubectl("get", "secrets", "-n", "shop")
    proc = kubectl.run("get", "secret", "cart-cache-auth", "-n", "shop", "-o", "yaml", check=False)
    assert proc.returncode != 0 and "no-read-secrets" in proc.stderr
    req, decision, status = proxied.records("get", "secrets")[-1]
    assert (req.name, decision.rule, status) == ("cart-cache-auth", "no-read-secrets", 403)


def test_watches_stream_through_the_proxy(proxied: Proxied) -> None:
    from kubernetes import client, config, watch

    api = config.new_client_from_config(config_file=str(proxied.kubeconfig))
    apps = client.AppsV1Api(api)
    seen: list[tuple[str, str]] = []
    ready = threading.Event()

    def follow() -> None:
        w = watch.Watch()
        for event in w.stream(apps.list_namespaced_deployment, "shop", field_selector="metadata.name=email",
                              timeout_seconds=10, _request_timeout=15):
            seen.append((event["type"], event["object"].metadata.annotations.get("note", "")
                         if event["object"].metadata.annotations else ""))
            ready.set()
            if event["type"] == "MODIFIED":
                w.stop()

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    assert ready.wait(10)  # the initial ADDED arrived through the chunked stream
    apps.patch_namespaced_deployment("email", "shop", {"metadata": {"annotations": {"note": "watched"}}})
    t.join(15)
    assert ("MODIFIED", "watched") in seen
    logs = client.CoreV1Api(api).read_namespaced_pod_log(
        proxied.upstream.backend.store.list("Pod", "shop", {"app": "email"})[0]["metadata"]["name"], "shop")
    assert "INFO email listening on :8080" in logs
    api.close()


def test_the_pipeline_endpoints_and_authentication(proxied: Proxied) -> None:
    status, body = proxied.request("GET", "/sremarathon/v1/pipeline/shop/status")
    assert status == 200 and set(body["services"]) >= {"cart", "frontend"}
    status, body = proxied.request("GET", "/api/v1/namespaces/shop/pods", token=None)
    assert status == 401 and body["reason"] == "Unauthorized"
    status, body = proxied.request("GET", "/api/v1/namespaces/shop/pods", token="not-a-token")
    assert status == 401
    assert proxied.request("GET", "/healthz", token=None) == (200, "ok")
    status, body = proxied.request("GET", "/version", token=None)
    assert status == 200 and body["major"] == "1"
    status, body = proxied.request("GET", "/api/v1/namespaces/shop/pods/x/exec?command=sh",
                                   headers={"Connection": "Upgrade", "Upgrade": "websocket"})
    assert status == 400 and "exec" in body["message"]
    status, body = proxied.request("POST", "/sremarathon/v1/pipeline/shop/deploy", {"ref": "HEAD"})
    assert status == 200
    req, decision, code = proxied.records("deploy", "deployments")[-1]
    assert (req.channel, req.actor, decision.allowed, code) == ("pipeline", "agent", True, 200)
