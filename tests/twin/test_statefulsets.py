"""StatefulSets and their storage, as kubectl and the official client see them on a real
cluster: stable ordinal names created in order, one claim per pod and template that outlives
the pod, dynamic provisioning by the default StorageClass when the first consumer is scheduled,
rolling updates from the highest ordinal down to the partition, ``kubectl rollout
status/history/undo/restart``, and a claim of a class that does not exist leaving its pod
Pending with the scheduler's message."""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config
from support.admission import RecordingAdmission
from support.kubectl import Kubectl, kubectl_for
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.k8s.objects import pod_is_active, pod_is_ready
from pytest_sremarathon.scenario import load_scenario

TOKEN = "sts-agent-token"
NS = "shop"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("sts")
    s = BackendTwin(load_scenario(DEFAULT_SCENARIO), tmp, admission=RecordingAdmission(), tokens={TOKEN: "agent"})
    s.kubeconfig = s.backend.server.write_kubeconfig(tmp / "sim.kubeconfig", TOKEN)  # type: ignore[attr-defined]
    s.kc = kubectl_for(s.kubeconfig, tmp / "cache")  # type: ignore[attr-defined]
    s.run(60)
    yield s
    s.close()


def _manifest(name: str, replicas: int = 3, image: str = "redis:7.2-alpine", storage_class: str | None = None,
              size: str = "1Gi") -> dict[str, Any]:
    claim: dict[str, Any] = {"metadata": {"name": "data"},
                             "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}
    if storage_class is not None:
        claim["spec"]["storageClassName"] = storage_class
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"serviceName": name, "replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "redis", "image": image,
                                                           "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                     "volumeClaimTemplates": [claim]}}


def _pods(sim: Any, app: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in sim.store.list("Pod", NS)
            if p["metadata"]["labels"].get("app") == app and pod_is_active(p)}


def _apps(sim: Any) -> k8s.AppsV1Api:
    return k8s.AppsV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig)))


def test_pods_are_created_in_order_with_stable_names_and_their_own_bound_claims(sim: Any) -> None:
    _apps(sim).create_namespaced_stateful_set(NS, _manifest("cache"))
    assert list(_pods(sim, "cache")) == ["cache-0"]  # OrderedReady: the next waits for this one to be ready
    sim.run(30)
    assert list(_pods(sim, "cache")) == ["cache-0"]
    sim.run(30)
    assert sorted(_pods(sim, "cache")) == ["cache-0", "cache-1"]
    sim.run(120)
    pods = _pods(sim, "cache")
    assert sorted(pods) == ["cache-0", "cache-1", "cache-2"] and all(pod_is_ready(p) for p in pods.values())
    assert pods["cache-1"]["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "cache-1"
    kc: Kubectl = sim.kc
    rows = kc("get", "sts", "cache", "-n", NS, "-o", "wide").splitlines()
    assert rows[0].split() == ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"]
    assert rows[1].split()[:2] == ["cache", "3/3"]
    pvcs = kc("get", "pvc", "-n", NS).splitlines()
    assert pvcs[0].split() == ["NAME", "STATUS", "VOLUME", "CAPACITY", "ACCESS", "MODES", "STORAGECLASS",
                               "VOLUMEATTRIBUTESCLASS", "AGE"]
    claims = {r.split()[0]: r.split() for r in pvcs[1:] if r.startswith("data-cache-")}  # beside the cart-cache's
    assert sorted(claims) == ["data-cache-0", "data-cache-1", "data-cache-2"]
    assert all(c[1] == "Bound" and c[3] == "1Gi" and c[4] == "RWO" and c[5] == "standard" for c in claims.values())
    volume = claims["data-cache-1"][2]
    pv = kc("get", "pv", volume).splitlines()[1].split()
    assert pv[:7] == [volume, "1Gi", "RWO", "Delete", "Bound", f"{NS}/data-cache-1", "standard"]
    sc = kc("get", "sc").splitlines()
    assert sc[0].split() == ["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION",
                             "AGE"]
    assert sc[1].split()[:2] == ["standard", "(default)"] and "WaitForFirstConsumer" in sc[1]
    # The volume is in the zone of the node its first pod was scheduled to.
    zone = sim.store.get("Node", None, pods["cache-1"]["spec"]["nodeName"])["metadata"]["labels"][
        "topology.kubernetes.io/zone"]
    assert zone in kc("get", "pv", volume, "-o", "jsonpath={.spec.nodeAffinity}")
    described = kc("describe", "pvc", "data-cache-1", "-n", NS)
    assert "ProvisioningSucceeded" in described and "Used By:" in described and "cache-1" in described
    # A deleted pod comes back under its name, with the same claim and volume.
    kc("delete", "pod", "cache-1", "-n", NS, "--wait=false")
    sim.run(30)
    assert "cache-1" in _pods(sim, "cache")
    assert kc("get", "pvc", "data-cache-1", "-n", NS, "-o", "jsonpath={.spec.volumeName}") == volume
    described = kc("describe", "sts", "cache", "-n", NS)
    assert "Pods Status:        3 Running" in described and "Volume Claims:" in described
    assert "Capacity:      1Gi" in described


def test_scale_down_removes_the_highest_ordinal_and_keeps_its_claim(sim: Any) -> None:
    kc: Kubectl = sim.kc
    kc("apply", "-f", "-", "-n", NS, input=_yaml(_manifest("queue", replicas=2)))
    sim.run(120)
    assert sorted(_pods(sim, "queue")) == ["queue-0", "queue-1"]
    kc("scale", "sts", "queue", "--replicas=1", "-n", NS)
    sim.run(30)
    assert sorted(_pods(sim, "queue")) == ["queue-0"]
    assert "Bound" in kc("get", "pvc", "data-queue-1", "-n", NS)  # the claim stays for a scale-up


def test_rolling_update_partition_rollout_status_history_and_undo(sim: Any) -> None:
    kc: Kubectl = sim.kc
    kc("apply", "-f", "-", "-n", NS, input=_yaml(_manifest("store")))
    sim.run(200)
    assert len(_pods(sim, "store")) == 3
    assert "roll out complete" in kc("rollout", "status", "sts/store", "-n", NS, "--timeout=5s")
    kc("patch", "sts", "store", "-n", NS, "-p", '{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}}}}')
    kc("set", "image", "sts/store", "redis=redis:7.4-alpine", "-n", NS)
    sim.run(120)
    images = {n: p["spec"]["containers"][0]["image"] for n, p in _pods(sim, "store").items()}
    assert images == {"store-0": "redis:7.2-alpine", "store-1": "redis:7.2-alpine", "store-2": "redis:7.4-alpine"}
    status = _apps(sim).read_namespaced_stateful_set("store", NS).status
    assert status.current_revision != status.update_revision and status.updated_replicas == 1
    kc("patch", "sts", "store", "-n", NS, "-p", '{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}')
    sim.run(240)
    images = {n: p["spec"]["containers"][0]["image"] for n, p in _pods(sim, "store").items()}
    assert set(images.values()) == {"redis:7.4-alpine"}
    status = _apps(sim).read_namespaced_stateful_set("store", NS).status
    assert status.current_revision == status.update_revision and status.ready_replicas == 3
    assert "roll out complete" in kc("rollout", "status", "sts/store", "-n", NS, "--timeout=5s")
    history = kc("rollout", "history", "sts/store", "-n", NS)
    assert "REVISION" in history and "1" in history and "2" in history
    assert len(kc("get", "controllerrevisions", "-n", NS, "-o", "name").split()) >= 2
    kc("rollout", "undo", "sts/store", "-n", NS)
    sim.run(240)
    images = {n: p["spec"]["containers"][0]["image"] for n, p in _pods(sim, "store").items()}
    assert set(images.values()) == {"redis:7.2-alpine"}
    kc("rollout", "restart", "sts/store", "-n", NS)
    sim.run(240)
    assert all("kubectl.kubernetes.io/restartedAt" in (p["metadata"].get("annotations") or {})
               for p in _pods(sim, "store").values())


def test_a_claim_of_a_missing_class_stays_pending_and_its_pod_unschedulable(sim: Any) -> None:
    kc: Kubectl = sim.kc
    kc("apply", "-f", "-", "-n", NS, input=_yaml(_manifest("broken", replicas=1, storage_class="fast-ssd")))
    sim.run(60)
    assert kc("get", "pvc", "data-broken-0", "-n", NS, "-o", "jsonpath={.status.phase}") == "Pending"
    assert 'storageclass.storage.k8s.io "fast-ssd" not found' in kc("describe", "pvc", "data-broken-0", "-n", NS)
    pod = kc("describe", "pod", "broken-0", "-n", NS)
    assert "pod has unbound immediate PersistentVolumeClaims" in pod and "FailedScheduling" in pod
    assert "0/1" in kc("get", "sts", "broken", "-n", NS)
    # kube-state-metrics shows it too, as a PromQL investigator would look.
    phase = json.loads(kc("get", "--raw", "/prometheus/api/v1/query?" + urllib.parse.urlencode(
        {"query": 'kube_persistentvolumeclaim_status_phase{persistentvolumeclaim="data-broken-0"} == 1'})))
    assert [r["metric"]["phase"] for r in phase["data"]["result"]] == ["Pending"]
    ready = json.loads(kc("get", "--raw", "/prometheus/api/v1/query?" + urllib.parse.urlencode(
        {"query": 'kube_statefulset_status_replicas_ready{statefulset="broken"}'})))
    assert [r["value"][1] for r in ready["data"]["result"]] == ["0"]
    # The claim template is immutable, as on a real API server.
    bad = kc.run("patch", "sts", "broken", "-n", NS, "--type=json", "-p",
                 '[{"op":"replace","path":"/spec/volumeClaimTemplates/0/spec/storageClassName","value":"standard"}]',
                 check=False)
    assert bad.returncode != 0 and "updates to statefulset spec for fields other than" in bad.stderr


def test_expanding_a_claim_grows_its_volume_and_shrinking_is_refused(sim: Any) -> None:
    kc: Kubectl = sim.kc
    kc("apply", "-f", "-", "-n", NS, input=_yaml(_manifest("grow", replicas=1)))
    sim.run(60)
    kc("patch", "pvc", "data-grow-0", "-n", NS, "-p", '{"spec":{"resources":{"requests":{"storage":"5Gi"}}}}')
    sim.run(30)
    assert kc("get", "pvc", "data-grow-0", "-n", NS, "-o", "jsonpath={.status.capacity.storage}") == "5Gi"
    volume = kc("get", "pvc", "data-grow-0", "-n", NS, "-o", "jsonpath={.spec.volumeName}")
    assert kc("get", "pv", volume, "-o", "jsonpath={.spec.capacity.storage}") == "5Gi"
    bad = kc.run("patch", "pvc", "data-grow-0", "-n", NS, "-p",
                 '{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}', check=False)
    assert bad.returncode != 0 and "can not be less than" in bad.stderr


def test_discovery_and_explain(sim: Any) -> None:
    kc: Kubectl = sim.kc
    names = kc("api-resources", "-o", "name").split()
    for res in ("statefulsets.apps", "controllerrevisions.apps", "persistentvolumeclaims", "persistentvolumes",
                "storageclasses.storage.k8s.io"):
        assert res in names
    assert "StatefulSet" in kc("explain", "statefulsets")
    assert "PersistentVolumeClaim" in kc("explain", "pvc")


def _yaml(obj: dict[str, Any]) -> str:
    import json
    return json.dumps(obj)


def test_the_official_client_reads_every_storage_kind(sim: Any) -> None:
    """The client's models (v37, pydantic) accept what the twin serves for each kind."""
    kc: Kubectl = sim.kc
    kc("apply", "-f", "-", "-n", NS, input=_yaml(_manifest("models", replicas=1)))
    sim.run(60)
    api = config.new_client_from_config(config_file=str(sim.kubeconfig))
    core, storage, apps = k8s.CoreV1Api(api), k8s.StorageV1Api(api), k8s.AppsV1Api(api)
    claim = core.read_namespaced_persistent_volume_claim("data-models-0", NS)
    assert claim.status.phase == "Bound" and claim.spec.storage_class_name == "standard"
    assert claim.status.capacity == {"storage": "1Gi"}
    pv = core.read_persistent_volume(claim.spec.volume_name)
    assert pv.spec.claim_ref.name == "data-models-0" and pv.spec.persistent_volume_reclaim_policy == "Delete"
    classes = storage.list_storage_class().items
    assert [c.metadata.name for c in classes] == ["standard", "standard-regional"]
    assert classes[0].allow_volume_expansion and classes[1].parameters["replication-type"] == "regional-pd"
    revisions = apps.list_namespaced_controller_revision(NS, label_selector="app=models").items
    assert len(revisions) == 1 and revisions[0].revision == 1
    status = apps.read_namespaced_stateful_set_status("models", NS).status
    assert status.ready_replicas == 1 and status.current_revision == revisions[0].metadata.name
    scale = apps.read_namespaced_stateful_set_scale("models", NS)
    assert scale.spec.replicas == 1
    assert "statefulset.apps/models" in kc("get", "all", "-n", NS, "-o", "name")
    assert "Claim:" in kc("describe", "pv", claim.spec.volume_name)
    assert re.search(r"IsDefaultClass: +Yes", kc("describe", "sc", "standard"))
