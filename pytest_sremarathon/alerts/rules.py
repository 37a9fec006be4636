"""Alert rules in the style of a kube-prometheus setup: each has a condition evaluated every
tick over metrics and cluster objects, a ``for:`` duration and a severity.

A condition reads what the cluster's Prometheus holds: the request rules the per-service
numbers of ``cluster.metrics``, which are sums of the very counts recorded into the TSDB at
that scrape (``twin/scraper.py``; on kube, the scraped counters' increments), the others the
objects and containers kube-state-metrics and cAdvisor export. Each rule also carries the
PromQL that computes the same condition over the recorded series (``query``, shown at
``/api/v1/rules``; tests/monitoring checks they agree). They are evaluated directly rather than
through the PromQL engine: the same numbers, without ~10 queries a tick over thousands of
series."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..k8s.objects import condition, pod_is_active, pod_is_ready
from ..k8s.quantity import memory_bytes

if TYPE_CHECKING:
    from ..apps import AppSpec
    from ..cluster import Cluster

# (labels, summary, description) for every series currently matching a rule
Match = tuple[dict[str, str], str, str]


@dataclass(frozen=True)
class Rule:
    name: str
    severity: str
    for_seconds: float
    evaluate: Callable[[Cluster, dict[str, AppSpec]], Iterator[Match]]
    group: str = "sremarathon.rules"  # the rule group /api/v1/rules lists it in
    query: str = ""  # the condition in PromQL over the recorded series
    # The kinds of objects that are the condition's only input (with the apps): while none of
    # them changed (``Store.kind_version``), its matches are the last evaluation's. Empty: it
    # reads something else too (metrics, containers) and is evaluated every tick.
    reads: tuple[str, ...] = ()
    # A condition over each of the apps' pods alone: the matches of one pod (its namespace, its
    # service, the pod). ``evaluate`` is then every pod's matches in list order, and the engine
    # keeps a pod's last ones while its resourceVersion has not moved (AlertEngine._pod_matches).
    each_pod: Optional[Callable[[str, str, dict], list[Match]]] = None


def _svc_labels(ns: str, svc: str) -> dict[str, str]:
    return {"namespace": ns, "app": ns, "service": svc}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def high_error_rate(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for ns, app in apps.items():
        for svc in app.services:
            ratio = _mean(cluster.metrics.window(ns, svc, "error_ratio", 4))
            if ratio > 0.05:
                yield (_svc_labels(ns, svc), f"{svc} is failing {ratio:.0%} of requests",
                       f"Error ratio of {ns}/{svc} over the last 2m is {ratio:.1%} (threshold 5%).")


def latency_slo_burn(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for ns, app in apps.items():
        for svc, spec in app.services.items():
            if not spec.slo_p99_ms:
                continue
            p99 = _mean(cluster.metrics.window(ns, svc, "latency_p99_ms", 4))
            if p99 > spec.slo_p99_ms:
                yield (_svc_labels(ns, svc), f"{svc} p99 latency above its SLO",
                       f"p99 latency of {ns}/{svc} is {p99:.0f}ms, SLO {spec.slo_p99_ms:.0f}ms.")


def app_pods(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[tuple[str, str, dict]]:
    for ns, app in apps.items():
        for pod in cluster.store.list("Pod", ns):
            svc = (pod["metadata"].get("labels") or {}).get("app", "")
            if svc in app.services:
                yield ns, svc, pod


def _crash_looping_pod(ns: str, svc: str, pod: dict) -> list[Match]:
    out: list[Match] = []
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        waiting = cs.get("state", {}).get("waiting") or {}
        if waiting.get("reason") in ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull",
                                     "CreateContainerConfigError"):
            out.append(({**_svc_labels(ns, svc), "pod": pod["metadata"]["name"], "container": cs["name"]},
                        f"Pod {ns}/{pod['metadata']['name']} is {waiting['reason']}",
                        f"Container {cs['name']} of pod {pod['metadata']['name']} is waiting: "
                        f"{waiting['reason']} (restarts: {cs.get('restartCount', 0)})."))
    return out


def _oom_killed_pod(ns: str, svc: str, pod: dict) -> list[Match]:
    out: list[Match] = []
    for cs in pod.get("status", {}).get("containerStatuses") or []:
        term = (cs.get("lastState") or {}).get("terminated") or {}
        if term.get("reason") == "OOMKilled" and cs.get("restartCount", 0) > 0:
            out.append(({**_svc_labels(ns, svc), "pod": pod["metadata"]["name"], "container": cs["name"]},
                        f"Container {cs['name']} in {ns}/{pod['metadata']['name']} was OOMKilled",
                        f"The container restarted {cs.get('restartCount')} time(s); last exit: OOMKilled."))
    return out


def _pod_not_ready(ns: str, svc: str, pod: dict) -> list[Match]:
    if pod["spec"].get("nodeName") and pod_is_active(pod) and not pod_is_ready(pod):
        return [({**_svc_labels(ns, svc), "pod": pod["metadata"]["name"]},
                 f"Pod {ns}/{pod['metadata']['name']} has been not ready for 10m",
                 f"Pod {pod['metadata']['name']} on {pod['spec']['nodeName']} is not ready.")]
    return []


def _pod_pending(ns: str, svc: str, pod: dict) -> list[Match]:
    if not pod["spec"].get("nodeName") and pod_is_active(pod):
        return [({**_svc_labels(ns, svc), "pod": pod["metadata"]["name"]},
                 f"Pod {ns}/{pod['metadata']['name']} cannot be scheduled",
                 (condition(pod, "PodScheduled") or {}).get("message", "Pod is pending."))]
    return []


def crash_looping(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for ns, svc, pod in app_pods(cluster, apps):
        yield from _crash_looping_pod(ns, svc, pod)


def oom_killed(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for ns, svc, pod in app_pods(cluster, apps):
        yield from _oom_killed_pod(ns, svc, pod)


def pods_not_ready(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for ns, svc, pod in app_pods(cluster, apps):
        yield from _pod_not_ready(ns, svc, pod)


def pods_pending(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for ns, svc, pod in app_pods(cluster, apps):
        yield from _pod_pending(ns, svc, pod)


def replicas_mismatch(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for ns in apps:
        for d in cluster.store.list("Deployment", ns):
            want = int(d["spec"].get("replicas", 1))
            have = int(d.get("status", {}).get("availableReplicas", 0))
            if have < want:
                yield ({**_svc_labels(ns, d["metadata"]["name"]), "deployment": d["metadata"]["name"]},
                       f"Deployment {ns}/{d['metadata']['name']} has {have}/{want} replicas available",
                       "Deployment has not matched the expected number of replicas for longer than 10 minutes.")


def statefulset_replicas_mismatch(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    """A datastore's StatefulSet with fewer ready replicas than it wants (kube-prometheus's
    KubeStatefulSetReplicasMismatch): its pod is down, or Pending on a claim it cannot mount."""
    for ns in apps:
        for s in cluster.store.list("StatefulSet", ns):
            want = int(s["spec"].get("replicas", 1))
            have = int(s.get("status", {}).get("readyReplicas", 0))
            if have != want:
                yield ({**_svc_labels(ns, s["metadata"]["name"]), "statefulset": s["metadata"]["name"]},
                       f"StatefulSet {ns}/{s['metadata']['name']} has {have}/{want} replicas ready",
                       "StatefulSet has not matched the expected number of replicas for longer than 10 minutes.")


def rollout_stuck(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for ns in apps:
        for d in cluster.store.list("Deployment", ns):
            c = condition(d, "Progressing")
            if c and c.get("reason") == "ProgressDeadlineExceeded":
                yield ({**_svc_labels(ns, d["metadata"]["name"]), "deployment": d["metadata"]["name"]},
                       f"Rollout of {ns}/{d['metadata']['name']} is stuck",
                       c.get("message", "progress deadline exceeded"))


def memory_near_limit(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for c in cluster.kubelet.containers.values():
        if c.namespace not in apps or c.state != "running":
            continue
        pod = cluster.store.get("Pod", c.namespace, c.pod_name)
        if pod is None:
            continue
        # (memory_bytes keeps each quantity it parsed: the pods share a handful of limits)
        limit = memory_bytes(((pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}).get("memory"))
        used = cluster.kubelet.memory_of(c)
        if limit and used > 0.9 * limit:
            yield ({**_svc_labels(c.namespace, c.service), "pod": c.pod_name},
                   f"{c.namespace}/{c.pod_name} memory at {used / limit:.0%} of its limit",
                   f"Working set {used // 2**20}Mi of {limit // 2**20}Mi.")


def volume_filling_up(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    """kube-prometheus's KubePersistentVolumeFillingUp (critical): a claim with under 3% left."""
    usage = getattr(cluster, "volume_usage", None)
    if usage is None:
        return
    for ns, claim, svc, left in usage.filling(0.03):
        if ns in apps:
            yield ({**_svc_labels(ns, svc), "persistentvolumeclaim": claim},
                   f"PersistentVolume claimed by {claim} in {ns} is filling up",
                   f"The PersistentVolume claimed by {claim} in Namespace {ns} is only {left:.2%} free.")


def node_not_ready(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for node in cluster.store.list("Node"):
        c = condition(node, "Ready")
        if c and c["status"] != "True":
            zone = node["metadata"]["labels"].get("topology.kubernetes.io/zone", "")
            yield ({"node": node["metadata"]["name"], "zone": zone},
                   f"Node {node['metadata']['name']} is not ready",
                   f"{node['metadata']['name']} has been unready for more than 2 minutes ({c.get('reason', '')}).")


def node_cpu_saturation(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    for node in cluster.store.list("Node"):
        name = node["metadata"]["name"]
        if not cluster.network.node_up.get(name, False):
            continue
        cpu, _ = cluster.node_usage(name)
        capacity = float(node["status"]["allocatable"]["cpu"]) * 1000
        if cpu > 0.9 * capacity:
            yield ({"node": name, "zone": node["metadata"]["labels"].get("topology.kubernetes.io/zone", "")},
                   f"Node {name} CPU is saturated", f"CPU usage {cpu / capacity:.0%} of allocatable.")


def job_failed(cluster: Cluster, apps: dict[str, AppSpec]) -> Iterator[Match]:
    """kube-prometheus's KubeJobFailed: an app's Job that ended Failed (it holds while a failed
    Job is kept: deleting it clears the alert, not its cause). One alert per CronJob (its Jobs
    come and go under their history limit; ``service`` is the CronJob), or per bare Job."""
    for ns in apps:
        failed_by: dict[str, tuple[str, str]] = {}
        for job in cluster.store.list("Job", ns):
            failed = condition(job, "Failed")
            if failed is None or failed.get("status") != "True":
                continue
            name = job["metadata"]["name"]
            owner = next((r.get("name", "") for r in job["metadata"].get("ownerReferences") or []
                          if r.get("controller") and r.get("kind") == "CronJob"), "")
            failed_by[owner or name] = (name, failed.get("reason", ""))
        for owner, (name, reason) in sorted(failed_by.items()):
            yield (_svc_labels(ns, owner), f"Job {ns}/{name} failed to complete",
                   f"Job {ns}/{name} failed to complete ({reason}). Removing the failed job after investigation "
                   "should clear this alert.")


SERVICES = "service-slos"
APPS = "kubernetes-apps"
RESOURCES = "kubernetes-resources"
KUBELET = "kubernetes-system-kubelet"
STORAGE = "kubernetes-storage"
NODES = "node-exporter"
WAITING = "CrashLoopBackOff|ImagePullBackOff|ErrImagePull|CreateContainerConfigError"

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("ServiceHighErrorRate", "critical", 120, high_error_rate, SERVICES,
         'sum by (namespace, service) (rate(http_requests_total{code!~"2.."}[2m]))'
         ' / sum by (namespace, service) (rate(http_requests_total[2m])) > 0.05'),
    Rule("ServiceLatencySLOBurn", "warning", 300, latency_slo_burn, SERVICES,
         'histogram_quantile(0.99, sum by (namespace, service, le) (rate(http_request_duration_seconds_bucket[2m])))'
         ' > on (namespace, service) slo:http_request_duration_seconds:p99'),
    Rule("KubePodCrashLooping", "warning", 300, crash_looping, APPS,
         f'max_over_time(kube_pod_container_status_waiting_reason{{reason=~"{WAITING}"}}[5m]) >= 1',
         ("Pod",), each_pod=_crash_looping_pod),
    Rule("KubeContainerOOMKilled", "warning", 0, oom_killed, APPS,
         'kube_pod_container_status_last_terminated_reason{reason="OOMKilled"} == 1'
         ' and on (namespace, pod, container) kube_pod_container_status_restarts_total > 0',
         ("Pod",), each_pod=_oom_killed_pod),
    Rule("KubePodNotReady", "warning", 600, pods_not_ready, APPS,
         'max by (namespace, pod) (kube_pod_container_status_ready == 0)'
         ' and on (namespace, pod) kube_pod_info{node!=""}',
         ("Pod",), each_pod=_pod_not_ready),
    Rule("KubePodPending", "warning", 600, pods_pending, APPS,
         'kube_pod_status_phase{phase="Pending"} == 1 unless on (namespace, pod) kube_pod_info{node!=""}',
         ("Pod",), each_pod=_pod_pending),
    Rule("KubeDeploymentReplicasMismatch", "warning", 600, replicas_mismatch, APPS,
         'kube_deployment_spec_replicas > kube_deployment_status_replicas_available', ("Deployment",)),
    Rule("KubeStatefulSetReplicasMismatch", "warning", 600, statefulset_replicas_mismatch, APPS,
         'kube_statefulset_status_replicas_ready != kube_statefulset_replicas', ("StatefulSet",)),
    Rule("KubeDeploymentRolloutStuck", "warning", 0, rollout_stuck, APPS,
         'kube_deployment_status_condition{condition="Progressing", status="false"} != 0', ("Deployment",)),
    Rule("ContainerMemoryNearLimit", "warning", 300, memory_near_limit, RESOURCES,
         'container_memory_working_set_bytes / on (namespace, pod, container)'
         ' kube_pod_container_resource_limits{resource="memory"} > 0.9'),
    Rule("KubePersistentVolumeFillingUp", "critical", 60, volume_filling_up, STORAGE,
         'kubelet_volume_stats_available_bytes{job="kubelet"} / kubelet_volume_stats_capacity_bytes{job="kubelet"}'
         ' < 0.03'),
    Rule("KubeNodeNotReady", "critical", 120, node_not_ready, KUBELET,
         'kube_node_status_condition{condition="Ready", status="true"} == 0', ("Node",)),
    Rule("NodeCPUSaturation", "warning", 600, node_cpu_saturation, NODES,
         'sum by (node) (rate(container_cpu_usage_seconds_total[2m]))'
         ' / on (node) kube_node_status_allocatable{resource="cpu"} > 0.9'),
    Rule("KubeJobFailed", "warning", 900, job_failed, APPS,
         'max by (namespace, owner_name) (kube_job_failed * on (namespace, job_name) group_left (owner_name)'
         ' kube_job_owner) > 0'),
)
