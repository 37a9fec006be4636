"""The embedded two-zone cluster: objects, control loops, kubelets, network and traffic, advanced
one tick of virtual time at a time. It is also the API server's source of logs and usage."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional

from ..apps import AppSpec
from ..cluster import Topology, diurnal
from ..k8s.objects import EventRecorder, is_owned_by, pod_is_active, pod_is_ready, set_condition
from ..k8s.store import BY_KIND, Store, iso
from ..metrics import MetricStore
from ..runtime.code import ArtifactStore
from . import backend_queue, system_objects
from .admission_quota import QuotaController
from .autoscaler import HorizontalPodAutoscalerController
from .containers import Runtime
from .controllers import Controllers, EndpointsController, NodeLifecycleController
from .cronjobs import CronJobController
from .daemonsets import DaemonSetController
from .defaults import apply_defaults, initial_status
from .disruption import DisruptionController
from .init_containers import InitContainers
from .jobs import JobController
from .kubelet import Kubelet
from .maintenance import NodeMaintenance
from .node_agent import node_agent_daemonset
from .priority import builtin_classes
from .scheduler import ZONE, Scheduler
from .scraper import DEFAULT_RETENTION, TwinScraper
from .serviceaccounts import ServiceAccountController
from .statefulsets import StatefulSetController
from .traffic import Network, TrafficEngine
from .volume_usage import VolumeUsage
from .volumes import VolumeController, default_storage_class, regional_storage_class

SYSTEM_NAMESPACES = ("default", "kube-system", "monitoring", "sremarathon-system")


@dataclass
class TwinCluster:
    store: Store
    apps: list[AppSpec]
    artifacts: ArtifactStore
    topology: Topology = field(default_factory=Topology)
    network: Network = field(default_factory=Network)
    metrics: MetricStore = field(default_factory=MetricStore)
    surge: dict[str, float] = field(default_factory=dict)  # app namespace -> traffic multiplier
    retention: float = DEFAULT_RETENTION  # seconds of series the cluster's Prometheus keeps

    def __post_init__(self) -> None:
        self.events = EventRecorder(self.store)
        self.controllers = Controllers(self.store, self.events)
        self.endpoints = EndpointsController(self.store)
        self.quotas = QuotaController(self.store)
        self.node_lifecycle = NodeLifecycleController(self.store, self.events)
        self.daemonsets = DaemonSetController(self.store, self.events)
        self.jobs = JobController(self.store, self.events)
        self.cronjobs = CronJobController(self.store, self.events)
        self.scheduler = Scheduler(self.store, self.events)
        self.statefulsets = StatefulSetController(self.store, self.events)
        self.volumes = VolumeController(self.store, self.events)
        self.scheduler.volumes = self.volumes
        self.traffic = TrafficEngine(self.store, self.network, self.apps)
        self.kubelet = Kubelet(self.store, self.events, self.artifacts, self.scheduler, self.traffic,
                               lambda node: self.network.node_zone.get(node, ""))
        self.traffic.kubelet = self.kubelet
        self.scraper = TwinScraper(self.apps, self.store, self.kubelet, self.network, retention=self.retention)
        self.prometheus = self.scraper.db  # the series the monitoring namespace's Prometheus serves
        self.volume_usage = VolumeUsage(self.store, self.kubelet, self.prometheus)
        # What kubectl exec and attach run in, and the debug pods of utility images.
        self.runtime = Runtime(self.store, self.kubelet, self.traffic, self.network, self.scheduler, self.artifacts)
        self.kubelet.runtime = self.runtime
        self.kubelet.inits = InitContainers(self.kubelet, self.runtime)
        self._ticks = 0
        self._dt = 30.0  # the last tick's length: the per-pod request rates the autoscaler reads
        self.autoscaler = HorizontalPodAutoscalerController(self.store, self.events, self)
        self.disruption = DisruptionController(self.store)
        self.serviceaccounts = ServiceAccountController(self.store)  # `default` in every namespace
        self.maintenance = NodeMaintenance(self.store, self.events, self.network.node_up)
        # The ready pods per service on an up node, and what they were counted from (the last
        # Pod change, the nodes' state): most ticks no pod and no node moved.
        self._ready_counted: tuple[Any, dict[tuple[str, str], int]] = (None, {})
        # pod uid -> (its resourceVersion, its node if it is ready else None, (namespace, app)):
        # what a count needs of a pod, taken again only when its resourceVersion moves (every
        # change to a pod bumps it); the pods of the last count (two dicts, swapped each count).
        self._ready_memo: dict[Any, tuple[Any, Optional[str], tuple[str, str]]] = {}
        self._ready_memo_next: dict[Any, tuple[Any, Optional[str], tuple[str, str]]] = {}

    # -- set-up ----------------------------------------------------------------------------
    def settled(self) -> None:
        """The warm-up is over. Every pod started at once from nothing, and the callers of pods
        not ready yet failed meanwhile; with a sample or two a tick, the count model would need
        many minutes of clean samples to rule such a share out (twin/counts.py), and a cluster
        in its steady state never starts that way. So its windows forget the warm-up (the
        recorded series keep it)."""
        self.scraper.model.reset()

    def bootstrap(self) -> None:
        with self.store.lock:
            for ns in SYSTEM_NAMESPACES + tuple(a.namespace for a in self.apps):
                self.store.create({"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": ns, "labels": {"kubernetes.io/metadata.name": ns}},
                                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
            self.serviceaccounts.bootstrap()
            for pc in builtin_classes():
                self.store.create(pc)
            for i, (name, zone) in enumerate(self.topology.node_names()):
                self.network.node_up[name] = True
                self.network.node_zone[name] = zone
                self.store.create(self._node(name, zone, i))
            self.store.create(default_storage_class())
            self.store.create(regional_storage_class())
            system_objects.create_all(self.store)
            now = self.store.clock()
            for node in self.topology.node_names():
                self.kubelet.heartbeats[node[0]] = now
            agent = apply_defaults(node_agent_daemonset())
            initial_status(agent)
            self.store.create(agent)

    def _node(self, name: str, zone: str, index: int) -> dict[str, Any]:
        resources = {"cpu": self.topology.node_cpu, "memory": self.topology.node_memory, "pods": "110",
                     "ephemeral-storage": "100Gi"}
        node: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                ZONE: zone, "topology.kubernetes.io/region": "twin-1", "node-role.kubernetes.io/worker": ""}},
            "spec": {"podCIDR": f"10.244.{index + 1}.0/24", "podCIDRs": [f"10.244.{index + 1}.0/24"],
                     "providerID": f"twin://{zone}/{name}"},
            "status": {"capacity": dict(resources), "allocatable": dict(resources),
                       "addresses": [{"type": "InternalIP", "address": f"172.18.0.{index + 2}"},
                                     {"type": "Hostname", "address": name}],
                       "nodeInfo": {"kubeletVersion": "v1.32.4", "kubeProxyVersion": "v1.32.4",
                                    "containerRuntimeVersion": "containerd://1.7.24", "osImage": "Debian GNU/Linux 12 (bookworm)",
                                    "kernelVersion": "6.1.0-twin", "operatingSystem": "linux", "architecture": "amd64",
                                    "machineID": f"{index:032x}", "systemUUID": f"{index:08x}-0000-0000-0000-000000000000",
                                    "bootID": f"{index:08x}-boot"},
                       "conditions": []}}
        now = self.store.clock()
        for type_, status, reason, message in (
                ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                ("Ready", "True", "KubeletReady", "kubelet is posting ready status")):
            set_condition(node, type_, status, now, reason, message)
            node["status"]["conditions"][-1]["lastHeartbeatTime"] = iso(now)
        return node

    # -- objects from manifests ------------------------------------------------------------
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or update an object from a manifest, keeping what the cluster owns (status,
        uid, and a scaled replica count when the manifest leaves it out)."""
        with self.store.lock:
            obj = apply_defaults(copy.deepcopy(obj))  # what the API server would have stored
            md = obj["metadata"]
            if not BY_KIND[obj["kind"]].namespaced:  # an app's manifests may hold cluster-scoped objects
                md.pop("namespace", None)
            current = self.store.get(obj["kind"], md.get("namespace"), md["name"])
            if obj["kind"] == "Service":
                self._cluster_ip(obj, current)
            if current is None:
                created = self.store.create(obj)
                self.serviceaccounts.react(created)  # a new namespace gets its `default` account
                return created
            new = copy.deepcopy(current)
            for key in ("spec", "data"):
                if key in obj:
                    new[key] = copy.deepcopy(obj[key])
            for key in ("labels", "annotations"):
                if key in md:
                    new["metadata"][key] = {**(current["metadata"].get(key) or {}), **md[key]}
            if obj["kind"] in ("Deployment", "StatefulSet") and "replicas" not in obj.get("spec", {}):
                new["spec"]["replicas"] = current["spec"].get("replicas", 1)
            return self.store.replace(new, check_rv=False)

    def _cluster_ip(self, svc: dict[str, Any], current: Optional[dict[str, Any]]) -> None:
        """A ClusterIP Service's address, as the API server allocates it (and keeps it across
        applies that leave it out): what its DNS name resolves to from the pods."""
        spec = svc.setdefault("spec", {})
        if spec.get("type") == "ExternalName" or spec.get("clusterIP") == "None":
            return
        if not spec.get("clusterIP"):
            kept = ((current or {}).get("spec") or {}).get("clusterIP")
            if kept:
                spec["clusterIP"] = kept
            else:
                used = {(s.get("spec") or {}).get("clusterIP") for s in self.store.list("Service")}
                i = 11  # 10.96.0.1 is the API server's, 10.96.0.10 the cluster DNS's
                while f"10.96.{i // 256}.{i % 256}" in used:
                    i += 1
                spec["clusterIP"] = f"10.96.{i // 256}.{i % 256}"
        spec["clusterIPs"] = [spec["clusterIP"]]

    # -- time ------------------------------------------------------------------------------
    def rps(self, app: AppSpec) -> float:
        return app.traffic.base_rps * diurnal(self.store.clock()) * self.surge.get(app.namespace, 1.0)

    def tick(self, dt: float, rng: random.Random) -> None:
        with self.store.lock:
            with self.store.acting("controller"):  # their spec writes are no client's (provenance)
                self.maintenance.reconcile()  # scheduled host maintenance: drain, or the host goes
            up = {n for n, ok in self.network.node_up.items() if ok}
            self.node_lifecycle.reconcile(self.kubelet.heartbeats)
            with self.store.acting("controller"):
                self.autoscaler.reconcile()  # on the measurements of the tick before, as metrics lag
            self.controllers.reconcile()
            self.statefulsets.reconcile()
            self.volumes.reconcile()
            self._reconcile_batch()
            self.scheduler.reconcile()
            self.kubelet.tick(up, dt)
            self.endpoints.reconcile()
            self.controllers.reconcile()  # let status reach the deployments in the same tick
            self.disruption.reconcile()
            self._dt = dt
            self.statefulsets.reconcile()  # … and the stateful sets (the next ordinal once one is ready)
            self.volumes.reconcile()  # the new ordinal's claim gets its class at once, as admission gives it
            self.quotas.reconcile()
            self.jobs.reconcile()  # … and the Jobs and DaemonSets (a finished pod ends its Job now)
            self.daemonsets.reconcile()
            now = self.store.clock()
            if self.network.backends:  # a backend provisioned below its cold-cache load
                backend_queue.tick(self.network, self.kubelet, self.traffic.samples, dt)
            self.traffic.prepare(now, rng)
            samples = self.traffic.run(dt, self.rps)
            self._burn_batch_cpu()
            traffic = self.scraper.scrape(now, dt, rng, samples, self.traffic.routable())
            self.volume_usage.advance(now.timestamp(), dt, traffic)
            self._record_metrics(now, dt, traffic)
            self._ticks += 1
            if self._ticks % 20 == 0:
                self.events.expire()

    def _reconcile_batch(self) -> None:
        """CronJobs make Jobs, Jobs make pods, DaemonSets keep theirs: each pass is skipped while
        its inputs' resourceVersions stand still (no such object: nothing at all)."""
        self.cronjobs.reconcile()
        self.jobs.reconcile()
        self.daemonsets.reconcile()

    def _burn_batch_cpu(self) -> None:
        """Running Job pods use CPU without serving traffic: what the next tick's contention
        (and cAdvisor) sees of them (the traffic engine set every container's use from its work)."""
        for uid, millicores in self.jobs.cpu_demand().items():
            c = self.kubelet.containers.get(uid)
            if c is not None and c.state == "running":
                c.cpu_millicores = millicores

    def _react_batch(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """The batch and node-agent controllers' share of :meth:`react`: the pods they made now."""
        kind, md = obj.get("kind"), obj.get("metadata") or {}
        ns = md.get("namespace")
        owner = obj
        if kind == "Pod":
            ref = next((r for r in md.get("ownerReferences") or [] if r.get("controller")), None)
            if ref is None or ref.get("kind") not in ("DaemonSet", "Job"):
                return []
            owner = self.store.get(ref["kind"], ns, ref["name"]) or {}
        elif kind == "CronJob":
            self.cronjobs.reconcile()
        elif kind not in ("DaemonSet", "Job"):
            return []
        live = self.store.get(str(owner.get("kind")), ns, (owner.get("metadata") or {}).get("name", "")) \
            if owner else None
        if live is None:
            return []
        before = self.store.resource_version
        if live["kind"] == "DaemonSet":
            self.daemonsets.react(live)
        elif live["kind"] == "Job":
            self.jobs.react(live)
        if self.store.resource_version == before:
            return []
        return [p for p in self.store.list("Pod", ns) if not p["spec"].get("nodeName") and pod_is_active(p)]

    def react(self, obj: dict[str, Any]) -> None:
        """An API write changed or deleted ``obj`` (the API server calls this under the store
        lock, right after committing): the controllers a real cluster would run on that watch
        event run now, in the same virtual moment — a new ReplicaSet and its pods, a deleted
        pod's replacement, their scheduling, the Endpoints — so that a client reading right
        after its write sees what a real cluster shows within moments. Only what the write
        touched is reconciled; containers start at the next tick, as the kubelet works."""
        with self.store.lock:
            self.serviceaccounts.react(obj)  # a new namespace's `default` account (or a deleted one's again)
            replicasets = self.controllers.react(obj)
            pending = [p for rs in replicasets for p in self.store.list("Pod", rs["metadata"]["namespace"])
                       if not p["spec"].get("nodeName") and pod_is_active(p) and is_owned_by(p, rs)]
            pending += [p for p in self.statefulsets.react(obj)
                        if not p["spec"].get("nodeName") and pod_is_active(p)]
            self.volumes.reconcile()  # a no-op unless a claim, volume or class changed
            pending += self._react_batch(obj)
            if obj.get("kind") == "Pod":
                pod = self.store.get("Pod", obj["metadata"].get("namespace"), obj["metadata"]["name"])
                if pod is not None and not pod["spec"].get("nodeName") and pod_is_active(pod):
                    pending.append(pod)
            if pending:
                self.scheduler.schedule_all(list({p["metadata"]["uid"]: p for p in pending}.values()))
            self.endpoints.reconcile()
            self.quotas.reconcile()

    def _record_metrics(self, now: datetime, dt: float, traffic: dict[tuple[str, str], Any]) -> None:
        """The per-service numbers the alert rules and the agent's telemetry endpoint read: the
        request ones summed from the scrape's counts, the others from the containers."""
        per_service: dict[tuple[str, str], dict[str, float]] = {}
        for app in self.apps:
            for svc in app.services:
                per_service[(app.namespace, svc)] = {"cpu_millicores": 0.0, "memory_bytes": 0.0, "restarts": 0.0,
                                                     "ready_pods": 0.0}
        for c in self.kubelet.containers.values():
            m = per_service.get((c.namespace, c.service))
            if m is None:
                continue
            m["cpu_millicores"] += c.cpu_millicores
            m["memory_bytes"] = max(m["memory_bytes"], float(self.kubelet.memory_of(c)))
            m["restarts"] += c.restarts
        for key, ready in self._ready_pods().items():
            if key in per_service:
                per_service[key]["ready_pods"] = float(ready)
        for (ns, svc), m in per_service.items():
            s = traffic.get((ns, svc))
            if s is not None and s.requests > 0:
                m["requests_per_second"] = s.requests / dt
                m["error_ratio"] = s.errors / s.requests
                m["latency_p50_ms"], m["latency_p99_ms"] = s.latency_ms()
            self.metrics.record(ns, svc, now, m)

    # -- the autoscaler's MetricsSource (metrics-server and a request-rate adapter) ----------
    def pod_usage_by_uid(self, uid: str) -> Optional[tuple[float, int]]:
        c = self.kubelet.containers.get(uid)
        if c is None or c.state != "running" or c.started_at is None:
            return None
        return c.cpu_millicores, self.kubelet.memory_of(c)

    def pod_request_rate(self, uid: str) -> Optional[float]:
        c = self.kubelet.containers.get(uid)
        if c is None or c.state != "running":
            return None
        return self.traffic.served(uid) / self._dt
    def _ready_pods(self) -> dict[tuple[str, str], int]:
        """Ready pods on an up node per (namespace, app label)."""
        node_up = self.network.node_up
        inputs = (self.store.kind_version("Pod"), tuple(sorted(node_up.items())))
        if self._ready_counted[0] == inputs:
            return self._ready_counted[1]
        counts: dict[tuple[str, str], int] = {}
        memo, seen = self._ready_memo, self._ready_memo_next
        for pod in self.store.list("Pod"):
            md = pod["metadata"]
            rv = md.get("resourceVersion")
            hit = memo.get(md.get("uid"))
            if hit is None or hit[0] != rv:
                node = pod["spec"].get("nodeName", "") if pod_is_ready(pod) else None
                hit = (rv, node, (md["namespace"], (md.get("labels") or {}).get("app", "")))
            seen[md.get("uid")] = hit
            if hit[1] is not None and node_up.get(hit[1], False):
                counts[hit[2]] = counts.get(hit[2], 0) + 1
        memo.clear()
        self._ready_memo, self._ready_memo_next = seen, memo
        self._ready_counted = (inputs, counts)
        return counts

    # -- ClusterTelemetry (for the API server) ---------------------------------------------
    def pod_log(self, namespace: str, pod: str, container: Optional[str], previous: bool) -> list[tuple[datetime, str]]:
        c = self.kubelet.by_name.get((namespace, pod))
        if c is None:
            return []
        if container and container != c.name and self.kubelet.inits is not None:
            return self.kubelet.inits.logs(c.pod_uid, container, previous) or []
        return list(c.previous_logs if previous else c.logs)

    def pod_usage(self, namespace: str, pod: str) -> dict[str, tuple[int, int]]:
        c = self.kubelet.by_name.get((namespace, pod))
        if c is None or c.state != "running":
            return {}
        return {c.name: (int(c.cpu_millicores), self.kubelet.memory_of(c))}

    def node_usage(self, node: str) -> tuple[int, int]:
        cpu = mem = 0
        for c in self.kubelet.containers.values():
            if c.node == node and c.state == "running":
                cpu += int(c.cpu_millicores)
                mem += self.kubelet.memory_of(c)
        cpu += int(self.network.node_cpu_noise.get(node, 0.0))
        return cpu + 150, mem + 900 * 2**20  # + system daemons
