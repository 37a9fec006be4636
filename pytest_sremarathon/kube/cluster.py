"""The real-cluster adapter: a Kubernetes cluster behind the interface the marathon, the
pipeline, the alert rules and the fault kinds already use on the twin.

:class:`KubeCluster` offers what they read and write on :class:`~pytest_sremarathon.twin.cluster.TwinCluster`:

* ``apply(obj)`` and ``artifacts`` — the pipeline's deploy target: the build's artifacts become
  images (:mod:`.images`) and rendered objects are server-side applied as :mod:`.manifests`
  adapts them;
* ``store`` — a :class:`MirrorStore`: a read view of the cluster's objects (Nodes, Pods,
  Deployments, ReplicaSets, Services, Endpoints, ConfigMaps, Secrets of the apps), relisted
  by :meth:`KubeCluster.refresh`; an in-place change published with ``store.touch(obj)`` (a
  fault's cleanup uncordoning a node, a rollout restart) is written to the cluster;
* ``metrics`` — the twin's :class:`~pytest_sremarathon.metrics.MetricStore`, filled by
  scraping every application pod's ``/metrics`` through the API server's pod proxy
  (:mod:`.scrape`); ``node_usage`` from the kubelets' summary API, also through the API server;
* ``kubelet.containers`` — the running containers with the configuration they started with
  and their scraped memory, as the config-fault judges and the memory alert read them;
* ``network`` — the physical knobs the infrastructure faults turn. On kind they are real
  (:mod:`.node_faults`: ``docker pause``, ``iptables``, ``tc`` in the node containers); a knob
  that has no real counterpart here raises :class:`~pytest_sremarathon.pipeline.service.PipelineError`,
  which the marathon records as a fault that could not be injected;
* ``surge`` and ``rps(app)`` — the load generator's rate (:mod:`.traffic`).
"""

from __future__ import annotations

import base64
import http.client
import json
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any, Optional

from ..apps import AppSpec
from ..cluster import diurnal
from ..k8s.objects import pod_is_ready
from ..k8s.store import Store
from ..metrics import MetricStore
from ..pipeline.service import PipelineError
from ..runtime.artifacts import datastore
from ..runtime.code import Artifact, ArtifactStore
from . import node_faults
from .api import KubeApi, KubeApiError, api_version, collection_path, object_path
from .images import ImagePublisher, image_tag
from .manifests import (
    IS_DEFAULT_CLASS,
    claimed_storage_classes,
    externals_env,
    for_cluster,
    namespace_object,
    storage_class_like,
)
from .manifests import artifact_image as parse_artifact_image
from .scrape import ParseError, PodCounters, PodScrape, ServiceMetrics, parse, pod_proxy_path
from .series import KubeSeries, ScrapedPod

Progress = Callable[[str], None]
MIRRORED = ("Node", "Namespace", "Pod", "Deployment", "ReplicaSet", "StatefulSet", "PersistentVolumeClaim", "Service",
            "Endpoints", "ConfigMap", "Secret")
CLUSTER_SCOPED = ("Node", "Namespace")


class MirrorStore(Store):
    """A read view of a real cluster in the twin's :class:`Store` shape (objects kept verbatim:
    real uids and resourceVersions). ``touch(obj)`` writes the changed object back."""

    def __init__(self, clock: Callable[[], datetime],
                 writer: Optional[Callable[[dict[str, Any]], dict[str, Any]]] = None) -> None:
        super().__init__(clock)
        self.writer = writer

    def sync(self, kind: str, items: Iterable[dict[str, Any]]) -> None:
        """Make ``items`` the objects of ``kind`` (those not listed are gone)."""
        with self.lock:
            fresh: dict[tuple[str, str, str], dict[str, Any]] = {}
            for obj in items:
                obj["kind"] = kind
                md = obj["metadata"]
                fresh[(kind, md.get("namespace") or "", md["name"])] = obj
            before = self._by_kind.get(kind, {})
            for key, obj in before.items():
                if key not in fresh:
                    self._objects.pop(key, None)
                    self._notify("DELETED", obj)
            changed = len(fresh) != len(before)
            for key, obj in fresh.items():
                old = before.get(key)
                if old is None:
                    changed = True
                    self._notify("ADDED", obj)
                elif (old.get("metadata") or {}).get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                    changed = True
                    self._notify("MODIFIED", obj)
            self._objects.update(fresh)
            self._by_kind[kind] = fresh
            self._sorted.pop(kind, None)
            self._sorted_ns.pop(kind, None)  # (the per-namespace lists too: else list(kind, ns) goes stale)
            self._rv += 1
            if changed:  # what the kube-state-metrics series read moved (Store.kind_version)
                self._kind_rv[kind] = self._rv

    def _notify(self, type_: str, obj: dict[str, Any]) -> None:
        for listener in self.listeners:
            listener(type_, obj)

    def touch(self, obj: dict[str, Any], *, spec_changed: bool = False) -> None:
        if self.writer is None:
            raise PipelineError(501, "this cluster view is read-only")
        written = self.writer(obj)
        with self.lock:
            md = written.get("metadata") or {}
            key = (obj["kind"], md.get("namespace") or "", md.get("name", ""))
            if key in self._objects:
                written["kind"] = obj["kind"]
                self._objects[key].clear()
                self._objects[key].update(written)
                self._notify("MODIFIED", self._objects[key])
            self._rv += 1
            self._kind_rv[obj["kind"]] = self._rv


def unsupported(what: str) -> PipelineError:
    return PipelineError(501, f"{what} cannot be injected on this cluster (no real counterpart on the kube "
                              f"backend); the fault is skipped and recorded")


class _Knob(dict):
    """A dict whose writes turn a real knob: ``on_set(key, value)`` / ``on_del(key)``."""

    def __init__(self, on_set: Callable[[Any, Any], None], on_del: Callable[[Any], None]) -> None:
        super().__init__()
        self._on_set, self._on_del = on_set, on_del

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.get(key, object()) != value:
            self._on_set(key, value)
        super().__setitem__(key, value)

    def pop(self, key: Any, *default: Any) -> Any:
        if key in self:
            self._on_del(key)
        return super().pop(key, *default)

    def __delitem__(self, key: Any) -> None:
        self._on_del(key)
        super().__delitem__(key)

    def load(self, values: dict[Any, Any]) -> None:
        """Set state as observed, without turning anything."""
        for k, v in values.items():
            super().__setitem__(k, v)


class _KnobSet(set):
    def __init__(self, on_add: Callable[[Any], None], on_discard: Callable[[Any], None]) -> None:
        super().__init__()
        self._on_add, self._on_discard = on_add, on_discard

    def add(self, item: Any) -> None:
        if item not in self:
            self._on_add(item)
        super().add(item)

    def discard(self, item: Any) -> None:
        if item in self:
            self._on_discard(item)
        super().discard(item)

    def remove(self, item: Any) -> None:
        if item not in self:
            raise KeyError(item)
        self.discard(item)


def _refuse(what: str) -> Callable[..., None]:
    def refuse(*_args: Any) -> None:
        raise unsupported(what)
    return refuse


def _allow(*_args: Any) -> None:
    return None


class KubeNetwork:
    """The knobs the infrastructure faults turn (the twin's :class:`~pytest_sremarathon.twin.traffic.Network`).
    With ``docker`` (a kind cluster) node power, partitions, zone latency and zone DNS are
    real; the rest — and everything without ``docker`` — raises ``PipelineError`` (skipped)."""

    def __init__(self, *, docker: bool) -> None:
        self.docker = docker
        self.nodes: list[node_faults.NodeInfo] = []
        self.node_zone: dict[str, str] = {}
        self._active: dict[Any, node_faults.Action] = {}
        self._lock = threading.Lock()
        self.problems: list[str] = []  # cleanups that failed
        self.node_up = _Knob(self._power, lambda node: self._power(node, True))
        self.partitions = _KnobSet(self._cut, self._heal)
        self.zone_latency_ms = _Knob(self._latency, self._latency_off)
        self.dns_broken_zones = _KnobSet(self._dns, self._dns_off)
        self.externals_down = _KnobSet(_refuse("a third-party API outage"), _allow)
        self.dns_race_share = _Knob(_refuse("a DNS conntrack race"), _allow)
        self.pod_delay_ms = _Knob(_refuse("a slow datastore"), _allow)
        self.node_cpu_noise = _Knob(_refuse("a noisy neighbour stealing node CPU"), _allow)
        self.cpu_overload_timeouts = False  # on a real cluster, overload is real
        self.backends = _Knob(_refuse("a backend provisioned below its cold-cache load"), _allow)
        # A node's clock could be stepped with date(1) in its container, but the apps' calls
        # carry no signed tokens on a real cluster: nothing would notice (skipped, recorded).
        self.clock_skew = _Knob(_refuse("a node clock skew"), _allow)
        # The service runtime's calls to third-party APIs are simulated without a credential
        # check: an expiring key would change nothing (secret-expiry is skipped, recorded).
        self.credentials_checked = False

    def observe(self, nodes: list[node_faults.NodeInfo]) -> None:
        with self._lock:
            self.nodes = nodes
            self.node_zone = {n.name: n.zone for n in nodes if n.zone}
            self.node_up.load({n.name: self.node_up.get(n.name, True) for n in nodes if n.zone})

    def reachable(self, a: str, b: str) -> bool:
        return a == b or frozenset((a, b)) not in self.partitions

    def _run(self, key: Any, make: Optional[Callable[[], node_faults.Action]]) -> None:
        """Inject the action ``make()`` builds under ``key``, or (``make`` None) clean up the
        one active under ``key``. A fault that cannot be injected (no docker access, no such
        node) raises ``PipelineError`` — the marathon records it as skipped — after undoing
        whatever part of it ran; a cleanup that fails is reported in :attr:`problems`."""
        what = key[0].replace("-", " ")
        if not self.docker:
            raise unsupported(what)
        if make is None:
            with self._lock:
                current = self._active.pop(key, None)
            if current is not None:
                try:
                    node_faults.cleanup(current)
                except node_faults.NodeFaultError as exc:
                    self.problems.append(str(exc))
            return
        try:
            action = make()
        except (node_faults.NodeFaultError, ValueError) as exc:
            raise PipelineError(501, f"{what} cannot be injected on this cluster: {exc}") from None
        try:
            node_faults.inject(action)
        except node_faults.NodeFaultError as exc:
            try:
                node_faults.cleanup(action)
            except node_faults.NodeFaultError:
                pass
            raise PipelineError(502, f"{what} could not be injected: {exc}") from None
        with self._lock:
            self._active[key] = action

    def _power(self, node: str, up: bool) -> None:
        self._run(("node-failure", node), None if up else lambda: node_faults.node_failure(self.nodes, node))

    def _cut(self, zones: frozenset) -> None:
        a, b = sorted(zones)
        self._run(("zone-partition", zones), lambda: node_faults.zone_partition(self.nodes, a, b))

    def _heal(self, zones: frozenset) -> None:
        self._run(("zone-partition", zones), None)

    def _latency(self, zone: str, ms: float) -> None:
        self._run(("network-latency", zone), None)
        self._run(("network-latency", zone), lambda: node_faults.zone_latency(self.nodes, zone, ms))

    def _latency_off(self, zone: str) -> None:
        self._run(("network-latency", zone), None)

    def _dns(self, zone: str) -> None:
        self._run(("zone-dns", zone), lambda: node_faults.zone_dns_outage(self.nodes, zone))

    def _dns_off(self, zone: str) -> None:
        self._run(("zone-dns", zone), None)

    def restore(self) -> list[str]:
        """Undo every active knob (at close); every problem met during the run's cleanups."""
        problems, self.problems = list(self.problems), []
        with self._lock:
            active, self._active = dict(self._active), {}
        for key, action in active.items():
            try:
                node_faults.cleanup(action)
            except node_faults.NodeFaultError as exc:
                problems.append(f"{key}: {exc}")
        return problems


@dataclass
class ContainerView:
    """A running container as the fault kinds and alert rules read one."""

    namespace: str
    service: str
    pod_name: str
    pod_uid: str
    node: str
    zone: str
    name: str
    image: str
    state: str  # running | waiting | terminated
    restarts: int
    ready: bool
    ctx: Any  # .config_data: what the container started with
    memory: int = 0
    cpu_millicores: float = 0.0

    def log(self, _t: datetime, _line: str) -> None:
        """A real container's log is the container's own; the orchestrator cannot add to it."""


class _FrozenConfig(dict):
    def __setitem__(self, key: str, value: str) -> None:
        raise unsupported("changing a running container's configuration")


@dataclass
class KubeletView:
    containers: dict[str, ContainerView] = field(default_factory=dict)
    by_name: dict[tuple[str, str], ContainerView] = field(default_factory=dict)
    disk_pressure: _KnobSet = field(default_factory=lambda: _KnobSet(_refuse("node disk pressure"), _allow))

    def memory_of(self, c: ContainerView) -> int:
        return c.memory


@dataclass
class NodeTopology:
    nodes: list[tuple[str, str]] = field(default_factory=list)  # (name, zone) of the workers

    def node_names(self) -> list[tuple[str, str]]:
        return list(self.nodes)


class PublishingArtifacts(ArtifactStore):
    """The build's artifacts; putting one publishes its image (the build step on a real
    cluster). Without a publisher the images are expected to be there already (pre-loaded
    under their tags)."""

    def __init__(self, images: Optional[ImagePublisher]) -> None:
        super().__init__()
        self.images = images
        self.tags: dict[str, str] = {}  # digest -> image reference
        self._by_tag: dict[str, Artifact] = {}

    def put(self, artifact: Artifact, *, datastore_image: Optional[str] = None) -> None:
        super().put(artifact)
        if artifact.digest not in self.tags:
            tag = self.images.publish(artifact, datastore_image=datastore_image) if self.images is not None \
                else image_tag(artifact)
            self.tags[artifact.digest] = tag
            self._by_tag[tag] = artifact

    def by_image(self, image: str) -> Optional[Artifact]:
        if "@" in image:
            return super().by_image(image)
        return self._by_tag.get(image)


class KubeCluster:
    def __init__(self, api: KubeApi, apps: list[AppSpec], *, clock: Callable[[], datetime],
                 images: Optional[ImagePublisher] = None, docker: bool = False, progress: Optional[Progress] = None,
                 scrape_timeout: float = 5.0) -> None:
        self.api = api
        self.apps = apps
        self.clock = clock
        self.progress = progress or (lambda _msg: None)
        self.scrape_timeout = scrape_timeout
        self.namespaces = [a.namespace for a in apps]
        self.artifacts = PublishingArtifacts(images)
        self.store = MirrorStore(clock, writer=self._write)
        self.metrics = MetricStore()
        self.telemetry = ServiceMetrics(self.metrics)
        self.series = KubeSeries(apps, self.store)  # the monitoring namespace's Prometheus
        self.prometheus = self.series.db
        self.network = KubeNetwork(docker=docker)
        self.kubelet = KubeletView()
        self.topology = NodeTopology()
        self.surge: dict[str, float] = {}
        self.applied: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._ports: dict[str, dict[str, int]] = {a.namespace: {} for a in apps}
        self._configs: dict[tuple[str, str, int], dict[str, str]] = {}  # (pod uid, container, restarts) -> env
        self._node_usage: dict[str, tuple[int, int]] = {}
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kube-scrape")
        self._storage_classes: set[str] = set()  # classes known to exist (checked once per name)

    # -- set-up ------------------------------------------------------------------------------
    def bootstrap(self) -> None:
        """The apps' namespaces (and the benchmark's own, which the policy protects)."""
        for ns in ("sremarathon-system", "monitoring"):
            self.api.apply(namespace_object(ns))
        for app in self.apps:
            self.api.apply(namespace_object(app.namespace, app.name))
        self.refresh()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the pipeline's deploy target --------------------------------------------------------
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        md = obj.get("metadata") or {}
        ns = md.get("namespace") or "default"
        app = next((a for a in self.apps if a.namespace == ns), None)
        if obj.get("kind") == "Service":
            ports = (obj.get("spec") or {}).get("ports") or []
            if ports and isinstance(ports[0].get("port"), int):
                self._ports.setdefault(ns, {})[md["name"]] = ports[0]["port"]
        images: dict[str, str] = {}
        digests: dict[str, str] = {}
        if obj.get("kind") in ("Deployment", "StatefulSet"):
            pod_spec = obj["spec"]["template"]["spec"]
            for c in list(pod_spec.get("initContainers") or []) + list(pod_spec.get("containers") or []):
                image = c.get("image", "")
                parsed = parse_artifact_image(image, ns)
                artifact = self.artifacts.get(parsed[1]) if parsed else None
                if artifact is None:  # a stock datastore image: the runtime's datastore stands in
                    artifact = datastore(ns, md["name"], image)
                    self.artifacts.put(artifact, datastore_image=image)
                images[image] = self.artifacts.tags.get(artifact.digest, image)
                digests[image] = artifact.digest
        self._ensure_storage_classes(claimed_storage_classes(obj))
        rendered = for_cluster(obj, images, ports=dict(sorted(self._ports.get(ns, {}).items())),
                               externals=externals_env(app) if app else {}, digests=digests)
        result = self.api.apply(rendered)
        self.applied[(obj["kind"], ns, md["name"])] = rendered
        return result

    def _ensure_storage_classes(self, names: set[str]) -> None:
        """Create each StorageClass a manifest's claims name that the cluster lacks, modelled on
        its default class (see :func:`~.manifests.storage_class_like`), before the manifest."""
        missing = names - self._storage_classes
        if not missing:
            return
        classes = {c["metadata"]["name"]: c for c in self.api.get(collection_path("StorageClass"))["items"]}
        default = next((c for c in classes.values()
                        if (c["metadata"].get("annotations") or {}).get(IS_DEFAULT_CLASS) == "true"), None)
        for name in sorted(missing - set(classes)):
            if default is None:
                raise PipelineError(422, f"the manifests claim StorageClass {name!r}, which the cluster lacks, and the "
                                         f"cluster has no default StorageClass ({IS_DEFAULT_CLASS}) to model it "
                                         f"on; create a StorageClass named {name!r} (kubectl apply -f …) and run "
                                         "again")
            self.api.apply(storage_class_like(default, name))
            self.progress(f"created StorageClass {name} (as the default class {default['metadata']['name']})")
        self._storage_classes |= names

    def rps(self, app: AppSpec) -> float:
        return app.traffic.base_rps * diurnal(self.clock()) * self.surge.get(app.namespace, 1.0)

    # -- reading the cluster -----------------------------------------------------------------
    def _list(self, kind: str) -> list[dict[str, Any]]:
        items = self.api.get(collection_path(kind)).get("items") or []
        if kind in CLUSTER_SCOPED:
            return items
        wanted = set(self.namespaces)
        return [o for o in items if (o.get("metadata") or {}).get("namespace") in wanted]

    def refresh(self) -> None:
        """Relist the mirrored kinds; derive nodes, zones and the container view."""
        lists = dict(zip(MIRRORED, self._pool.map(self._list, MIRRORED)))
        for kind in MIRRORED:
            self.store.sync(kind, lists[kind])
        infos = node_faults.nodes_from_api(lists["Node"])
        self.network.observe(infos)
        self.topology.nodes = [(n.name, n.zone) for n in infos if n.zone]
        self._containers(lists["Pod"])

    def _env(self, ns: str, container: dict[str, Any]) -> dict[str, str]:
        """A container's environment as the kubelet resolved it (ConfigMaps, Secrets, values)."""
        env: dict[str, str] = {}

        def data(kind: str, name: str) -> dict[str, str]:
            obj = self.store.get(kind, ns, name) or {}
            if kind == "Secret":
                return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (obj.get("data") or {}).items()}
            return {k: str(v) for k, v in (obj.get("data") or {}).items()}

        for source in container.get("envFrom") or []:
            if "configMapRef" in source:
                env.update(data("ConfigMap", source["configMapRef"]["name"]))
            if "secretRef" in source:
                env.update(data("Secret", source["secretRef"]["name"]))
        for e in container.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
                continue
            ref = e.get("valueFrom") or {}
            if "configMapKeyRef" in ref:
                value = data("ConfigMap", ref["configMapKeyRef"]["name"]).get(ref["configMapKeyRef"]["key"])
            elif "secretKeyRef" in ref:
                value = data("Secret", ref["secretKeyRef"]["name"]).get(ref["secretKeyRef"]["key"])
            else:
                value = None
            if value is not None:
                env[e["name"]] = value
        return env

    def _containers(self, pods: list[dict[str, Any]]) -> None:
        views: dict[str, ContainerView] = {}
        seen: set[tuple[str, str, int]] = set()
        old = self.kubelet.containers
        for pod in pods:
            md, spec = pod["metadata"], pod.get("spec") or {}
            ns, svc = md.get("namespace", ""), (md.get("labels") or {}).get("app", "")
            app = next((a for a in self.apps if a.namespace == ns), None)
            if app is None or svc not in app.services or not spec.get("containers"):
                continue
            c = spec["containers"][0]
            status: dict[str, Any]
            status = next((s for s in (pod.get("status") or {}).get("containerStatuses") or []
                           if s.get("name") == c.get("name")), {})
            state = next(iter(status.get("state") or {"waiting": {}}))
            restarts = int(status.get("restartCount") or 0)
            key = (md["uid"], c.get("name", ""), restarts)
            seen.add(key)
            if key not in self._configs:  # what it started with; a later ConfigMap edit does not reach it
                self._configs[key] = self._env(ns, c)
            node = spec.get("nodeName") or ""
            previous = old.get(md["uid"])
            views[md["uid"]] = ContainerView(
                namespace=ns, service=svc, pod_name=md["name"], pod_uid=md["uid"], node=node,
                zone=self.network.node_zone.get(node, ""), name=c.get("name", ""), image=c.get("image", ""),
                state=state, restarts=restarts, ready=pod_is_ready(pod),
                ctx=SimpleNamespace(config_data=_FrozenConfig(self._configs[key])),
                memory=previous.memory if previous else 0, cpu_millicores=previous.cpu_millicores if previous else 0.0)
        for key in list(self._configs):
            if key not in seen:
                del self._configs[key]
        self.kubelet.containers = views
        self.kubelet.by_name = {(c.namespace, c.pod_name): c for c in views.values()}

    # -- telemetry ---------------------------------------------------------------------------
    @staticmethod
    def _metrics_port(pod: dict[str, Any]) -> int:
        ports = [p for c in pod["spec"].get("containers") or [] for p in c.get("ports") or []]
        return int(next((p["containerPort"] for p in ports if p.get("name") == "http"), None) or
                   (ports[0]["containerPort"] if ports else 8080))

    def _scrape_pod(self, pod: dict[str, Any]) -> Optional[str]:
        md = pod["metadata"]
        port = self._metrics_port(pod)
        try:
            status, body = self.api.request("GET", pod_proxy_path(md["namespace"], md["name"], port),
                                            timeout=self.scrape_timeout)
        except (OSError, http.client.HTTPException):
            return None
        return body.decode("utf-8", "replace") if status == 200 else None

    def _scrape_node(self, name: str) -> tuple[int, int]:
        try:
            summary = self.api.get(f"/api/v1/nodes/{name}/proxy/stats/summary", timeout=self.scrape_timeout)
            node = summary.get("node") or {}
            cpu = int((node.get("cpu") or {}).get("usageNanoCores") or 0) // 1_000_000
            mem = int((node.get("memory") or {}).get("workingSetBytes") or 0)
            return cpu, mem
        except (OSError, http.client.HTTPException, KubeApiError, ValueError):
            return self._node_usage.get(name, (0, 0))

    def scrape(self, t: datetime, dt: Optional[float] = None) -> dict[tuple[str, str], dict[str, float]]:
        """Scrape every running application pod and record one sample per service at ``t``."""
        pods = [p for p in self.store.list("Pod") if (p.get("status") or {}).get("phase") == "Running"
                and p["metadata"].get("uid") in self.kubelet.containers]
        texts = list(self._pool.map(self._scrape_pod, pods))
        scrapes = []
        scraped = []
        for pod, text in zip(pods, texts):
            c = self.kubelet.containers[pod["metadata"]["uid"]]
            samples = None
            if text is not None:
                try:
                    samples = parse(text)
                    counters = PodCounters.from_samples(samples)
                except ParseError:  # not the runtime answering (a misrouted port …): no sample
                    text = samples = None
                else:
                    c.memory = int(counters.rss_bytes)
            scrapes.append(PodScrape(c.namespace, c.service, c.pod_name, text,
                                     ready=c.ready and self.network.node_up.get(c.node, False), restarts=c.restarts))
            scraped.append(ScrapedPod(c.namespace, c.service, c.pod_name, c.pod_uid, c.name, c.node, c.image,
                                      (pod.get("status") or {}).get("podIP", ""), self._metrics_port(pod),
                                      c.state == "running", samples))
        with self.store.lock:  # the Prometheus API reads under it
            self.series.record(t, scraped)
        services = [(a.namespace, s) for a in self.apps for s in a.services]
        values = self.telemetry.record(t, scrapes, services, dt)
        for (ns, svc), m in values.items():  # per-pod CPU for the container view: the service's share
            members = [c for c in self.kubelet.containers.values() if (c.namespace, c.service) == (ns, svc)]
            for c in members:
                c.cpu_millicores = m.get("cpu_millicores", 0.0) / max(1, len(members))
        names = [n for n, _ in self.topology.nodes]
        self._node_usage = dict(zip(names, self._pool.map(self._scrape_node, names)))
        return values

    def node_usage(self, node: str) -> tuple[int, int]:
        return self._node_usage.get(node, (0, 0))

    def pod_usage(self, namespace: str, pod: str) -> dict[str, tuple[int, int]]:
        c = self.kubelet.by_name.get((namespace, pod))
        return {} if c is None else {c.name: (int(c.cpu_millicores), c.memory)}

    # -- writes (fault cleanups) -------------------------------------------------------------
    def _write(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT the object as changed in place, unconditionally (no resourceVersion), so a
        cleanup wins over the agent's concurrent edits the way a human's ``kubectl edit`` would."""
        if obj.get("kind") == "Secret":
            raise unsupported("rotating a credential under running clients")
        body = json.loads(json.dumps(obj))
        body.get("metadata", {}).pop("resourceVersion", None)
        body.pop("status", None)
        body["apiVersion"] = api_version(body["kind"])
        return self.api.json("PUT", object_path(body), body)

    # -- waiting -----------------------------------------------------------------------------
    def wait_rollout(self, timeout: float = 600, every: float = 5.0) -> None:
        """Until every Deployment and StatefulSet of the apps has all its replicas updated and available."""
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        last = ""
        while True:
            deployments = self._list("Deployment") + self._list("StatefulSet")
            pending = [d for d in deployments if not _rolled_out(d)]
            line = f"rollout: {len(deployments) - len(pending)}/{len(deployments)} deployments available"
            if line != last:
                self.progress(f"{line} after {time.monotonic() - t0:.0f}s"
                              + (f" (waiting: {', '.join(_name(d) for d in pending[:6])}"
                                 f"{' …' if len(pending) > 6 else ''})" if pending else ""))
                last = line
            if deployments and not pending:
                self.refresh()
                return
            if time.monotonic() > deadline:
                raise PipelineError(504, f"{line} after {timeout:g}s; not available: "
                                         f"{', '.join(_name(d) for d in pending)}")
            time.sleep(every)


def _name(d: dict[str, Any]) -> str:
    return f"{d['metadata'].get('namespace')}/{d['metadata']['name']}"


def _rolled_out(d: dict[str, Any]) -> bool:
    spec, status, md = d.get("spec") or {}, d.get("status") or {}, d["metadata"]
    want = int(spec.get("replicas", 1))
    return (int(status.get("observedGeneration") or 0) >= int(md.get("generation") or 0)
            and int(status.get("updatedReplicas") or 0) >= want and int(status.get("availableReplicas") or 0) >= want
            and int(status.get("replicas") or 0) <= want)


__all__ = ["ContainerView", "KubeCluster", "KubeNetwork", "MirrorStore", "PublishingArtifacts", "unsupported"]
