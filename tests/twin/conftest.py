"""Shared fixtures for the twin API server tests: a populated Store behind a running ApiServer
(``twin``), and the marathon's own backend with the agent's kubectl (``sim``, ``kc``).

Everything is real: the store, the policy (as admission), the HTTP server, the official
``kubernetes`` client and the ``kubectl`` binaries. Only telemetry is a small canned source,
because producing logs and usage is the simulation's job, not the API server's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import pytest
from support.admission import RecordingAdmission
from support.http import RawResponse, request
from support.kubectl import Kubectl, kubectl_for
from support.twins import AgentSimulation

from pytest_sremarathon.clock import VirtualClock, iso
from pytest_sremarathon.k8s.store import Store
from pytest_sremarathon.serving.http import Request, Response
from pytest_sremarathon.twin.apiserver import ApiServer
from pytest_sremarathon.twin.defaults import apply_defaults

NS = "shop"
AGENT_TOKEN = "agent-token-0123456789"
OPERATOR_TOKEN = "operator-token-0123456789"


# -- admission and telemetry -------------------------------------------------------------------

@dataclass
class CannedTelemetry:
    clock: VirtualClock
    logs: dict[tuple[str, str, Optional[str], bool], list[tuple[datetime, str]]] = field(default_factory=dict)

    def pod_log(self, namespace: str, pod: str, container: Optional[str], previous: bool) -> list[tuple[datetime, str]]:
        return list(self.logs.get((namespace, pod, container, previous), []))

    def pod_usage(self, namespace: str, pod: str) -> dict[str, tuple[int, int]]:
        return {"web": (120 + len(pod), 64 * 1024 * 1024)}

    def node_usage(self, node: str) -> tuple[int, int]:
        return (850, 3 * 1024 ** 3)


# -- realistic objects -------------------------------------------------------------------------

def _node(name: str, zone: str, ip: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "twin-1"}},
        "spec": {"podCIDR": f"10.244.{ip.split('.')[-1]}.0/24"},
        "status": {
            "capacity": {"cpu": "4", "memory": "16393268Ki", "pods": "110", "ephemeral-storage": "102350Mi"},
            "allocatable": {"cpu": "3800m", "memory": "15241268Ki", "pods": "110", "ephemeral-storage": "94310Mi"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
                 "message": "kubelet has sufficient memory available",
                 "lastHeartbeatTime": "2026-01-05T00:00:00Z", "lastTransitionTime": "2026-01-05T00:00:00Z"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "message": "kubelet is posting ready status",
                 "lastHeartbeatTime": "2026-01-05T00:00:00Z", "lastTransitionTime": "2026-01-05T00:00:00Z"},
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.32.4", "kubeProxyVersion": "v1.32.4", "osImage": "Twin OS 1.0",
                         "kernelVersion": "6.1.0-twin", "containerRuntimeVersion": "containerd://1.7.24",
                         "operatingSystem": "linux", "architecture": "amd64", "machineID": name,
                         "systemUUID": name, "bootID": name},
        },
    }


def _template(image: str, pth: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web", "pod-template-hash": pth}},
        "spec": {"containers": [{"name": "web", "image": image,
                                 "ports": [{"containerPort": 8080, "name": "http"}],
                                 "env": [{"name": "MODE", "value": "prod"}],
                                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                               "limits": {"memory": "256Mi"}}}]},
    }


def _owner(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
             "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]


def populate(store: Store, clock: VirtualClock) -> dict[str, Any]:
    """A namespace, two zoned nodes, a Deployment with two ReplicaSet revisions and two Pods, a
    Service with Endpoints, a ConfigMap and Events — shaped as a real cluster shapes them."""
    objs: dict[str, Any] = {}
    with store.lock:
        objs["ns"] = store.create(apply_defaults({"apiVersion": "v1", "kind": "Namespace",
                                                  "metadata": {"name": NS}, "status": {"phase": "Active"}}))
        store.create(apply_defaults({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"},
                                     "status": {"phase": "Active"}}))
        objs["node-a"] = store.create(_node("node-a1", "zone-a", "172.18.0.2"))
        objs["node-b"] = store.create(_node("node-b1", "zone-b", "172.18.0.3"))
        clock.advance(60)
        dep = apply_defaults({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"},
                         "annotations": {"deployment.kubernetes.io/revision": "2"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": _template("registry.local/web:1.1", "x")["spec"]}},
        })
        dep = objs["deploy"] = store.create(dep)
        rs_old = apply_defaults({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-5f8d7c9b4", "namespace": NS,
                         "labels": {"app": "web", "pod-template-hash": "5f8d7c9b4"},
                         "annotations": {"deployment.kubernetes.io/revision": "1",
                                         "kubernetes.io/change-cause": "initial release",
                                         "deployment.kubernetes.io/desired-replicas": "2",
                                         "deployment.kubernetes.io/max-replicas": "3"},
                         "ownerReferences": _owner(dep)},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5f8d7c9b4"}},
                     "template": _template("registry.local/web:1.0", "5f8d7c9b4")},
            "status": {"replicas": 0, "observedGeneration": 2},
        })
        objs["rs-old"] = store.create(rs_old)
        clock.advance(600)
        rs = apply_defaults({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": "web-7d4b9c8f6d", "namespace": NS,
                         "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6d"},
                         "annotations": {"deployment.kubernetes.io/revision": "2",
                                         "kubernetes.io/change-cause": "bump to 1.1",
                                         "deployment.kubernetes.io/desired-replicas": "2",
                                         "deployment.kubernetes.io/max-replicas": "3"},
                         "ownerReferences": _owner(dep)},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d4b9c8f6d"}},
                     "template": _template("registry.local/web:1.1", "7d4b9c8f6d")},
            "status": {"replicas": 2, "fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
                       "observedGeneration": 1},
        })
        rs = objs["rs"] = store.create(rs)
        started = iso(clock())
        for i, (suffix, node, ip) in enumerate((("abcde", "node-a1", "10.244.2.11"),
                                                ("fghij", "node-b1", "10.244.3.12"))):
            pod = apply_defaults({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"web-7d4b9c8f6d-{suffix}", "namespace": NS,
                             "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6d"},
                             "ownerReferences": _owner(rs)},
                "spec": {**copy_spec(rs["spec"]["template"]["spec"]), "nodeName": node},
            })
            restarts = 3 if i == 1 else 0
            cs: dict[str, Any] = {"name": "web", "ready": True, "started": True, "restartCount": restarts,
                                  "image": "registry.local/web:1.1",
                                  "imageID": "registry.local/web@sha256:" + "ab" * 32,
                                  "containerID": f"containerd://{'0' * 63}{i}",
                                  "state": {"running": {"startedAt": started}}, "lastState": {}}
            if restarts:
                cs["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                  "startedAt": started, "finishedAt": started,
                                                  "containerID": f"containerd://{'1' * 64}"}}
            pod["status"] = {
                "phase": "Running", "qosClass": "Burstable", "hostIP": "172.18.0.2",
                "hostIPs": [{"ip": "172.18.0.2"}], "podIP": ip, "podIPs": [{"ip": ip}], "startTime": started,
                "conditions": [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
                               for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                "containerStatuses": [cs],
            }
            objs[f"pod{i}"] = store.create(pod)
        dep["status"] = {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2,
                         "availableReplicas": 2, "conditions": [
                             {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                              "message": "Deployment has minimum availability.",
                              "lastUpdateTime": started, "lastTransitionTime": started},
                             {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable",
                              "message": 'ReplicaSet "web-7d4b9c8f6d" has successfully progressed.',
                              "lastUpdateTime": started, "lastTransitionTime": started}]}
        store.touch(dep)
        objs["svc"] = store.create(apply_defaults({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                     "clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20"]},
            "status": {"loadBalancer": {}},
        }))
        objs["ep"] = store.create({
            "apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
            "subsets": [{"addresses": [{"ip": "10.244.2.11", "nodeName": "node-a1",
                                        "targetRef": {"kind": "Pod", "namespace": NS,
                                                      "name": "web-7d4b9c8f6d-abcde"}},
                                       {"ip": "10.244.3.12", "nodeName": "node-b1",
                                        "targetRef": {"kind": "Pod", "namespace": NS,
                                                      "name": "web-7d4b9c8f6d-fghij"}}],
                         "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}],
        })
        objs["cm"] = store.create({"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": "web-config", "namespace": NS},
                                   "data": {"LOG_LEVEL": "info", "TIMEOUT_MS": "250"}})
        pod1 = objs["pod1"]
        for j, (reason, etype, msg) in enumerate((
                ("Pulled", "Normal", 'Container image "registry.local/web:1.1" already present on machine'),
                ("BackOff", "Warning", "Back-off restarting failed container web in pod web-7d4b9c8f6d-fghij"))):
            objs[f"ev{j}"] = store.create({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"web-7d4b9c8f6d-fghij.18{j}", "namespace": NS},
                "involvedObject": {"kind": "Pod", "namespace": NS, "name": pod1["metadata"]["name"],
                                   "uid": pod1["metadata"]["uid"], "apiVersion": "v1",
                                   "fieldPath": "spec.containers{web}"},
                "reason": reason, "message": msg, "type": etype, "count": 3 - j,
                "source": {"component": "kubelet", "host": "node-b1"},
                "firstTimestamp": iso(clock()), "lastTimestamp": iso(clock()),
                "reportingComponent": "kubelet", "reportingInstance": "node-b1",
            })
        clock.advance(300)
    return objs


def copy_spec(spec: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(spec))


# -- fixtures ----------------------------------------------------------------------------------

@dataclass
class Twin:
    store: Store
    clock: VirtualClock
    server: ApiServer
    admission: RecordingAdmission
    telemetry: CannedTelemetry
    objs: dict[str, Any]
    agent_kubeconfig: Path
    operator_kubeconfig: Path
    extension_calls: list[Request]
    ns: str = NS
    agent_token: str = AGENT_TOKEN
    operator_token: str = OPERATOR_TOKEN

    def operator_client(self) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.operator_kubeconfig))


@pytest.fixture
def twin(tmp_path: Path) -> Any:
    clock = VirtualClock()
    store = Store(clock=clock)
    objs = populate(store, clock)
    admission = RecordingAdmission()
    telemetry = CannedTelemetry(clock)
    calls: list[Request] = []

    def changes(req: Request) -> Response:
        calls.append(req)
        if req.method == "GET":
            return Response(200, {"items": [], "path": req.path})
        return Response(200, "ok\n", "text/plain")

    server = ApiServer(store, tokens={AGENT_TOKEN: "agent", OPERATOR_TOKEN: "operator"}, admission=admission,
                       telemetry=telemetry, extensions={"/sremarathon/v1/": changes})
    server.start()
    try:
        yield Twin(store, clock, server, admission, telemetry, objs,
                   server.write_kubeconfig(tmp_path / "agent.kubeconfig", AGENT_TOKEN),
                   server.write_kubeconfig(tmp_path / "operator.kubeconfig", OPERATOR_TOKEN),
                   calls)
    finally:
        server.stop()


@pytest.fixture
def client(twin: Twin) -> Any:
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=str(twin.agent_kubeconfig))
    yield api_client
    api_client.close()


# -- kubectl -----------------------------------------------------------------------------------

@pytest.fixture(params=["", "1.27", "1.33"], ids=["kubectl", "kubectl-1.27", "kubectl-1.33"])
def any_kubectl(request: pytest.FixtureRequest, twin: Twin, tmp_path: Path) -> Kubectl:
    """The kubectl on PATH and two older client versions (each skipped when absent)."""
    return kubectl_for(twin.agent_kubeconfig, tmp_path / f"kube-cache-{request.param or 'default'}", request.param)


@pytest.fixture
def kubectl(twin: Twin, tmp_path: Path) -> Kubectl:
    return kubectl_for(twin.agent_kubeconfig, tmp_path / "kube-cache")


# -- the marathon's backend ------------------------------------------------------------------

SIM_TOKEN = "sim-agent-token"


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[AgentSimulation]:
    """The default scenario's twin backend three virtual minutes in (support.twins.AgentSimulation)."""
    s = AgentSimulation(tmp_path, SIM_TOKEN)
    yield s
    s.close()


@pytest.fixture
def kc(sim: AgentSimulation, tmp_path: Path) -> Kubectl:
    """Real kubectl with the agent's kubeconfig for ``sim``."""
    return kubectl_for(sim.kubeconfig, tmp_path / "cache")


# -- raw HTTP ----------------------------------------------------------------------------------

def raw(twin: Twin, method: str, path: str, body: Any = None, *, token: Optional[str] = AGENT_TOKEN,
        headers: Optional[dict[str, str]] = None, tls: bool = False, timeout: float = 10) -> RawResponse:
    """One request to the twin's API server with the stdlib HTTP client (plain HTTP, or HTTPS
    verified against the twin's CA), as the agent unless ``token`` says otherwise."""
    return request(twin.server.port, method, path, body, token=token,
                   headers={"Accept": "application/json", **(headers or {})},
                   ca_pem=twin.server.ca_pem if tls else None, timeout=timeout)


@pytest.fixture
def http(twin: Twin) -> Any:
    """``http(method, path, body=None, token=..., headers=..., tls=False) -> RawResponse``."""
    def call(method: str, path: str, body: Any = None, **kw: Any) -> RawResponse:
        return raw(twin, method, path, body, **kw)
    return call
