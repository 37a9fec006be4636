"""DaemonSet, Job and CronJob as a client meets them on the twin: discovery, `kubectl get`
columns, describe and explain, the controllers' behaviour (a daemon per eligible node through
cordon and taints, rolling updates and `kubectl rollout status/restart/undo ds`; Jobs that run
busybox commands to completion, retry to their backoff limit, hit their deadline and expire;
CronJobs that start Jobs on schedule under each concurrency policy, keep their history and
answer `kubectl create job --from=cronjob/x`) — with real kubectl and the official client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config
from support.admission import RecordingAdmission
from support.kubectl import Kubectl, kubectl_for
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.k8s.objects import pod_is_active
from pytest_sremarathon.scenario import load_scenario

TOKEN = "batch-agent-token"
NS = "default"  # (the apps' namespaces run their own CronJobs)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("batch")
    s = BackendTwin(load_scenario(DEFAULT_SCENARIO), tmp, admission=RecordingAdmission(), tokens={TOKEN: "agent"})
    s.kubeconfig = s.backend.server.write_kubeconfig(tmp / "sim.kubeconfig", TOKEN)  # type: ignore[attr-defined]
    s.run(60)
    yield s
    s.close()


@pytest.fixture
def kc(sim: Any, tmp_path: Path) -> Kubectl:
    return kubectl_for(sim.kubeconfig, tmp_path / "cache")


def _api(sim: Any) -> k8s.ApiClient:
    return config.new_client_from_config(config_file=str(sim.kubeconfig))


def _pods(sim: Any, **labels: str) -> list[dict[str, Any]]:
    return [p for p in sim.store.list("Pod", NS) if pod_is_active(p)
            and all(p["metadata"]["labels"].get(k) == v for k, v in labels.items())]


def _nodes(sim: Any) -> list[str]:
    return [n["metadata"]["name"] for n in sim.store.list("Node")]


DS = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {name: agent}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {name: agent}}
    spec:
      containers:
      - {name: agent, image: "busybox:1.36", command: [sh, -c, "sleep infinity"],
         resources: {requests: {cpu: 10m, memory: 16Mi}}}
"""


def test_a_daemonset_runs_one_pod_per_node_through_cordon_taints_and_rollouts(sim: Any, kc: Kubectl) -> None:
    kc("apply", "-f", "-", input=DS)
    nodes = _nodes(sim)
    pods = _pods(sim, name="agent")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(nodes)  # at once: the controller reacts
    sim.run(60)
    rows = kc("get", "ds", "agent", "-n", NS, "-o", "wide").splitlines()
    assert rows[0].split() == ["NAME", "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE", "NODE", "SELECTOR",
                               "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    n = str(len(nodes))
    assert rows[1].split()[:7] == ["agent", n, n, n, n, n, "<none>"]
    assert "successfully rolled out" in kc("rollout", "status", "ds/agent", "-n", NS, "--timeout=5s")
    # A cordoned node keeps its daemon; a NoSchedule taint the template does not tolerate
    # keeps a new one off (the existing one stays, as on a real cluster).
    kc("cordon", nodes[0])
    sim.run(30)
    assert sorted(p["spec"]["nodeName"] for p in _pods(sim, name="agent")) == sorted(nodes)
    kc("uncordon", nodes[0])
    # A nodeSelector narrows it to the zone's nodes; the others' daemons go.
    kc("patch", "ds", "agent", "-n", NS, "-p",
       '{"spec":{"template":{"spec":{"nodeSelector":{"topology.kubernetes.io/zone":"zone-a"}}}}}')
    for _ in range(10):
        sim.run(30)
    zone_a = [n["metadata"]["name"] for n in sim.store.list("Node")
              if n["metadata"]["labels"]["topology.kubernetes.io/zone"] == "zone-a"]
    assert sorted(p["spec"]["nodeName"] for p in _pods(sim, name="agent")) == sorted(zone_a)
    history = kc("rollout", "history", "ds/agent", "-n", NS)
    assert "1 " in history and "2 " in history
    revisions = kc("get", "controllerrevisions", "-n", NS).splitlines()
    assert revisions[0].split() == ["NAME", "CONTROLLER", "REVISION", "AGE"]
    assert any("daemonset.apps/agent" in r for r in revisions[1:])
    kc("rollout", "undo", "ds/agent", "-n", NS)
    for _ in range(10):
        sim.run(30)
    assert sorted(p["spec"]["nodeName"] for p in _pods(sim, name="agent")) == sorted(nodes)
    assert "successfully rolled out" in kc("rollout", "status", "ds/agent", "-n", NS, "--timeout=5s")
    # A rolling restart replaces every daemon, at most maxUnavailable (1) down at a time.
    before = {p["metadata"]["name"] for p in _pods(sim, name="agent")}
    kc("rollout", "restart", "ds/agent", "-n", NS)
    ready = sum(1 for p in _pods(sim, name="agent") if p["status"].get("phase") == "Running")
    assert ready >= len(nodes) - 1
    for _ in range(12):
        sim.run(30)
    after = {p["metadata"]["name"] for p in _pods(sim, name="agent")}
    assert not before & after and len(after) == len(nodes)
    described = kc("describe", "ds", "agent", "-n", NS)
    assert f"Desired Number of Nodes Scheduled: {len(nodes)}" in described and "SuccessfulCreate" in described
    ds = k8s.AppsV1Api(_api(sim)).read_namespaced_daemon_set("agent", NS)
    assert ds.status.number_ready == len(nodes) and ds.status.updated_number_scheduled == len(nodes)
    kc("delete", "ds", "agent", "-n", NS)
    assert _pods(sim, name="agent") == []


JOB = """
apiVersion: batch/v1
kind: Job
metadata: {name: %(name)s, namespace: default}
spec:
  completions: %(completions)d
  parallelism: %(parallelism)d
  backoffLimit: %(backoff)d
  template:
    spec:
      restartPolicy: Never
      containers:
      - {name: work, image: "busybox:1.36", command: [sh, -c, "%(script)s"]}
"""


def _job(name: str, script: str, completions: int = 1, parallelism: int = 1, backoff: int = 6) -> str:
    return JOB % {"name": name, "script": script, "completions": completions, "parallelism": parallelism,
                  "backoff": backoff}


def test_a_job_runs_its_pods_to_completion(sim: Any, kc: Kubectl) -> None:
    kc("apply", "-f", "-", input=_job("report", "echo rows=42; sleep 40", completions=3, parallelism=2))
    pods = _pods(sim, **{"job-name": "report"})
    assert len(pods) == 2  # parallelism, at once
    labels = pods[0]["metadata"]["labels"]
    uid = sim.store.get("Job", NS, "report")["metadata"]["uid"]
    assert labels["controller-uid"] == uid and labels["batch.kubernetes.io/job-name"] == "report"
    sim.run(30)
    rows = kc("get", "jobs", "-n", NS, "-o", "wide").splitlines()
    assert rows[0].split() == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
    assert rows[1].split()[:3] == ["report", "Running", "0/3"]
    for _ in range(8):
        sim.run(30)
    job = k8s.BatchV1Api(_api(sim)).read_namespaced_job("report", NS)
    assert job.status.succeeded == 3 and job.status.completion_time is not None
    assert [c.type for c in job.status.conditions] == ["SuccessCriteriaMet", "Complete"]
    assert kc("get", "job", "report", "-n", NS).splitlines()[1].split()[:3] == ["report", "Complete", "3/3"]
    done = [p for p in sim.store.list("Pod", NS) if p["metadata"]["labels"].get("job-name") == "report"]
    assert {p["status"]["phase"] for p in done} == {"Succeeded"} and len(done) == 3
    assert kc("logs", "job/report", "-n", NS).strip() == "rows=42"
    described = kc("describe", "job", "report", "-n", NS)
    assert "Pods Statuses:    0 Active (0 Ready) / 3 Succeeded / 0 Failed" in described
    assert "Completed" in described
    kc("wait", "--for=condition=complete", "job/report", "-n", NS, "--timeout=5s")
    kc("delete", "job", "report", "-n", NS)
    assert [p for p in sim.store.list("Pod", NS) if p["metadata"]["labels"].get("job-name") == "report"] == []


def test_a_failing_job_backs_off_to_its_limit_and_a_deadline_ends_a_slow_one(sim: Any, kc: Kubectl) -> None:
    kc("apply", "-f", "-", input=_job("broken", "echo cannot connect; exit 3", backoff=2))
    for _ in range(12):
        sim.run(30)
    job = sim.store.get("Job", NS, "broken")
    assert job["status"]["failed"] == 3
    failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded" and failed["status"] == "True"
    assert kc("get", "job", "broken", "-n", NS).splitlines()[1].split()[:3] == ["broken", "Failed", "0/1"]
    assert "BackoffLimitExceeded" in kc("describe", "job", "broken", "-n", NS)
    slow = _job("slow", "sleep 3600").replace("  backoffLimit", "  activeDeadlineSeconds: 60\n  backoffLimit")
    kc("apply", "-f", "-", input=slow)
    for _ in range(4):
        sim.run(30)
    job = sim.store.get("Job", NS, "slow")
    assert next(c for c in job["status"]["conditions"] if c["type"] == "Failed")["reason"] == "DeadlineExceeded"
    assert _pods(sim, **{"job-name": "slow"}) == []  # its running pod was stopped
    ttl = _job("short", "true").replace("  backoffLimit", "  ttlSecondsAfterFinished: 60\n  backoffLimit")
    kc("apply", "-f", "-", input=ttl)
    for _ in range(2):
        sim.run(30)
    assert sim.store.get("Job", NS, "short") is not None  # finished, its minute not yet over
    for _ in range(2):
        sim.run(30)
    assert sim.store.get("Job", NS, "short") is None
    kc("delete", "job", "broken", "slow", "-n", NS)


CRON = """
apiVersion: batch/v1
kind: CronJob
metadata: {name: %(name)s, namespace: default}
spec:
  schedule: "%(schedule)s"
  concurrencyPolicy: %(policy)s
  successfulJobsHistoryLimit: 2
  jobTemplate:
    spec:
      backoffLimit: 0
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: task, image: "busybox:1.36", command: [sh, -c, "%(script)s"]}
"""


def _owned_jobs(sim: Any, cronjob: str) -> list[dict[str, Any]]:
    return [j for j in sim.store.list("Job", NS)
            if any(r.get("name") == cronjob for r in j["metadata"].get("ownerReferences") or [])]


def test_a_cronjob_starts_jobs_on_its_schedule_and_keeps_its_history(sim: Any, kc: Kubectl) -> None:
    kc("apply", "-f", "-", input=CRON % {"name": "cleanup", "schedule": "*/2 * * * *", "policy": "Forbid",
                                         "script": "echo cleaned; sleep 20"})
    rows = kc("get", "cronjobs", "-n", NS).splitlines()
    assert rows[0].split() == ["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST", "SCHEDULE", "AGE"]
    assert rows[1].split()[:6] == ["cleanup", "*/2", "*", "*", "*", "*"]
    for _ in range(20):  # ten minutes: five starts
        sim.run(30)
    jobs = _owned_jobs(sim, "cleanup")
    assert len(jobs) == 2  # successfulJobsHistoryLimit
    for job in jobs:
        minutes = int(job["metadata"]["name"].rsplit("-", 1)[1])
        assert minutes % 2 == 0 and job["metadata"]["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"]
    cj = k8s.BatchV1Api(_api(sim)).read_namespaced_cron_job("cleanup", NS)
    assert cj.status.last_schedule_time is not None and cj.status.last_successful_time is not None
    assert cj.status.last_schedule_time.minute % 2 == 0
    described = kc("describe", "cronjob", "cleanup", "-n", NS)
    assert "Concurrency Policy:            Forbid" in described and "SawCompletedJob" in described
    kc("create", "job", "cleanup-by-hand", "--from=cronjob/cleanup", "-n", NS)
    manual = sim.store.get("Job", NS, "cleanup-by-hand")
    assert manual["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"] == "manual"
    assert _pods(sim, **{"job-name": "cleanup-by-hand"})
    kc("patch", "cronjob", "cleanup", "-n", NS, "-p", '{"spec":{"suspend":true}}')
    names = {j["metadata"]["name"] for j in _owned_jobs(sim, "cleanup")}
    for _ in range(8):
        sim.run(30)
    assert {j["metadata"]["name"] for j in _owned_jobs(sim, "cleanup")} <= names | {"cleanup-by-hand"}
    assert kc("get", "cj", "cleanup", "-n", NS).splitlines()[1].split()[6:8] == ["<none>", "True"]
    kc("delete", "cronjob", "cleanup", "-n", NS)


@pytest.mark.parametrize("policy, running", [("Allow", 3), ("Forbid", 1), ("Replace", 1)])
def test_concurrency_policies_when_jobs_outlast_the_period(sim: Any, kc: Kubectl, policy: str, running: int) -> None:
    name = f"pile-{policy.lower()}"
    kc("apply", "-f", "-", input=CRON % {"name": name, "schedule": "* * * * *", "policy": policy,
                                         "script": "sleep 3600"})
    for _ in range(7):  # 3.5 minutes: three starts
        sim.run(30)
    active = [j for j in _owned_jobs(sim, name) if not any(c.get("status") == "True" and c["type"] in ("Complete", "Failed")
                                                           for c in j.get("status", {}).get("conditions") or [])]
    assert len(active) == running
    cj = sim.store.get("CronJob", NS, name)
    assert len(cj["status"]["active"]) == running
    kc("delete", "cronjob", name, "-n", NS)
    assert _owned_jobs(sim, name) == []


def test_discovery_and_explain_for_the_batch_kinds(kc: Kubectl) -> None:
    names = kc("api-resources", "--api-group=batch", "-o", "name").split()
    assert names == ["cronjobs.batch", "jobs.batch"]
    assert "daemonsets" in kc("api-resources", "--api-group=apps")
    for kind in ("daemonset", "job", "cronjob"):
        assert kind.upper() in kc("explain", kind).upper()
    bad = kc.run("create", "cronjob", "bad", "--image=busybox", "--schedule=61 * * * *", "-n", NS, check=False)
    assert bad.returncode != 0 and "spec.schedule" in bad.stderr


def test_every_node_runs_the_log_shipper_and_a_drain_leaves_it(sim: Any, kc: Kubectl) -> None:
    # The drain's evictions honour the apps' disruption budgets, which allow none until the
    # apps' pods are ready; nothing advances the cluster while kubectl waits. Run first in its
    # worker (pytest-xdist), the module's cluster has only had its first minute: let it settle.
    sim.run(300)
    agents = [p for p in sim.store.list("Pod", "kube-system") if pod_is_active(p)
              and p["metadata"]["labels"].get("app.kubernetes.io/name") == "node-log-shipper"]
    assert sorted(p["spec"]["nodeName"] for p in agents) == sorted(_nodes(sim))
    node = agents[0]["spec"]["nodeName"]
    assert "node-log-shipper: tailing /var/log/containers on " + node in kc(
        "logs", agents[0]["metadata"]["name"], "-n", "kube-system")
    refused = kc.run("drain", node, "--timeout=30s", check=False)
    assert refused.returncode != 0 and "cannot delete DaemonSet-managed Pods" in refused.stderr
    drained = kc.run("drain", node, "--ignore-daemonsets", "--force", "--delete-emptydir-data", "--timeout=60s")
    assert "ignoring DaemonSet-managed Pods: kube-system/" + agents[0]["metadata"]["name"] in drained.stderr
    on_node = [p for p in sim.store.list("Pod") if p["spec"].get("nodeName") == node and pod_is_active(p)]
    assert [p["metadata"]["name"] for p in on_node] == [agents[0]["metadata"]["name"]]
    sim.run(60)
    assert sim.store.get("Pod", "kube-system", agents[0]["metadata"]["name"]) is not None  # cordoned: it stays
    kc("uncordon", node)


CONTROL_PLANE = """
apiVersion: v1
kind: Node
metadata:
  name: control-plane-1
  labels: {kubernetes.io/hostname: control-plane-1, node-role.kubernetes.io/control-plane: "", topology.kubernetes.io/zone: zone-a}
spec:
  taints: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]
status:
  allocatable: {cpu: "4", memory: 16Gi, pods: "110"}
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  conditions: [{type: Ready, status: "True", reason: KubeletReady}]
"""


def test_daemons_follow_nodes_that_join_and_leave_and_honour_the_control_plane_taint(sim: Any, kc: Kubectl) -> None:
    """A node joins (a control-plane node, tainted) and leaves — the cloud's doing, not the
    agent's (the policy forbids adding or deleting nodes): the daemons follow."""
    kc("apply", "-f", "-", input=DS)

    def where(name: str, ns: str = NS) -> list[str]:
        return sorted(p["spec"]["nodeName"] for p in sim.store.list("Pod", ns) if pod_is_active(p)
                      and (p["metadata"]["labels"].get("name") == name
                           or p["metadata"]["labels"].get("app.kubernetes.io/name") == name))

    with sim.store.lock:
        sim.store.create(yaml.safe_load(CONTROL_PLANE))
        sim.cluster.network.node_up["control-plane-1"] = True  # its kubelet reports in
        sim.cluster.network.node_zone["control-plane-1"] = "zone-a"
    sim.run(30)
    # the app's agent does not tolerate the control plane's taint; the node agent tolerates all
    assert "control-plane-1" not in where("agent")
    assert "control-plane-1" in where("node-log-shipper", "kube-system")
    kc("patch", "ds", "agent", "-n", NS, "--type=json", "-p",
       '[{"op":"add","path":"/spec/template/spec/tolerations","value":'
       '[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}]}]')
    sim.run(30)
    assert "control-plane-1" in where("agent")
    with sim.store.lock:
        sim.store.delete("Node", None, "control-plane-1")
        del sim.cluster.network.node_up["control-plane-1"], sim.cluster.network.node_zone["control-plane-1"]
    sim.run(30)
    assert "control-plane-1" not in where("agent") and "control-plane-1" not in where("node-log-shipper", "kube-system")
    for _ in range(12):  # the rolling update the toleration started goes on once the node is gone
        sim.run(30)
    assert where("agent") == sorted(_nodes(sim))
    kc("delete", "ds", "agent", "-n", NS)
