"""End to end on a real two-zone kind cluster: ``pytest -m kind tests/kube``.

Needs the ``kind`` CLI, a running Docker and the internet (kind's node image and
``python:3.11-slim`` are pulled once). Elsewhere every test here skips and says why. The
cluster (``sremarathon-e2e``, or ``$SREMARATHON_E2E_CLUSTER``) is created once for the module
and deleted afterwards unless ``SREMARATHON_E2E_KEEP=1``; a run takes about 25 minutes, most
of it the 20 virtual minutes of the marathon, which run in real time on a real cluster.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.admission import RecordingAdmission
from support.kubectl import kubectl_for

from pytest_sremarathon.agent_host import AgentSpec
from pytest_sremarathon.bundle import open_bundle, verify
from pytest_sremarathon.kube import kind, node_faults
from pytest_sremarathon.kube.api import KubeApi
from pytest_sremarathon.kube.proxy import PolicyProxy
from pytest_sremarathon.marathon import Marathon, MarathonOptions
from pytest_sremarathon.scenario import load_scenario

pytestmark = pytest.mark.kind


class Cluster:
    def __init__(self, cluster: kind.KindCluster, kubeconfig: Path, api: KubeApi) -> None:
        self.kind, self.kubeconfig, self.api = cluster, kubeconfig, api


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = kind.unavailable()
    if why is not None:
        pytest.skip(f"the kind end-to-end tests need kind and a running Docker: {why}")
    k = kind.KindCluster(os.environ.get("SREMARATHON_E2E_CLUSTER", "sremarathon-e2e"),
                         tmp_path_factory.mktemp("kind"), progress=lambda msg: print(msg, flush=True))
    kubeconfig = k.create()
    api = KubeApi.from_kubeconfig(kubeconfig)
    try:
        k.wait_nodes(api)
        yield Cluster(k, kubeconfig, api)
    finally:
        if k.created and os.environ.get("SREMARATHON_E2E_KEEP") != "1":
            k.delete()


def test_the_cluster_has_two_zones_of_named_workers(cluster: Cluster, tmp_path: Path) -> None:
    kubectl = kubectl_for(cluster.kubeconfig, tmp_path / "cache")
    nodes = kubectl.json("get", "nodes")["items"]
    zones = {n["metadata"]["name"]: n["metadata"]["labels"].get("topology.kubernetes.io/zone") for n in nodes}
    assert {k: v for k, v in zones.items() if v} == {"worker-a1": "zone-a", "worker-a2": "zone-a",
                                                      "worker-b1": "zone-b", "worker-b2": "zone-b"}
    infos = {n.name: n for n in node_faults.nodes_from_api(nodes)}
    assert infos["worker-b1"].container.startswith(cluster.kind.name + "-worker")


def test_a_node_failure_pauses_the_node_and_cleanup_brings_it_back(cluster: Cluster) -> None:
    nodes = node_faults.nodes_from_api(cluster.api.get("/api/v1/nodes")["items"])
    action = node_faults.node_failure(nodes, "worker-a2")
    container = action.inject[0][-1]

    def paused() -> bool:
        out = subprocess.run(["docker", "inspect", "-f", "{{.State.Paused}}", container], capture_output=True,
                             text=True, check=True).stdout.strip()
        return out == "true"

    node_faults.inject(action)
    try:
        assert paused()
    finally:
        node_faults.cleanup(action)
    assert not paused()
    latency = node_faults.zone_latency(nodes, "zone-b", 50)
    node_faults.inject(latency)
    node_faults.cleanup(latency)
    partition = node_faults.zone_partition(nodes, "zone-a", "zone-b")
    node_faults.inject(partition)
    node_faults.cleanup(partition)


def test_a_short_marathon_runs_on_kind(cluster: Cluster, write_scenario, tmp_path: Path) -> None:
    path = write_scenario("kind-short", apps=["shop"], duration="20m", segment="20m", cadence="5m",
                          schedule={"faults": 3, "warmup": "3m", "quiet_tail": "3m", "duration_min": "4m",
                                    "duration_max": "8m"})
    scenario = load_scenario(path)
    options = MarathonOptions(agent=AgentSpec.from_options("pytest_sremarathon.baselines:RollbackAgent"), seed=3,
                              out_dir=tmp_path / "runs", backend=f"kubeconfig:{cluster.kubeconfig}")
    t0 = time.monotonic()
    result = Marathon(scenario, options).run()
    assert time.monotonic() - t0 >= 20 * 60 * 0.9  # virtual time does not outrun the cluster
    assert verify(result.bundle).ok
    events = open_bundle(result.bundle).events
    start = next(e for e in events if e.type == "run.start")
    assert start.data["backend"].startswith("kubeconfig:")
    deploys = [e for e in events if e.type == "pipeline.deploy"]
    assert deploys and set(deploys[0].data["artifacts"]) >= {"frontend", "cart", "currency"}
    slis = [e.data["services"] for e in events if e.type == "sli"]
    assert any(s.get("shop/frontend", [0])[0] > 0 for s in slis)  # real requests, scraped through the pod proxy
    faults = [e for e in events if e.type in ("truth.fault", "truth.fault_skipped")]
    assert faults  # injected for real, or skipped with the reason recorded
    # the shop is still served by the images the pipeline built
    pods = cluster.api.get("/api/v1/namespaces/shop/pods")["items"]
    images = {c["image"] for p in pods for c in p["spec"]["containers"]}
    assert all(i.startswith("registry.sremarathon.local/shop/") for i in images)
    assert result.score.complete and 0 <= result.score.score <= 100


def test_kubectl_through_the_policy_layer_on_kind(cluster: Cluster, tmp_path: Path) -> None:
    recorder = RecordingAdmission()
    with PolicyProxy(cluster.api, tokens={"agent-e2e": "agent"}, admission=recorder) as proxy:
        kubeconfig = proxy.write_kubeconfig(tmp_path / "agent.kubeconfig", "agent-e2e")
        kubectl = kubectl_for(kubeconfig, tmp_path / "cache")
        assert "worker-a1" in kubectl("get", "nodes")
        proc = kubectl.run("delete", "namespace", "kube-system", check=False)
        assert proc.returncode != 0 and "denied by sremarathon policy" in proc.stderr
    assert recorder.records and recorder.records[-1][2] == 403
