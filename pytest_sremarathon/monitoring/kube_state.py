"""kube-state-metrics and cAdvisor, computed from a cluster's objects and containers.

:class:`KubeState` turns the Pods, Deployments and Nodes of a
:class:`~pytest_sremarathon.k8s.store.Store` into the series kube-state-metrics exports
(``kube_pod_status_phase``, ``kube_pod_container_status_restarts_total``,
``kube_pod_container_status_last_terminated_reason``, ``kube_deployment_status_replicas_available``,
``kube_node_status_condition`` …; names, label sets and values as kube-state-metrics 2.x), and
the containers' usage into cAdvisor's (``container_cpu_usage_seconds_total``,
``container_memory_working_set_bytes``). The twin's store and the kube backend's mirror of a
real cluster are read the same way.

An object's series are computed once per resourceVersion and reused while it does not move,
so a scrape costs about one append a series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, Optional

from ..k8s.quantity import cpu_millicores, memory_bytes
from ..k8s.store import Store
from ..prometheus import TSDB
from ..prometheus.tsdb import Block
from .batch_state import cronjob_samples, daemonset_samples, job_samples

KSM_JOB = "kube-state-metrics"
KSM_INSTANCE = "kube-state-metrics.monitoring.svc:8080"
KUBELET_JOB = "kubelet"
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
NODE_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
STATUSES = ("true", "false", "unknown")

Samples = list[tuple[int, float]]
Columns = tuple[list[int], list[float]]  # refs and values, parallel (TSDB.append_refs)


class ContainerUsage(NamedTuple):
    """One running container as cAdvisor sees it."""

    namespace: str
    pod: str
    container: str
    node: str
    image: str
    cpu_seconds: float  # cumulative since the container started
    working_set_bytes: float


def kubelet_instance(node: str) -> str:
    return f"{node}:10250"


class KubeState:
    """The kube-state-metrics and cAdvisor series of one cluster, appended each scrape."""

    def __init__(self, db: TSDB) -> None:
        self.db = db
        # kind -> uid -> (rv, refs, values): the objects of the kind's last listing (an object
        # gone from the store is gone from here at the next listing of its kind)
        self._cache: dict[str, dict[str, tuple[str, list[int], list[float]]]] = {}
        # kind -> (the store's version of the kind, refs, values, their block): a scrape while no
        # object of the kind moved appends the same row again, without looking at the objects
        self._kinds: dict[str, tuple[int, list[int], list[float], Block]] = {}
        self._cadvisor: dict[tuple[str, str, str, str], list[int]] = {}  # container -> its 2 refs
        # Every container's usage is one row of one block: the containers of the last scrape (in
        # order) and their refs, reused while the same containers run.
        self._usage_keys: list[tuple[Any, ...]] = []
        self._usage_refs: list[int] = []
        self._usage_block = db.block()
        self._refs: dict[tuple[Any, ...], int] = {}  # an object's series, by name and labels as given

    def collect(self, t: float, store: Store, usage: Iterable[ContainerUsage]) -> None:
        """Append this scrape's samples at ``t``: every Pod's, Deployment's and Node's, and
        every container's usage."""
        for kind, fn in (("Pod", self._pod), ("Deployment", self._deployment), ("Node", self._node),
                         ("Job", self._job), ("CronJob", self._cronjob), ("DaemonSet", self._daemonset)):
            (version,) = store.kind_version(kind)
            got = self._kinds.get(kind)
            if got is None or not version or got[0] != version:
                refs, values = self._objects(kind, fn, store)
                got = self._kinds[kind] = (version, refs, values, got[3] if got is not None else self.db.block())
            got[3].append(t, got[1], got[2])
        optional: tuple[tuple[str, Callable[[dict[str, Any]], Samples]], ...] = (
            ("StatefulSet", self._statefulset), ("PersistentVolumeClaim", self._claim))
        for rare, sample in optional:
            # Kinds a cluster may have none of: nothing to look at, nothing to append, until one exists.
            (version,) = store.kind_version(rare)
            got = self._kinds.get(rare)
            if got is None and not version:
                continue
            if got is None or got[0] != version:
                refs, values = self._objects(rare, sample, store)
                got = self._kinds[rare] = (version, refs, values, got[3] if got is not None else self.db.block())
            if got[1]:
                got[3].append(t, got[1], got[2])
        self._collect_usage(t, usage)

    def _objects(self, kind: str, fn: Callable[[dict[str, Any]], Samples], store: Store) -> tuple[list[int], list[float]]:
        """The samples of every object of ``kind``, each computed once per resourceVersion."""
        refs: list[int] = []
        values: list[float] = []
        cache = self._cache.get(kind) or {}
        listed: dict[str, tuple[str, list[int], list[float]]] = {}  # the kind's cache from now on: the objects listed
        for obj in store.list(kind):
            md = obj["metadata"]
            key = md.get("uid") or f"{md.get('namespace', '')}/{md['name']}"
            rv = str(md.get("resourceVersion", ""))
            hit = cache.get(key)
            if hit is None or hit[0] != rv:
                samples = fn(obj)
                hit = (rv, [r for r, _ in samples], [v for _, v in samples])
            listed[key] = hit
            refs.extend(hit[1])
            values.extend(hit[2])
        self._cache[kind] = listed
        if len(self._refs) > 64 * sum(map(len, self._cache.values())) + 4096:  # the refs of objects long gone
            live = {r for of_kind in self._cache.values() for _, refs_of, _ in of_kind.values() for r in refs_of}
            self._refs = {k: r for k, r in self._refs.items() if r in live}
        return refs, values

    def _collect_usage(self, t: float, usage: Iterable[ContainerUsage]) -> None:
        rows = usage if isinstance(usage, list) else list(usage)
        keys = [u[:4] for u in rows]  # (namespace, pod, container, node)
        if keys != self._usage_keys:
            cadvisor = self._cadvisor
            ref = self.db.ref
            refs: list[int] = []
            for key, u in zip(keys, rows):
                hit = cadvisor.get(key)
                if hit is None:
                    base = {"namespace": u.namespace, "pod": u.pod, "container": u.container, "node": u.node,
                            "image": u.image, "job": KUBELET_JOB, "instance": kubelet_instance(u.node),
                            "metrics_path": "/metrics/cadvisor"}
                    hit = cadvisor[key] = [ref({**base, "__name__": "container_cpu_usage_seconds_total"}),
                                           ref({**base, "__name__": "container_memory_working_set_bytes"})]
                refs.extend(hit)
            self._usage_keys, self._usage_refs = keys, refs
            if len(cadvisor) > 2 * len(keys) + 64:  # forget containers long gone
                keep = set(keys)
                for gone in [k for k in cadvisor if k not in keep]:
                    del cadvisor[gone]
        values: list[float] = []
        for u in rows:
            values.append(u.cpu_seconds)
            values.append(u.working_set_bytes)
        self._usage_block.append(t, self._usage_refs, values)

    # -- per object ------------------------------------------------------------------------------
    def _labels(self, name: str, **labels: str) -> int:
        key = (name, *labels.items())  # (each call site passes its labels in one order)
        ref = self._refs.get(key)
        if ref is None:
            ref = self._refs[key] = self.db.ref({"__name__": name, "job": KSM_JOB, "instance": KSM_INSTANCE,
                                                 **labels})
        return ref

    def _pod(self, pod: dict[str, Any]) -> Samples:
        md, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        ns, name, uid = md.get("namespace", ""), md["name"], md.get("uid", "")
        node = spec.get("nodeName", "")
        lab = self._labels
        owner: dict[str, Any] = next((o for o in md.get("ownerReferences") or [] if o.get("controller")), {})
        out: Samples = [(lab("kube_pod_info", namespace=ns, pod=name, uid=uid, node=node,
                             host_ip=status.get("hostIP", ""), pod_ip=status.get("podIP", ""),
                             created_by_kind=owner.get("kind", ""), created_by_name=owner.get("name", "")), 1.0)]
        phase = status.get("phase", "Pending")
        for p in PHASES:
            out.append((lab("kube_pod_status_phase", namespace=ns, pod=name, uid=uid, phase=p),
                        1.0 if p == phase else 0.0))
        statuses = {cs.get("name"): cs for cs in status.get("containerStatuses") or []}
        for c in spec.get("containers") or []:
            cname = c.get("name", "")
            cl = {"namespace": ns, "pod": name, "uid": uid, "container": cname}
            resources = c.get("resources") or {}
            limits = resources.get("limits") or {}
            if "cpu" in limits:
                out.append((lab("kube_pod_container_resource_limits", **cl, node=node, resource="cpu", unit="core"),
                            cpu_millicores(limits["cpu"]) / 1000.0))
            if "memory" in limits:
                out.append((lab("kube_pod_container_resource_limits", **cl, node=node, resource="memory",
                                unit="byte"), float(memory_bytes(limits["memory"]))))
            cs: Optional[dict[str, Any]] = statuses.get(cname)
            if cs is None:
                continue
            out.append((lab("kube_pod_container_status_restarts_total", **cl), float(cs.get("restartCount", 0))))
            out.append((lab("kube_pod_container_status_ready", **cl), 1.0 if cs.get("ready") else 0.0))
            waiting = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
            if waiting:
                out.append((lab("kube_pod_container_status_waiting_reason", **cl, reason=waiting), 1.0))
            terminated = ((cs.get("lastState") or {}).get("terminated") or {}).get("reason")
            if terminated:
                out.append((lab("kube_pod_container_status_last_terminated_reason", **cl, reason=terminated), 1.0))
        return out

    def _deployment(self, d: dict[str, Any]) -> Samples:
        md, spec, status = d["metadata"], d.get("spec") or {}, d.get("status") or {}
        dl = {"namespace": md.get("namespace", ""), "deployment": md["name"]}
        lab = self._labels
        out: Samples = [(lab("kube_deployment_spec_replicas", **dl), float(spec.get("replicas", 1))),
                        (lab("kube_deployment_status_replicas_available", **dl),
                         float(status.get("availableReplicas", 0)))]
        progressing = next((c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), None)
        if progressing is not None:
            now = str(progressing.get("status", "Unknown")).lower()
            for s in STATUSES:
                out.append((lab("kube_deployment_status_condition", **dl, condition="Progressing", status=s),
                            1.0 if now == s else 0.0))
        return out

    def _statefulset(self, s: dict[str, Any]) -> Samples:
        md, spec, status = s["metadata"], s.get("spec") or {}, s.get("status") or {}
        sl = {"namespace": md.get("namespace", ""), "statefulset": md["name"]}
        lab = self._labels
        return [(lab("kube_statefulset_replicas", **sl), float(spec.get("replicas", 1))),
                (lab("kube_statefulset_status_replicas_ready", **sl), float(status.get("readyReplicas", 0))),
                (lab("kube_statefulset_status_replicas_updated", **sl), float(status.get("updatedReplicas", 0)))]

    def _claim(self, c: dict[str, Any]) -> Samples:
        md, phase = c["metadata"], (c.get("status") or {}).get("phase", "Pending")
        cl = {"namespace": md.get("namespace", ""), "persistentvolumeclaim": md["name"]}
        lab = self._labels
        return [(lab("kube_persistentvolumeclaim_status_phase", **cl, phase=p), 1.0 if p == phase else 0.0)
                for p in ("Bound", "Lost", "Pending")]

    def _job(self, job: dict[str, Any]) -> Samples:
        return job_samples(self._labels, job)

    def _cronjob(self, cj: dict[str, Any]) -> Samples:
        return cronjob_samples(self._labels, cj)

    def _daemonset(self, ds: dict[str, Any]) -> Samples:
        return daemonset_samples(self._labels, ds)

    def _node(self, node: dict[str, Any]) -> Samples:
        name = node["metadata"]["name"]
        lab = self._labels
        conditions = {c.get("type"): str(c.get("status", "Unknown")).lower()
                      for c in (node.get("status") or {}).get("conditions") or []}
        out: Samples = [(lab("kube_node_spec_unschedulable", node=name),
                         1.0 if (node.get("spec") or {}).get("unschedulable") else 0.0)]
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        for resource, unit, value in (("cpu", "core", lambda q: cpu_millicores(q) / 1000.0),
                                      ("memory", "byte", lambda q: float(memory_bytes(q))),
                                      ("pods", "integer", lambda q: float(q))):
            if resource in allocatable:
                out.append((lab("kube_node_status_allocatable", node=name, resource=resource, unit=unit),
                            value(allocatable[resource])))
        for cond in NODE_CONDITIONS:
            if cond not in conditions:
                continue
            for s in STATUSES:
                out.append((lab("kube_node_status_condition", node=name, condition=cond, status=s),
                            1.0 if conditions[cond] == s else 0.0))
        return out
