"""What the real backend generates and how it reads a cluster, checked without Kubernetes:
the kind config, the image build context and commands, the manifests as a real cluster gets
them (applied through the real pipeline, server-side, to the twin's API server), the mirror
the alert rules and fault kinds read, and the node-fault commands."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.admission import RecordingAdmission
from support.kube import ORCHESTRATOR_TOKEN, shop_scenario
from support.twins import run_for

from pytest_sremarathon.alerts.rules import DEFAULT_RULES, crash_looping
from pytest_sremarathon.apps import load_app
from pytest_sremarathon.backends import resolve_backend
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import VirtualClock
from pytest_sremarathon.cluster import Topology
from pytest_sremarathon.k8s.store import Store
from pytest_sremarathon.kube import images, kind, manifests, node_faults
from pytest_sremarathon.kube.api import KubeApi
from pytest_sremarathon.kube.cluster import KubeCluster
from pytest_sremarathon.pipeline.service import PipelineError, Pipelines
from pytest_sremarathon.runtime.artifacts import datastore, package, read_artifact
from pytest_sremarathon.runtime.code import ArtifactStore
from pytest_sremarathon.twin.apiserver import ApiServer
from pytest_sremarathon.twin.cluster import TwinCluster

SHOP = APPS_DIR / "shop"


# -- kind ------------------------------------------------------------------------------------------

def test_kind_config_has_one_control_plane_and_two_zoned_workers_per_zone() -> None:
    config = kind.cluster_config("bench", ("zone-a", "zone-b"), 2)
    assert (config["kind"], config["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    assert config["networking"]["apiServerAddress"] == "127.0.0.1"  # the API server stays on loopback
    roles = [n["role"] for n in config["nodes"]]
    assert roles == ["control-plane", "worker", "worker", "worker", "worker"]
    assert "labels" not in config["nodes"][0]
    workers = config["nodes"][1:]
    assert [w["labels"] for w in workers] == [{"topology.kubernetes.io/zone": z}
                                              for z in ("zone-a", "zone-a", "zone-b", "zone-b")]
    text = kind.config_yaml(config)
    assert "node-role.kubernetes.io" not in text  # kind refuses node-role labels
    names = [yaml.safe_load(w["kubeadmConfigPatches"][0])["nodeRegistration"]["name"] for w in workers]
    assert names == [n for n, _ in Topology().node_names()] == ["worker-a1", "worker-a2", "worker-b1", "worker-b2"]
    assert yaml.safe_load(text) == config
    assert kind.node_containers(config) == [("bench-control-plane", "control-plane", None),
                                            ("bench-worker", "worker", "zone-a"), ("bench-worker2", "worker", "zone-a"),
                                            ("bench-worker3", "worker", "zone-b"), ("bench-worker4", "worker", "zone-b")]
    three = kind.cluster_config("x", ("z1", "z2", "z3"), 1, node_image="kindest/node:v1.32.2", twin_names=False)
    assert [n.get("labels") for n in three["nodes"][1:]] == [{kind.ZONE_LABEL: z} for z in ("z1", "z2", "z3")]
    assert {n["image"] for n in three["nodes"]} == {"kindest/node:v1.32.2"}
    assert not any("kubeadmConfigPatches" in n for n in three["nodes"])
    with pytest.raises(ValueError):
        kind.cluster_config(nodes_per_zone=0)


def test_kind_commands_keep_the_users_kubeconfig_untouched(tmp_path: Path) -> None:
    cfg, kc = tmp_path / "kind.yaml", tmp_path / "kind.kubeconfig"
    assert kind.create_argv("bench", cfg, kc) == ["kind", "create", "cluster", "--name", "bench", "--config", str(cfg),
                                                  "--kubeconfig", str(kc), "--wait", "0s"]
    assert kind.delete_argv("bench", kc) == ["kind", "delete", "cluster", "--name", "bench", "--kubeconfig", str(kc)]
    assert kind.get_kubeconfig_argv("bench") == ["kind", "get", "kubeconfig", "--name", "bench"]


# -- images ----------------------------------------------------------------------------------------

def test_the_image_build_context_and_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SREMARATHON_BASE_IMAGE", raising=False)
    app = load_app(SHOP)
    files = {str(p.relative_to(SHOP)): p.read_text() for p in sorted((SHOP / "services").glob("*.py"))}
    cart = package(app, files)["cart"]
    tag = images.image_tag(cart)
    assert tag == f"registry.sremarathon.local/shop/cart:{cart.digest[len('sha256:'):][:12]}"
    assert not tag.endswith(":latest")
    ctx = images.build_context(cart, tmp_path / "ctx")
    dockerfile = (ctx / "Dockerfile").read_text()
    assert "\nARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}\n" in dockerfile
    assert 'ENTRYPOINT ["python", "-m", "pytest_sremarathon.runtime"]' in dockerfile
    assert "COPY artifact/ /app/" in dockerfile and "COPY pytest_sremarathon /opt/sremarathon/pytest_sremarathon" in dockerfile
    assert (ctx / "pytest_sremarathon" / "runtime" / "__main__.py").is_file()
    assert (ctx / "pytest_sremarathon" / "runtime" / "code.py").is_file()
    assert not list(ctx.rglob("__pycache__"))
    assert read_artifact(ctx / "artifact") == cart  # the image carries exactly the built, tested code
    assert images.build_argv(cart, tag, ctx) == [
        "docker", "build", "--tag", tag, "--build-arg", "BASE_IMAGE=python:3.11-slim", "--build-arg", "APP=shop",
        "--build-arg", "SERVICE=cart", "--build-arg", f"DIGEST={cart.digest}",
        "--label", f"dev.sremarathon.digest={cart.digest}", str(ctx)]
    monkeypatch.setenv("SREMARATHON_BASE_IMAGE", "mirror.example/python:3.11-slim")  # a mirror, air-gapped
    assert "BASE_IMAGE=mirror.example/python:3.11-slim" in images.build_argv(cart, tag, ctx)
    assert images.kind_load_argv(tag, "bench") == ["kind", "load", "docker-image", tag, "--name", "bench"]
    assert images.kind_load_argv(tag, "bench", ["worker-a1"])[-2:] == ["--nodes", "worker-a1"]
    assert images.push_argv(tag) == ["docker", "push", tag]
    ds = datastore("shop", "cart-cache", "redis:7.2-alpine")
    ds_ctx = images.build_context(ds, tmp_path / "ds", datastore_image="redis:7.2-alpine")
    assert read_artifact(ds_ctx / "artifact").digest == ds.digest
    with pytest.raises(images.ImageError):
        images.build_context(ds, tmp_path / "ds2")


def test_the_image_context_serves_with_the_runtime_it_carries(tmp_path: Path) -> None:
    """What the container runs (PYTHONPATH=/opt/sremarathon, the artifact at /app): the
    context's own copy of the package serves the artifact next to it."""
    app = load_app(SHOP)
    files = {str(p.relative_to(SHOP)): p.read_text() for p in sorted((SHOP / "services").glob("*.py"))}
    ctx = images.build_context(package(app, files)["currency"], tmp_path / "ctx")
    proc = subprocess.run([sys.executable, "-c", "import sys; from pytest_sremarathon.runtime.__main__ import "
                           "_parser, resolve_artifact; a, _ = resolve_artifact(_parser().parse_args(sys.argv[1:])); "
                           "import pytest_sremarathon; print(a.service, a.digest, pytest_sremarathon.__file__)",
                           "--artifact", str(ctx / "artifact")],
                          capture_output=True, text=True, cwd=ctx, timeout=60,
                          env={"PATH": os.defpath, "PYTHONPATH": str(ctx), "SREMARATHON_APP": "shop",
                               "SREMARATHON_SERVICE": "currency"})
    assert proc.returncode == 0, proc.stderr
    service, digest, where = proc.stdout.split()
    assert service == "currency" and digest.startswith("sha256:") and where.startswith(str(ctx))


# -- the real-cluster adapter against an API server --------------------------------------------------

class Target:
    """An API server with two zoned nodes per zone and no applications (the twin's, since no
    real one is reachable here), and the real backend's cluster adapter pointed at it."""

    def __init__(self, tmp: Path) -> None:
        self.clock = VirtualClock()
        self.store = Store(self.clock)
        self.app = load_app(SHOP)
        self.twin = TwinCluster(self.store, [self.app], ArtifactStore(), Topology())
        self.twin.bootstrap()
        self.server = ApiServer(self.store, tokens={ORCHESTRATOR_TOKEN: "orchestrator"}, admission=RecordingAdmission(),
                                telemetry=self.twin)
        self.server.start()
        self.api = KubeApi.from_kubeconfig(self.server.write_kubeconfig(tmp / "orchestrator.kubeconfig",
                                                                        ORCHESTRATOR_TOKEN))
        self.kube = KubeCluster(self.api, [self.app], clock=self.clock)
        self.kube.bootstrap()
        self.pipelines = Pipelines([self.app], self.kube, tmp / "repos", self.clock,  # type: ignore[arg-type]
                                   lambda *_: None)
        self.deployed = self.pipelines.deploy("shop", "HEAD", "orchestrator")

    def run(self, seconds: float) -> None:
        run_for(seconds, self.clock, self.twin.tick)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    t = Target(tmp_path_factory.mktemp("target"))
    yield t
    t.kube.close()
    t.server.stop()


def test_manifests_are_applied_with_built_image_tags_and_if_not_present(target: Target) -> None:
    deployments = {d["metadata"]["name"]: d for d in target.store.list("Deployment", "shop")}
    deployments |= {s["metadata"]["name"]: s for s in target.store.list("StatefulSet", "shop")}  # the cart-cache
    assert set(deployments) == set(target.app.services)
    assert not manifests.check(deployments.values())
    for svc, digest in target.deployed["services"].items():
        c = deployments[svc]["spec"]["template"]["spec"]["containers"][0]
        assert c["image"] == f"registry.sremarathon.local/shop/{svc}:{digest.split(':')[1][:12]}"
        assert c["imagePullPolicy"] == "IfNotPresent"
        env = {e["name"]: e for e in c["env"]}
        assert env["PORT"]["value"] == "8080"
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert json.loads(env["SREMARATHON_SERVICE_PORTS"]["value"])["cart-cache"] == 6379
        annotations = deployments[svc]["spec"]["template"]["metadata"]["annotations"]
        assert annotations[manifests.ARTIFACT_ANNOTATION] == digest
        assert c["envFrom"] == [{"configMapRef": {"name": f"{svc}-config"}}]  # as the pipeline rendered it
    payment_env = {e["name"]: e for e in deployments["payment"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(payment_env["SREMARATHON_EXTERNALS"]["value"]) == {
        "payment-provider": {"host": "api.payments.example.com", "latency_ms": 8.0}}
    cache = deployments["cart-cache"]["spec"]["template"]["spec"]["containers"][0]
    ds = datastore("shop", "cart-cache", "redis:7.2-alpine")
    assert cache["image"] == images.image_tag(ds)  # the runtime's datastore stands in for redis
    assert {e["name"]: e.get("value") for e in cache["env"]}["PORT"] == "6379"
    assert "REDIS_PASSWORD" in {e["name"] for e in cache["env"]}
    assert target.kube.artifacts.by_image(cache["image"]).digest == ds.digest
    assert target.store.get("ConfigMap", "shop", "frontend-config")["data"]["REQUEST_TIMEOUT_MS"] == "1500"
    svc = target.store.get("Service", "shop", "cart-cache")
    assert svc["spec"]["ports"][0]["port"] == 6379
    assert {"shop", "sremarathon-system", "monitoring"} <= {n["metadata"]["name"] for n in target.store.list("Namespace")}
    # re-deploying the same commit changes nothing: the rendering is deterministic
    rv = target.store.get("Deployment", "shop", "cart")["metadata"]["resourceVersion"]
    target.pipelines.deploy("shop", "HEAD", "orchestrator")
    assert target.store.get("Deployment", "shop", "cart")["metadata"]["resourceVersion"] == rv


def test_the_mirror_feeds_the_alert_rules_and_the_fault_evidence(target: Target) -> None:
    target.run(120)  # the twin's kubelet cannot pull the real images: ErrImagePull, as a cluster without them would
    target.kube.refresh()
    pods = target.kube.store.list("Pod", "shop")
    assert pods and {p["metadata"]["uid"] for p in pods} == {p["metadata"]["uid"] for p in target.store.list("Pod", "shop")}
    assert target.kube.network.node_zone == {"worker-a1": "zone-a", "worker-a2": "zone-a", "worker-b1": "zone-b",
                                             "worker-b2": "zone-b"}
    assert target.kube.topology.node_names() == sorted(target.kube.network.node_zone.items())
    assert all(target.kube.network.node_up.values())
    views = [c for c in target.kube.kubelet.containers.values() if c.service == "frontend"]
    assert len(views) == 3 and views[0].ctx.config_data["REQUEST_TIMEOUT_MS"] == "1500"
    cart = next(c for c in target.kube.kubelet.containers.values() if c.service == "cart")
    assert cart.ctx.config_data["CART_CACHE_PASSWORD"] == "c4rt-cache-2026-spring"  # resolved from the Secret
    with pytest.raises(PipelineError, match="cannot be injected"):
        cart.ctx.config_data["CART_CACHE_PASSWORD"] = "rotated"
    matches = list(crash_looping(target.kube, {"shop": target.app}))  # type: ignore[arg-type]
    assert matches and {m[0]["service"] for m in matches} >= {"frontend", "cart"}
    assert "ErrImagePull" in matches[0][1] or "ImagePullBackOff" in matches[0][1]
    for rule in DEFAULT_RULES:  # every rule evaluates on the real-cluster view
        list(rule.evaluate(target.kube, {"shop": target.app}))  # type: ignore[arg-type]


def test_knobs_without_a_real_counterpart_skip_the_fault(target: Target) -> None:
    net = target.kube.network
    with pytest.raises(PipelineError, match="cannot be injected on this cluster") as err:
        net.node_up["worker-a1"] = False  # no docker access to the nodes here
    assert err.value.status == 501 and net.node_up["worker-a1"] is True
    for knob in (lambda: net.partitions.add(frozenset(("zone-a", "zone-b"))),
                 lambda: net.zone_latency_ms.__setitem__("zone-a", 300.0),
                 lambda: net.pod_delay_ms.__setitem__("uid", 250.0),
                 lambda: net.externals_down.add("payment-provider"),
                 lambda: target.kube.kubelet.disk_pressure.add("worker-a1")):
        with pytest.raises(PipelineError):
            knob()
    assert not net.partitions and not net.zone_latency_ms
    net.pod_delay_ms.pop("uid", None)  # cleanups of what never happened are no-ops
    net.externals_down.discard("payment-provider")


def test_in_place_changes_are_written_back_to_the_cluster(target: Target) -> None:
    target.kube.refresh()
    node = target.kube.store.get("Node", None, "worker-b2")
    node["spec"]["unschedulable"] = True
    target.kube.store.touch(node)
    assert target.store.get("Node", None, "worker-b2")["spec"]["unschedulable"] is True
    node["spec"].pop("unschedulable")  # what the faults' uncordon() does
    target.kube.store.touch(node)
    assert not target.store.get("Node", None, "worker-b2")["spec"].get("unschedulable")
    assert target.kube.store.get("Node", None, "worker-b2")["metadata"]["resourceVersion"] == \
        target.store.get("Node", None, "worker-b2")["metadata"]["resourceVersion"]
    secret = target.kube.store.get("Secret", "shop", "cart-cache-auth")
    with pytest.raises(PipelineError):
        target.kube.store.touch(secret)


def test_a_storage_class_the_datastores_claim_is_created_where_the_cluster_lacks_it(tmp_path: Path) -> None:
    """A kind cluster has only its default ``standard`` class; the datastores' claims name
    ``standard-regional``. Deploying one creates that class as a copy of the default class, so
    the claim can bind instead of staying Pending; with no default class to copy, the deploy
    says what to create."""
    clock = VirtualClock()
    store = Store(clock)
    twin = TwinCluster(store, [load_app(SHOP)], ArtifactStore(), Topology())
    twin.bootstrap()
    store.delete("StorageClass", None, "standard-regional")  # as on a kind cluster
    server = ApiServer(store, tokens={ORCHESTRATOR_TOKEN: "orchestrator"}, admission=RecordingAdmission(),
                       telemetry=twin)
    server.start()
    said: list[str] = []
    try:
        api = KubeApi.from_kubeconfig(server.write_kubeconfig(tmp_path / "k", ORCHESTRATOR_TOKEN))
        kube = KubeCluster(api, [load_app(SHOP)], clock=clock, progress=said.append)
        kube.bootstrap()
        cache = next(d for d in yaml.safe_load_all((SHOP / "manifests" / "cart-cache.yaml").read_text())
                     if d["kind"] == "StatefulSet")
        assert manifests.claimed_storage_classes(cache) == {"standard-regional"}
        kube.apply(cache)
        kube.apply(cache)  # the second deploy finds the class it made
        made, default = store.get("StorageClass", None, "standard-regional"), store.get("StorageClass", None, "standard")
        assert made is not None and default is not None
        assert made["provisioner"] == default["provisioner"]
        assert made["volumeBindingMode"] == default["volumeBindingMode"]
        assert [m for m in said if "StorageClass" in m] == ["created StorageClass standard-regional (as the default "
                                                             "class standard)"]
        run_for(120, clock, twin.tick)
        claims = store.list("PersistentVolumeClaim", "shop")
        assert claims and all(c["status"].get("phase") == "Bound" for c in claims)

        store.delete("StorageClass", None, "standard-regional")
        store.delete("StorageClass", None, "standard")
        fresh = KubeCluster(api, [load_app(SHOP)], clock=clock)
        with pytest.raises(PipelineError, match="no default StorageClass.*create a StorageClass named "
                                                "'standard-regional'"):
            fresh.apply(cache)
        fresh.close()
        kube.close()
    finally:
        server.stop()


# -- node faults -----------------------------------------------------------------------------------

def kind_nodes() -> list[node_faults.NodeInfo]:
    """Nodes as a kind cluster with twin names reports them."""
    raw = []
    for i, (name, zone) in enumerate(Topology().node_names()):
        raw.append({"metadata": {"name": name, "labels": {kind.ZONE_LABEL: zone}},
                    "spec": {"podCIDR": f"10.244.{i + 1}.0/24", "podCIDRs": [f"10.244.{i + 1}.0/24"],
                             "providerID": f"kind://docker/bench/bench-worker{'' if i == 0 else i + 1}"},
                    "status": {"addresses": [{"type": "InternalIP", "address": f"172.18.0.{i + 3}"}]}})
    raw.append({"metadata": {"name": "bench-control-plane", "labels": {}},
                "spec": {"podCIDR": "10.244.0.0/24", "providerID": "kind://docker/bench/bench-control-plane"},
                "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}]}})
    return node_faults.nodes_from_api(raw)


def test_node_failure_and_zone_outage_pause_the_node_containers() -> None:
    nodes = kind_nodes()
    by = {n.name: n for n in nodes}
    assert by["worker-b1"].container == "bench-worker3" and by["worker-b1"].zone == "zone-b"
    a = node_faults.node_failure(nodes, "worker-b1")
    assert a.inject == (("docker", "pause", "bench-worker3"),) and a.cleanup == (("docker", "unpause", "bench-worker3"),)
    stop = node_faults.node_failure(nodes, "worker-a2", mode="stop")
    assert stop.inject == (("docker", "stop", "--time", "0", "bench-worker2"),)
    assert stop.cleanup == (("docker", "start", "bench-worker2"),)
    z = node_faults.zone_outage(nodes, "zone-a")
    assert z.inject == (("docker", "pause", "bench-worker"), ("docker", "pause", "bench-worker2"))
    with pytest.raises(node_faults.NodeFaultError):
        node_faults.zone_outage(nodes, "zone-c")


def test_partition_and_latency_act_on_cross_zone_traffic_only() -> None:
    nodes = kind_nodes()
    part = node_faults.zone_partition(nodes, "zone-a", "zone-b")
    assert [c[2] for c in part.inject] == ["bench-worker", "bench-worker2", "bench-worker3", "bench-worker4"]
    script = part.inject[0][-1]  # on worker-a1: drop everything to and from zone-b
    assert part.inject[0][:5] == ("docker", "exec", "bench-worker", "sh", "-c")
    for net in ("172.18.0.5/32", "10.244.3.0/24", "172.18.0.6/32", "10.244.4.0/24"):
        assert f"-s {net} -j DROP" in script and f"-d {net} -j DROP" in script
    assert "172.18.0.2" not in script and "10.244.0.0" not in script  # the control plane stays reachable
    assert "10.244.2.0/24" not in script  # nor the same zone
    chain = script.split()[3]
    assert chain.startswith("SREM-PART-") and len(chain) <= 28
    assert all(f"-X {chain}" in c[-1] for c in part.cleanup)
    lat = node_faults.zone_latency(nodes, "zone-b", 300)
    tc = lat.inject[0][-1]
    assert "tc qdisc add dev eth0 root handle 1: prio bands 4" in tc and "netem delay 300ms" in tc
    assert "match ip dst 172.18.0.3/32 flowid 1:4" in tc and "match ip dst 10.244.1.0/24 flowid 1:4" in tc
    assert "172.18.0.6" not in tc and "172.18.0.2" not in tc
    assert lat.cleanup[0][-1].startswith("tc qdisc del dev eth0 root")
    dns = node_faults.zone_dns_outage(nodes, "zone-a")
    assert "-s 10.244.1.0/24 -p udp --dport 53 -j DROP" in dns.inject[0][-1]


# -- backends ------------------------------------------------------------------------------------

def test_the_real_backends_are_registered() -> None:
    assert resolve_backend("kind") is not None
    factory = resolve_backend("kubeconfig:/etc/kube/config", keep_cluster=True)
    assert factory is not None and factory.keywords == {"target": "/etc/kube/config", "keep_cluster": True}
    assert resolve_backend("kubeconfig:") is None and resolve_backend("k8s") is None
    from pytest_sremarathon.backends import twin_backend

    assert resolve_backend("twin", keep_cluster=True) is twin_backend  # options it does not take are not bound


def test_a_backend_that_cannot_reach_its_cluster_says_why_in_one_line(target: Target, tmp_path: Path) -> None:
    from pytest_sremarathon.backends.kube import KubeBackend, KubeBackendError
    from pytest_sremarathon.scenario import load_scenario

    scenario = load_scenario(shop_scenario(tmp_path))
    kubeconfig = target.server.write_kubeconfig(tmp_path / "not-kind.kubeconfig", ORCHESTRATOR_TOKEN)
    with pytest.raises(KubeBackendError) as err:
        KubeBackend(scenario, VirtualClock(), emit=lambda *_: None, admission=RecordingAdmission(), private_dir=tmp_path,
                    tokens={}, kubeconfig=kubeconfig)
    assert "SREMARATHON_IMAGE_REGISTRY" in str(err.value) and "\n" not in str(err.value)
    if kind.unavailable() is not None:  # here: no kind or no Docker; elsewhere this would create a cluster
        with pytest.raises(KubeBackendError, match="needs kind and a running Docker") as err:
            KubeBackend(scenario, VirtualClock(), emit=lambda *_: None, admission=RecordingAdmission(), private_dir=tmp_path,
                        tokens={})
        assert "\n" not in str(err.value)


def test_the_plugin_checks_the_backend_option(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_x.py")]
    proc = subprocess.run(base + ["--marathon-backend", "kubeconfig:missing.yaml"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 4 and "no such kubeconfig file" in proc.stderr
    proc = subprocess.run(base + ["--marathon-backend", "k8s"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)
    assert proc.returncode == 4 and "kind" in proc.stderr and "kubeconfig:PATH" in proc.stderr
    (tmp_path / "kc.yaml").write_text("apiVersion: v1\nkind: Config\n")
    proc = subprocess.run(base + ["--marathon-backend", "kubeconfig:kc.yaml", "--marathon-keep-cluster"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_docker_and_kind_absence_is_reported_not_raised() -> None:
    why = kind.unavailable()
    if shutil.which("kind") is None:
        assert why is not None and "kind" in why
    assert why is None or isinstance(why, str)


def test_a_node_fault_on_a_missing_node_is_skipped_not_a_crash() -> None:
    from pytest_sremarathon.kube.cluster import KubeNetwork

    net = KubeNetwork(docker=True)
    net.observe(kind_nodes())
    assert net.node_zone["worker-b2"] == "zone-b" and net.node_up["worker-b2"] is True
    with pytest.raises(PipelineError, match="no node 'worker-c1'") as err:
        net.node_up["worker-c1"] = False  # a schedule naming machines this cluster does not have
    assert err.value.status == 501 and "worker-c1" not in net.node_up
    with pytest.raises(PipelineError, match="no node in zone 'zone-c'"):
        net.partitions.add(frozenset(("zone-a", "zone-c")))
    assert not net.partitions and net.restore() == []


def test_kubeconfigs_with_client_certificates_and_their_errors(tmp_path: Path) -> None:
    import base64

    from pytest_sremarathon.kube.api import KubeconfigError
    from pytest_sremarathon.serving import tls

    creds = tls.credentials()
    b64 = lambda data: base64.b64encode(data).decode()  # noqa: E731
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "kind-bench",
              "clusters": [{"name": "kind-bench", "cluster": {"server": "https://127.0.0.1:6443",
                                                              "certificate-authority-data": b64(creds.ca_pem)}}],
              "users": [{"name": "kind-bench", "user": {"client-certificate-data": b64(creds.cert_pem),
                                                        "client-key-data": b64(creds.key_pem)}}],
              "contexts": [{"name": "kind-bench", "context": {"cluster": "kind-bench", "user": "kind-bench"}}]}
    path = tmp_path / "kind.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    api = KubeApi.from_kubeconfig(path)
    assert (api.scheme, api.host, api.port, api.token) == ("https", "127.0.0.1", 6443, None)
    assert api.ssl_context is not None and api.ca_pem == creds.ca_pem
    config["users"][0]["user"] = {"exec": {"command": "gke-gcloud-auth-plugin"}}
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(KubeconfigError, match="exec plugin"):
        KubeApi.from_kubeconfig(path)
    with pytest.raises(KubeconfigError, match="no context 'other'"):
        KubeApi.from_kubeconfig(path, context="other")
    with pytest.raises(KubeconfigError, match="not found"):
        KubeApi.from_kubeconfig(tmp_path / "missing")


def test_every_kind_the_apps_and_their_changes_ship_has_a_path_on_a_real_cluster() -> None:
    """The adapter applies whatever a deploy renders: every object of every app's manifests, and
    of every curated change applied to them (one adds a PersistentVolumeClaim), must have its
    REST path, or the real backend fails at that deploy."""
    from pytest_sremarathon.faults.catalogue import load_catalogue
    from pytest_sremarathon.kube.api import object_path
    from pytest_sremarathon.pipeline.service import apply_edit

    kinds: set[str] = set()
    for root in sorted(p for p in APPS_DIR.iterdir() if (p / "manifests").is_dir()):
        files = {f"manifests/{p.name}": p.read_text() for p in sorted((root / "manifests").glob("*.yaml"))}
        variants = [files]
        for change in load_catalogue(root) if (root / "changes").is_dir() else []:
            edited = dict(files)
            for e in change.edits:
                if e.file in edited:
                    edited[e.file] = apply_edit(edited[e.file], e.find, e.replace)
            variants.append(edited)
        for variant in variants:
            for text in variant.values():
                for doc in yaml.safe_load_all(text):
                    if isinstance(doc, dict):
                        object_path(doc)  # raises for a kind the adapter does not know
                        kinds.add(doc["kind"])
    assert "PersistentVolumeClaim" in kinds
