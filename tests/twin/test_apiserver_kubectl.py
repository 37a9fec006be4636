"""The twin API server through the real ``kubectl`` binary (1.32, plus 1.27 and 1.33 for the
core verbs). The controllers are not running here: these tests check API semantics — what
kubectl sends and what it makes of the answers — not reconciliation."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import timedelta

import yaml

NS = "shop"
POD_A, POD_B = "web-7d4b9c8f6d-abcde", "web-7d4b9c8f6d-fghij"

MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  namespace: shop
  labels: {app: api}
spec:
  replicas: 2
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api}
    spec:
      containers:
      - name: api
        image: registry.local/api:1.0
        ports: [{containerPort: 9090}]
        env:
        - {name: A, value: "1"}
        - {name: B, value: "2"}
      - name: proxy
        image: registry.local/proxy:2.0
---
apiVersion: v1
kind: ConfigMap
metadata: {name: api-config, namespace: shop}
data: {LEVEL: info}
"""


def _table(out: str) -> list[list[str]]:
    return [line.split() for line in out.strip().splitlines()]


# -- every kubectl version: get / describe / apply / patch ------------------------------------

def test_get_tables(any_kubectl):
    rows = _table(any_kubectl("get", "pods", "-n", NS))
    assert rows[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows[1] == [POD_A, "1/1", "Running", "0", "5m"]
    assert rows[2] == [POD_B, "1/1", "Running", "3", "(5m", "ago)", "5m"]
    wide = _table(any_kubectl("get", "pods", "-n", NS, "-o", "wide"))
    assert wide[0][5:7] == ["IP", "NODE"] and wide[1][5:7] == ["10.244.2.11", "node-a1"]
    deploy = _table(any_kubectl("get", "deploy", "-n", NS))
    assert deploy == [["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], ["web", "2/2", "2", "2", "15m"]]
    nodes = _table(any_kubectl("get", "nodes", "-L", "topology.kubernetes.io/zone"))
    assert [(r[0], r[1], r[-1]) for r in nodes[1:]] == [("node-a1", "Ready", "zone-a"), ("node-b1", "Ready", "zone-b")]
    pod = any_kubectl.json("get", "pod", POD_B, "-n", NS)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 3


def test_describe(any_kubectl):
    out = any_kubectl("describe", "pod", POD_B, "-n", NS)
    assert "Node:             node-b1/" in out and "OOMKilled" in out
    assert "Back-off restarting failed container" in out  # events found by involvedObject field selector
    # kubectl ages events against the wall clock: the twin serves their times so that it shows
    # their virtual age (they were recorded five virtual minutes ago), not the year to 2026-01-05
    events = out.split("Events:")[1]
    assert "5m (x3 over 5m)" in events and "5m (x2 over 5m)" in events, events
    out = any_kubectl("describe", "deployment", "web", "-n", NS)
    assert "RollingUpdate" in out and "NewReplicaSet:   web-7d4b9c8f6d (2/2 replicas created)" in out
    out = any_kubectl("describe", "node", "node-a1")
    assert "topology.kubernetes.io/zone=zone-a" in out and POD_A in out and POD_B not in out


def test_apply_create_then_update(any_kubectl, twin):
    out = any_kubectl("apply", "-f", "-", input=MANIFEST)
    assert "deployment.apps/api created" in out and "configmap/api-config created" in out
    dep = twin.store.get("Deployment", NS, "api")
    assert "kubectl.kubernetes.io/last-applied-configuration" in dep["metadata"]["annotations"]
    changed = MANIFEST.replace("api:1.0", "api:1.1").replace('value: "2"', 'value: "3"')
    out = any_kubectl("apply", "-f", "-", input=changed)
    assert "deployment.apps/api configured" in out and "configmap/api-config unchanged" in out
    dep = twin.store.get("Deployment", NS, "api")
    containers = dep["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in containers] == ["registry.local/api:1.1", "registry.local/proxy:2.0"]
    assert containers[0]["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}]
    assert dep["metadata"]["generation"] == 2
    # removing an env var from the manifest removes it from the live object (three-way merge)
    out = any_kubectl("apply", "-f", "-", input=changed.replace('        - {name: B, value: "3"}\n', ""))
    containers = twin.store.get("Deployment", NS, "api")["spec"]["template"]["spec"]["containers"]
    assert containers[0]["env"] == [{"name": "A", "value": "1"}]


def test_patch(any_kubectl, twin):
    out = any_kubectl("patch", "deployment", "web", "-n", NS, "-p",
                      '{"spec":{"template":{"spec":{"containers":[{"name":"web","image":"registry.local/web:2.0"}]}}}}')
    assert out.strip() == "deployment.apps/web patched"
    c = twin.store.get("Deployment", NS, "web")["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == "registry.local/web:2.0" and c["env"] == [{"name": "MODE", "value": "prod"}]
    any_kubectl("patch", "deployment", "web", "-n", NS, "--type=merge", "-p", '{"metadata":{"labels":{"x":"y"}}}')
    any_kubectl("patch", "deployment", "web", "-n", NS, "--type=json",
                "-p", '[{"op":"replace","path":"/spec/revisionHistoryLimit","value":3}]')
    dep = twin.store.get("Deployment", NS, "web")
    assert dep["metadata"]["labels"]["x"] == "y" and dep["spec"]["revisionHistoryLimit"] == 3
    proc = any_kubectl.run("patch", "deployment", "ghost", "-n", NS, "-p", "{}", check=False)
    assert proc.returncode == 1
    assert 'Error from server (NotFound): deployments.apps "ghost" not found' in proc.stderr


# -- kubectl 1.32: the rest of the operator's toolbox --------------------------------------------

def test_get_variants(kubectl):
    rows = _table(kubectl("get", "pods", "-A", "--show-labels"))
    assert rows[0][0] == "NAMESPACE" and rows[0][-1] == "LABELS" and rows[1][0] == NS
    out = kubectl("get", "all", "-n", NS)
    for name in ("pod/" + POD_A, "service/web", "deployment.apps/web", "replicaset.apps/web-7d4b9c8f6d"):
        assert name in out
    rows = _table(kubectl("get", "rs,svc,ep,cm", "-n", NS, "-o", "wide"))
    assert ["replicaset.apps/web-7d4b9c8f6d", "2", "2", "2", "5m", "web", "registry.local/web:1.1",
            "app=web,pod-template-hash=7d4b9c8f6d"] in rows
    assert ["service/web", "ClusterIP", "10.96.0.20", "<none>", "80/TCP", "5m", "app=web"] in rows
    assert ["endpoints/web", "10.244.2.11:8080,10.244.3.12:8080", "5m"] in rows
    assert ["configmap/web-config", "2", "5m"] in rows
    events = kubectl("get", "events", "-n", NS)
    assert "BackOff" in events and "pod/" + POD_B in events
    assert _table(kubectl("get", "pods", "-n", NS, "-l", "app=web", "--field-selector", "spec.nodeName=node-b1",
                          "-o", "name")) == [["pod/" + POD_B]]
    assert kubectl("get", "ns", "-o", "jsonpath={.items[*].metadata.name}") == "default shop"
    resources = kubectl("api-resources")
    assert "deployments" in resources and "metrics.k8s.io/v1beta1" in resources


def test_ages_follow_virtual_time(kubectl, twin):
    twin.clock.advance(timedelta(days=2, hours=3).total_seconds())
    rows = _table(kubectl("get", "pods", "-n", NS))
    assert rows[1][-1] == "2d3h"


def test_scale_set_image_and_rollouts(kubectl, twin):
    assert kubectl("scale", "deployment/web", "-n", NS, "--replicas=3").strip() == "deployment.apps/web scaled"
    assert twin.store.get("Deployment", NS, "web")["spec"]["replicas"] == 3
    kubectl("set", "image", "deployment/web", "-n", NS, "web=registry.local/web:1.2")
    dep = twin.store.get("Deployment", NS, "web")
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/web:1.2"
    history = kubectl("rollout", "history", "deployment/web", "-n", NS)
    assert _table(history)[1:] == [["REVISION", "CHANGE-CAUSE"], ["1", "initial", "release"],
                                   ["2", "bump", "to", "1.1"]]
    assert "registry.local/web:1.0" in kubectl("rollout", "history", "deployment/web", "-n", NS, "--revision=1")
    assert "rolled back" in kubectl("rollout", "undo", "deployment/web", "-n", NS)
    dep = twin.store.get("Deployment", NS, "web")
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.local/web:1.0"
    assert "pod-template-hash" not in dep["spec"]["template"]["metadata"]["labels"]
    kubectl("rollout", "restart", "deployment/web", "-n", NS)
    dep = twin.store.get("Deployment", NS, "web")
    assert "kubectl.kubernetes.io/restartedAt" in dep["spec"]["template"]["metadata"]["annotations"]
    kubectl("rollout", "pause", "deployment/web", "-n", NS)
    assert twin.store.get("Deployment", NS, "web")["spec"]["paused"] is True
    kubectl("rollout", "resume", "deployment/web", "-n", NS)
    assert "paused" not in twin.store.get("Deployment", NS, "web")["spec"]


def test_rollout_undo_restores_a_simulation_template_byte_for_byte(kubectl, twin):
    # objects made by the simulation carry no API defaults; undo must give back exactly the old
    # ReplicaSet's template (minus pod-template-hash) so that the controller reuses that ReplicaSet
    template = {"metadata": {"labels": {"app": "bare"}},
                "spec": {"containers": [{"name": "c", "image": "registry.local/bare:1"}]}}
    with twin.store.lock:
        dep = twin.store.create({"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": "bare", "namespace": NS,
                                              "annotations": {"deployment.kubernetes.io/revision": "1"}},
                                 "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bare"}},
                                          "template": json.loads(json.dumps(template))}})
        rs_template = json.loads(json.dumps(template))
        rs_template["metadata"]["labels"]["pod-template-hash"] = "h1"
        twin.store.create({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                           "metadata": {"name": "bare-h1", "namespace": NS,
                                        "labels": {"app": "bare", "pod-template-hash": "h1"},
                                        "annotations": {"deployment.kubernetes.io/revision": "1"},
                                        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                             "name": "bare", "uid": dep["metadata"]["uid"],
                                                             "controller": True}]},
                           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "bare",
                                                                                "pod-template-hash": "h1"}},
                                    "template": rs_template}})
    kubectl("set", "image", "deployment/bare", "-n", NS, "c=registry.local/bare:2")
    assert twin.store.get("Deployment", NS, "bare")["spec"]["template"]["spec"] == {
        "containers": [{"name": "c", "image": "registry.local/bare:2"}]}  # no defaults slipped in
    with twin.store.lock:  # what the controller would do: a second ReplicaSet, revision 2
        dep = twin.store.get("Deployment", NS, "bare")
        dep["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "2"
        twin.store.touch(dep)
        rs2 = json.loads(json.dumps(twin.store.get("ReplicaSet", NS, "bare-h1")))
        rs2["metadata"] = {**rs2["metadata"], "name": "bare-h2", "annotations": {
            "deployment.kubernetes.io/revision": "2"}}
        for k in ("uid", "resourceVersion", "creationTimestamp"):
            rs2["metadata"].pop(k)
        rs2["spec"]["template"] = json.loads(json.dumps(dep["spec"]["template"]))
        twin.store.create(rs2)
    kubectl("rollout", "undo", "deployment/bare", "-n", NS)
    assert twin.store.get("Deployment", NS, "bare")["spec"]["template"] == template


def test_rollout_status_and_wait(kubectl, twin):
    out = kubectl("rollout", "status", "deployment/web", "-n", NS, "--timeout=10s")
    assert out.strip() == 'deployment "web" successfully rolled out'
    out = kubectl("wait", "--for=condition=Available", "deployment/web", "-n", NS, "--timeout=10s")
    assert out.strip() == "deployment.apps/web condition met"
    with twin.store.lock:
        dep = twin.store.get("Deployment", NS, "web")
        dep["status"]["conditions"][1].update(reason="ProgressDeadlineExceeded", status="False")
        dep["metadata"]["generation"] = 2
        dep["status"]["observedGeneration"] = 2
        dep["status"]["updatedReplicas"] = 1
        twin.store.touch(dep)
    proc = kubectl.run("rollout", "status", "deployment/web", "-n", NS, "--timeout=10s", check=False)
    assert proc.returncode == 1 and 'deployment "web" exceeded its progress deadline' in proc.stderr


def test_label_annotate_and_stale_resource_version(kubectl, twin):
    kubectl("label", "pod", POD_A, "-n", NS, "tier=frontend")
    kubectl("annotate", "pod", POD_A, "-n", NS, "note=checked")
    md = twin.store.get("Pod", NS, POD_A)["metadata"]
    assert md["labels"]["tier"] == "frontend" and md["annotations"]["note"] == "checked"
    rows = _table(kubectl("get", "pods", "-n", NS, "-L", "tier"))
    assert rows[1][-1] == "frontend"
    proc = kubectl.run("label", "pod", POD_A, "-n", NS, "x=y", "--resource-version=1", check=False)
    assert proc.returncode == 1 and "Error from server (Conflict)" in proc.stderr
    kubectl("label", "pod", POD_A, "-n", NS, "tier-")
    assert "tier" not in twin.store.get("Pod", NS, POD_A)["metadata"]["labels"]


def test_cordon_drain_uncordon(kubectl, twin):
    assert "cordoned" in kubectl("cordon", "node-a1")
    assert "SchedulingDisabled" in kubectl("get", "node", "node-a1")
    out = kubectl("drain", "node-a1", "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=20s")
    assert f"pod/{POD_A} evicted" in out and "node/node-a1 drained" in out
    assert twin.store.get("Pod", NS, POD_A) is None and twin.store.get("Pod", NS, POD_B) is not None
    assert any(r[0].verb == "evict" and r[2] == 201 for r in twin.admission.records)
    kubectl("uncordon", "node-a1")
    assert "unschedulable" not in twin.store.get("Node", None, "node-a1")["spec"]
    kubectl("taint", "node", "node-b1", "dedicated=web:NoSchedule")
    assert twin.store.get("Node", None, "node-b1")["spec"]["taints"] == [
        {"key": "dedicated", "value": "web", "effect": "NoSchedule"}]


def test_top(kubectl):
    rows = _table(kubectl("top", "nodes"))
    assert rows[0][:2] == ["NAME", "CPU(cores)"] and rows[1][:3] == ["node-a1", "850m", "22%"]
    rows = _table(kubectl("top", "pods", "-n", NS, "--containers"))
    assert rows[1][:3] == [POD_A, "web", "140m"]


def test_logs(kubectl, twin):
    t0 = twin.clock() - timedelta(minutes=3)
    twin.telemetry.logs[(NS, POD_B, "web", False)] = [(t0, "GET /cart 200"), (t0 + timedelta(minutes=1),
                                                                                "GET /cart 500")]
    twin.telemetry.logs[(NS, POD_B, "web", True)] = [(t0, "MemoryError: cannot allocate")]
    assert kubectl("logs", POD_B, "-n", NS) == "GET /cart 200\nGET /cart 500\n"
    assert kubectl("logs", POD_B, "-n", NS, "--tail=1", "--timestamps").endswith(".000000000Z GET /cart 500\n")
    assert kubectl("logs", POD_B, "-n", NS, "--previous") == "MemoryError: cannot allocate\n"
    assert kubectl("logs", POD_B, "-n", NS, "-c", "web", "--since=150s") == "GET /cart 500\n"
    assert kubectl("logs", POD_B, "-n", NS, "-f") == "GET /cart 200\nGET /cart 500\n"
    proc = kubectl.run("logs", POD_A, "-n", NS, "--previous", check=False)
    assert proc.returncode == 1 and "previous terminated container" in proc.stderr


def test_delete_create_replace(kubectl, twin):
    assert kubectl("delete", "pod", POD_A, "-n", NS).strip() == f'pod "{POD_A}" deleted'
    assert twin.store.get("Pod", NS, POD_A) is None
    proc = kubectl.run("delete", "deployment", "web", "-n", NS, check=False)
    assert proc.returncode == 1
    assert "Error from server (Forbidden): denied by sremarathon policy rule 'no-delete-workloads'" in proc.stderr
    proc = kubectl.run("scale", "deployment/web", "-n", NS, "--replicas=0", check=False)
    assert proc.returncode == 1 and "no-scale-to-zero" in proc.stderr
    assert "configmap/extra created" in kubectl("create", "configmap", "extra", "-n", NS, "--from-literal=a=1")
    cm = kubectl.json("get", "cm", "extra", "-n", NS)
    cm["data"]["a"] = "2"
    assert "configmap/extra replaced" in kubectl("replace", "-f", "-", input=json.dumps(cm))
    assert twin.store.get("ConfigMap", NS, "extra")["data"] == {"a": "2"}
    proc = kubectl.run("replace", "-f", "-", input=json.dumps(cm), check=False)  # stale resourceVersion
    assert proc.returncode == 1 and "the object has been modified" in proc.stderr
    proc = kubectl.run("create", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "broken", "namespace": NS},
         "spec": {"template": {"spec": {"containers": []}}}}), check=False)
    assert proc.returncode == 1
    assert 'The Deployment "broken" is invalid' in proc.stderr and "spec.selector: Required value" in proc.stderr


def test_create_generators_send_protobuf(kubectl, twin):
    # kubectl's typed clients POST application/vnd.kubernetes.protobuf bodies for these
    kubectl("create", "deployment", "cart", "-n", NS, "--image=registry.local/cart:1.4", "--replicas=2",
            "--port=8080")
    dep = twin.store.get("Deployment", NS, "cart")
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["selector"] == {"matchLabels": {"app": "cart"}}
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert (c["name"], c["image"], c["ports"]) == ("cart", "registry.local/cart:1.4",
                                                   [{"containerPort": 8080, "protocol": "TCP"}])
    assert "stdin" not in c and "minReadySeconds" not in dep["spec"]  # Go zero values do not leak in
    kubectl("create", "secret", "generic", "creds", "-n", NS, "--from-literal=password=s3cret")
    assert twin.store.get("Secret", NS, "creds")["data"] == {"password": "czNjcmV0"}
    kubectl("create", "service", "clusterip", "cart", "-n", NS, "--tcp=80:8080")
    port = twin.store.get("Service", NS, "cart")["spec"]["ports"][0]
    assert (port["port"], port["targetPort"]) == (80, 8080)
    kubectl("create", "namespace", "scratch")
    assert twin.store.get("Namespace", None, "scratch")["status"] == {"phase": "Active"}
    proc = kubectl.run("create", "deployment", "idle", "-n", NS, "--image=x:1", "--replicas=0", check=False)
    assert proc.returncode == 1 and "no-scale-to-zero" in proc.stderr  # an explicit 0 survives decoding


def test_server_side_apply_and_dry_run(kubectl, twin):
    out = kubectl("apply", "--server-side", "-f", "-", input=MANIFEST)
    assert "deployment.apps/api serverside-applied" in out
    out = kubectl("apply", "--server-side", "-f", "-", input=MANIFEST.replace("replicas: 2", "replicas: 4"))
    assert twin.store.get("Deployment", NS, "api")["spec"]["replicas"] == 4
    out = kubectl("scale", "deployment/api", "-n", NS, "--replicas=5", "--dry-run=server")
    assert "(server dry run)" in out and twin.store.get("Deployment", NS, "api")["spec"]["replicas"] == 4
    diff = kubectl.run("diff", "-f", "-", input=MANIFEST.replace("replicas: 2", "replicas: 6"), check=False)
    assert diff.returncode == 1 and "+  replicas: 6" in diff.stdout


def test_get_watch(kubectl, twin):
    proc = kubectl.start("get", "pods", "-n", NS, "-w", "--output-watch-events")
    try:
        header = proc.stdout.readline()
        assert header.split()[:2] == ["EVENT", "NAME"]
        initial = [proc.stdout.readline().split() for _ in range(2)]
        assert [r[:2] for r in initial] == [["ADDED", POD_A], ["ADDED", POD_B]]
        time.sleep(0.3)
        with twin.store.lock:
            pod = twin.store.get("Pod", NS, POD_A)
            pod["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
            pod["status"]["containerStatuses"][0]["ready"] = False
            twin.store.touch(pod)
        row = proc.stdout.readline().split()
        assert row[:4] == ["MODIFIED", POD_A, "0/1", "CrashLoopBackOff"]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_exec_is_refused_with_an_explanation(kubectl):
    proc = kubectl.run("exec", POD_A, "-n", NS, "--", "ls", check=False)
    assert proc.returncode == 1 and "pods/exec is not supported by the sremarathon twin" in proc.stderr


def test_bad_token_is_unauthorized(kubectl, twin, tmp_path):
    bad = twin.server.write_kubeconfig(tmp_path / "bad.kubeconfig", "not-a-token")
    proc = dataclasses.replace(kubectl, kubeconfig=bad).run("get", "pods", "-n", NS, check=False)
    assert proc.returncode == 1 and "You must be logged in to the server" in proc.stderr
