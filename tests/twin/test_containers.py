"""The pieces of a twin container's view, without a cluster: which images are utility images,
what their main process runs, and the environment as the kubelet composes it."""

from __future__ import annotations

import pytest

from pytest_sremarathon.clock import VirtualClock
from pytest_sremarathon.k8s.store import Store
from pytest_sremarathon.twin.containers import compose_env, main_argv, service_env
from pytest_sremarathon.twin.images import utility_image


@pytest.mark.parametrize("ref, name", [
    ("busybox", "busybox"), ("busybox:1.36", "busybox"), ("docker.io/library/busybox:1.36.1@sha256:" + "a" * 64, "busybox"),
    ("alpine:3.20", "alpine"), ("curlimages/curl:8.10.1", "curlimages/curl"), ("nicolaka/netshoot", "nicolaka/netshoot"),
    ("nginx:1.27-alpine", "nginx"), ("docker.io/nginx", "nginx"),
])
def test_utility_images_by_any_reference(ref: str, name: str) -> None:
    image = utility_image(ref)
    assert image is not None and image.name == name and image.utility


@pytest.mark.parametrize("ref", ["registry.sremarathon.local/shop/cart@sha256:" + "b" * 64, "redis:7.2-alpine",
                                 "example.com/busybox:1", "ubuntu:24.04", "busyboxx"])
def test_other_images_are_no_utility(ref: str) -> None:
    assert utility_image(ref) is None


def test_main_argv_follows_the_images_entrypoints() -> None:
    busybox, curl, nginx = (utility_image(r) for r in ("busybox", "curlimages/curl", "nginx"))
    assert busybox and curl and nginx
    assert main_argv(busybox, {}) == ["sh"]
    assert main_argv(busybox, {"args": ["wget", "-qO-", "http://x"]}) == ["wget", "-qO-", "http://x"]
    assert main_argv(busybox, {"command": ["sh", "-c"], "args": ["exit 2"]}) == ["sh", "-c", "exit 2"]
    assert main_argv(curl, {}) == ["curl"]
    assert main_argv(curl, {"args": ["-s", "http://x"]}) == ["curl", "-s", "http://x"]  # /entrypoint.sh
    assert main_argv(curl, {"args": ["sh", "-c", "true"]}) == ["sh", "-c", "true"]
    assert main_argv(nginx, {}) == ["nginx", "-g", "daemon off;"]
    assert main_argv(nginx, {"args": ["sh", "-c", "true"]}) == ["sh", "-c", "true"]


def _store() -> Store:
    store = Store(VirtualClock())
    for ns in ("default", "shop"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    store.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "cart-cache", "namespace": "shop"},
                  "spec": {"clusterIP": "10.96.0.12", "ports": [{"name": "redis", "port": 6379, "protocol": "TCP"}]}})
    store.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "headless", "namespace": "shop"},
                  "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})
    store.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shop"},
                  "data": {"B": "2", "A": "1", "not valid": "x"}})
    store.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pw", "namespace": "shop"},
                  "data": {"password": "aHVudGVyMg=="}})
    return store


def test_service_links_as_the_kubelet_writes_them() -> None:
    env = service_env(_store(), "shop", True)
    assert env["CART_CACHE_SERVICE_HOST"] == "10.96.0.12" and env["CART_CACHE_SERVICE_PORT_REDIS"] == "6379"
    assert env["CART_CACHE_PORT_6379_TCP"] == "tcp://10.96.0.12:6379" and env["CART_CACHE_PORT_6379_TCP_ADDR"]
    assert env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1" and env["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert not any(k.startswith("HEADLESS_") for k in env)  # no cluster IP, no link
    assert set(service_env(_store(), "shop", False)) == {k for k in env if k.startswith("KUBERNETES_")}


def test_compose_env_order_override_expansion_and_sources() -> None:
    store = _store()
    pod = {"metadata": {"name": "p", "namespace": "shop", "uid": "u-1", "labels": {"app": "x"}},
           "spec": {"nodeName": "n1", "containers": []}, "status": {"podIP": "10.244.1.5"}}
    spec = {"name": "c", "resources": {"limits": {"memory": "256Mi", "cpu": "500m"}},
            "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "pw"}, "prefix": "S_"}],
            "env": [{"name": "A", "value": "override"}, {"name": "URL", "value": "http://$(CART_CACHE_SERVICE_HOST):$(B)/$$(B)"},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                    {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nope", "optional": True}}}]}
    image = utility_image("busybox")
    assert image is not None
    env = compose_env(store, pod, spec, image, {"memory": "16Gi", "cpu": "4"})
    names = [v.name for v in env]
    assert names[:4] == ["PATH", "HOSTNAME", "A", "B"] and names[-1] == "HOME"
    values = {v.name: v.value for v in env}
    assert values["A"] == "override" and values["URL"] == "http://10.96.0.12:2/$(B)"
    assert (values["NODE"], values["APP"], values["MEM"], values["CPU"]) == ("n1", "x", "256", "1")
    assert "not valid" not in values and "GONE" not in values and values["HOME"] == "/root"
    secret = next(v for v in env if v.name == "S_password")
    assert secret.value == "hunter2" and secret.secret == "pw"
