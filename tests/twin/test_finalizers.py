"""Finalizers and storage object in-use protection, as kubectl sees them on a real cluster.

An object with ``metadata.finalizers`` is not removed by a DELETE: it gets a
``deletionTimestamp`` and stays (Terminating) until updates have removed every finalizer, and
no finalizer can be added to it meanwhile. Every claim and volume carries its protection
finalizer, so ``kubectl delete pvc`` of a claim a running pod mounts leaves it Terminating
(the pod keeps its disk) until the pod is gone; a bound volume waits for its claim the same way.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from support.admission import RecordingAdmission
from support.kubectl import Kubectl, kubectl_for
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.k8s.objects import pod_is_active
from pytest_sremarathon.policy import Policy
from pytest_sremarathon.scenario import load_scenario

TOKEN = "finalizer-agent-token"
NS = "hotel"
CLAIM = "data-mongodb-user-0"  # mongodb-user-0's claim (a StatefulSet's volume claim template)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("finalizers")
    # (the policy off: it would deny the ConfigMap delete the generic test makes)
    s = BackendTwin(load_scenario(DEFAULT_SCENARIO), tmp, admission=RecordingAdmission(Policy(rules=())),
                    tokens={TOKEN: "agent"})
    kubeconfig = s.backend.server.write_kubeconfig(tmp / "sim.kubeconfig", TOKEN)  # type: ignore[attr-defined]
    s.kc = kubectl_for(kubeconfig, tmp / "cache")  # type: ignore[attr-defined]
    s.run(120)
    yield s
    s.close()


def _status_column(kc: Kubectl, kind: str, name: str, *ns: str) -> str:
    header, row = kc("get", kind, name, *ns).splitlines()[:2]
    at = header.index("STATUS")  # (the columns are aligned: some headers are two words)
    return row[at:].split()[0]


def test_claims_and_volumes_carry_their_protection_finalizers(sim: Any) -> None:
    kc: Kubectl = sim.kc
    claim = kc.json("get", "pvc", CLAIM, "-n", NS)
    assert claim["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    pv = kc.json("get", "pv", claim["spec"]["volumeName"])
    assert "kubernetes.io/pv-protection" in pv["metadata"]["finalizers"]
    kc("create", "-n", NS, "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "scratch"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
    assert kc.json("get", "pvc", "scratch", "-n", NS)["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    # a claim no pod uses goes at once: the waiting `kubectl delete` returns
    kc("delete", "pvc", "scratch", "-n", NS, "--timeout=20s")
    assert kc.run("get", "pvc", "scratch", "-n", NS, check=False).returncode != 0


def test_a_claim_a_running_pod_mounts_stays_terminating_until_the_pod_is_gone(sim: Any) -> None:
    kc: Kubectl = sim.kc
    volume = kc.json("get", "pvc", CLAIM, "-n", NS)["spec"]["volumeName"]
    assert "deleted" in kc("delete", "pvc", CLAIM, "-n", NS, "--wait=false")
    sim.run(120)
    claim = kc.json("get", "pvc", CLAIM, "-n", NS)
    assert claim["metadata"]["deletionTimestamp"] and claim["status"]["phase"] == "Bound"
    assert _status_column(kc, "pvc", CLAIM, "-n", NS) == "Terminating"
    assert "Terminating" in kc("describe", "pvc", CLAIM, "-n", NS)
    assert kc.json("get", "pv", volume)["spec"]["claimRef"]["name"] == CLAIM  # the disk is still there
    pod = sim.store.get("Pod", NS, "mongodb-user-0")
    assert pod is not None and pod_is_active(pod) and pod["status"]["phase"] == "Running"

    # a pod scheduled onto a claim being deleted is refused by the scheduler
    kc("run", "reader", "-n", NS, "--image=busybox:1.36", "--restart=Never", "--overrides", json.dumps({
        "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": CLAIM}}],
                 "containers": [{"name": "reader", "image": "busybox:1.36", "command": ["sleep", "3600"],
                                 "volumeMounts": [{"name": "d", "mountPath": "/d"}]}]}}))
    events = kc("get", "events", "-n", NS, "--field-selector", "involvedObject.name=reader")
    assert f'persistentvolumeclaim "{CLAIM}" is being deleted' in events
    kc("delete", "pod", "reader", "-n", NS)

    # once the pod using it is gone, so is the claim (in the same moment), and its volume;
    # the StatefulSet's new pod gets a new claim and a new disk
    kc("delete", "pod", "mongodb-user-0", "-n", NS, "--wait=false")
    assert sim.store.get("PersistentVolumeClaim", NS, CLAIM) is None \
        or sim.store.get("PersistentVolumeClaim", NS, CLAIM)["metadata"]["uid"] != claim["metadata"]["uid"]
    assert kc.run("get", "pv", volume, check=False).returncode != 0
    sim.run(120)
    renewed = kc.json("get", "pvc", CLAIM, "-n", NS)
    assert renewed["metadata"]["uid"] != claim["metadata"]["uid"] and renewed["status"]["phase"] == "Bound"
    assert "deletionTimestamp" not in renewed["metadata"]
    assert sim.store.get("Pod", NS, "mongodb-user-0")["status"]["phase"] == "Running"


def test_a_bound_volume_deleted_stays_until_its_claim_lets_it_go(sim: Any) -> None:
    kc: Kubectl = sim.kc
    claim = kc.json("get", "pvc", "data-mongodb-hotels-0", "-n", NS)
    volume = claim["spec"]["volumeName"]
    kc("delete", "pv", volume, "--wait=false")
    sim.run(60)
    assert _status_column(kc, "pv", volume) == "Terminating"
    assert kc.json("get", "pvc", "data-mongodb-hotels-0", "-n", NS)["status"]["phase"] == "Bound"


def test_an_object_with_a_finalizer_waits_for_it_and_takes_no_new_one(sim: Any) -> None:
    kc: Kubectl = sim.kc
    kc("create", "configmap", "held", "-n", NS, "--from-literal=a=b")
    kc("patch", "configmap", "held", "-n", NS, "--type=merge", "-p",
       json.dumps({"metadata": {"finalizers": ["example.com/hold"]}}))
    waiting = kc.start("delete", "configmap", "held", "-n", NS, "--timeout=60s")
    try:
        for _ in range(100):
            held = sim.store.get("ConfigMap", NS, "held")
            if held is not None and held["metadata"].get("deletionTimestamp"):
                break
            time.sleep(0.1)
        assert waiting.poll() is None, waiting.communicate()  # kubectl delete waits for the object to go
        shown = kc.json("get", "configmap", "held", "-n", NS)
        assert shown["metadata"]["deletionTimestamp"] and shown["metadata"]["finalizers"] == ["example.com/hold"]
        added = kc.run("patch", "configmap", "held", "-n", NS, "--type=merge", "-p",
                       json.dumps({"metadata": {"finalizers": ["example.com/hold", "example.com/more"]}}), check=False)
        assert added.returncode != 0
        assert 'metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, ' \
               'found new finalizers []string{"example.com/more"}' in added.stderr
        kc("patch", "configmap", "held", "-n", NS, "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]')
        out, err = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, err
    assert 'configmap "held" deleted' in out
    assert sim.store.get("ConfigMap", NS, "held") is None
