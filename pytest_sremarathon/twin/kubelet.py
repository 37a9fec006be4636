"""The kubelet of every twin node: starts containers from built artifacts, runs readiness and
liveness probes against the handler code, restarts crashed containers with CrashLoopBackOff
back-off, OOM-kills containers whose memory passes their limit, evicts pods from a node under
disk pressure, keeps their logs, and writes pod status in the shape the real kubelet does.

Images no artifact was built for fail to pull, except the well-known utility images the
container runtime knows (:class:`ContainerRuntime`, ``twin/containers.py``: busybox, alpine,
curlimages/curl, nicolaka/netshoot, nginx): their containers run their command in the exec
shell, and end (``Completed``, the pod ``Succeeded`` or ``Failed`` under ``restartPolicy:
Never``) when it exits."""

from __future__ import annotations

import base64
import binascii
import types
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Optional, Protocol

from ..k8s.objects import EventRecorder, pod_is_active, set_condition
from ..k8s.quantity import cpu_millicores, memory_bytes
from ..k8s.store import Store, iso
from ..runtime.code import (
    Artifact,
    ArtifactStore,
    ContainerCrash,
    Context,
    Router,
    datastore_artifact,
    format_exception,
    load_module,
)
from .probes import ProbeQueue

if TYPE_CHECKING:
    from .scheduler import Scheduler

MAX_BACKOFF = 300.0
BASE_MEMORY = 48 * 2**20
DATASTORE_MEMORY = 24 * 2**20
RETAINED_ENTRY_BYTES = 64 * 2**10  # one sampled request's worth of retained state
RETAINING = (list, dict, set, deque)  # module globals whose entries count toward a pod's memory
# The usual kinds of module global that never retain (functions, classes, modules, constants):
# _measure_memory looks at every global of every running container every tick, and skips these
# without an isinstance (an instance of one of these builtin types is never one of RETAINING).
_PLAIN_GLOBALS = frozenset({types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type, str, int,
                            float, bool, type(None), bytes, tuple, frozenset})
LOG_LINES = 2000
SERVED_PATHS = ("/readyz", "/healthz")
DISK_PRESSURE_TAINT = "node.kubernetes.io/disk-pressure"
EPHEMERAL_THRESHOLD = "10Gi"  # the default eviction threshold nodefs.available<10% of 100Gi


@dataclass
class Container:
    """Runtime state of one container, the part of a pod the API object only mirrors."""

    pod_uid: str
    name: str
    image: str
    app: str
    service: str
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "ContainerCreating"
    message: str = ""
    module: Optional[types.ModuleType] = None
    ctx: Optional[Context] = None
    started_at: Optional[datetime] = None
    restarts: int = 0
    next_start: Optional[datetime] = None
    backoff: float = 0.0
    last_termination: Optional[dict[str, Any]] = None
    ready: bool = False
    liveness_failures: int = 0
    readiness_failures: int = 0
    cpu_millicores: float = 0.0
    cpu_limit: float = 0.0
    written: Optional[tuple] = None  # what the pod status was last written from
    memory: int = 0
    logs: deque = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    previous_logs: list = field(default_factory=list)
    zone: str = ""
    node: str = ""
    pod_name: str = ""
    namespace: str = ""
    env: Optional[list[Any]] = None  # the process environment, composed when it started (ContainerRuntime)
    main: Any = None  # a utility image's main process (ContainerRuntime); None for built artifacts
    exit_code: Optional[int] = None  # state "terminated": how the main process exited …
    finished_at: Optional[datetime] = None  # … and when
    # The pod's probes as _probe reads them every pass (_ProbePlan): a pure function of the pod's
    # spec, so kept while the pod's resourceVersion stays the same (every tick, mostly).
    probe_plan: Optional[_ProbePlan] = None

    def log(self, t: datetime, line: str) -> None:
        for part in line.splitlines() or [""]:
            self.logs.append((t, part))


@dataclass
class _ProbePlan:
    """What _probe reads of a container's probes every pass, for one version of its pod: the
    probes (None when unset or empty), their initial delays, the readiness probe's timeout and
    period, and (filled in at first use) what each reaches (_probe_target_ok); and the container's
    memory limit, which _check_memory compares with right after."""

    rv: str  # the pod's resourceVersion it was read at (a new version replaces the dicts, touch bumps it)
    liveness: Optional[dict[str, Any]]
    liveness_delay: Any
    liveness_http: bool
    readiness: Optional[dict[str, Any]]
    readiness_delay: Any
    readiness_http: bool
    timeout_ms: float
    period: Any  # max(1, periodSeconds), what a pass's probe weight divides dt by
    memory_limit: int  # resources.limits.memory in bytes (0: none), what _check_memory compares with
    targets: dict[str, tuple[bool, str]] = field(default_factory=dict)  # "liveness"/"readiness" -> reached?


def _probe_plan(rv: str, spec: dict[str, Any]) -> _ProbePlan:
    liveness = spec.get("livenessProbe") or None
    readiness = spec.get("readinessProbe") or None
    return _ProbePlan(
        rv, liveness, liveness.get("initialDelaySeconds", 0) if liveness else 0,
        liveness is not None and "httpGet" in liveness,
        readiness, readiness.get("initialDelaySeconds", 0) if readiness else 0,
        readiness is not None and "httpGet" in readiness,
        1000.0 * readiness.get("timeoutSeconds", 1) if readiness else 0.0,
        max(1, readiness.get("periodSeconds", 10)) if readiness else 1,
        _memory_limit(spec))


def _memory_limit(spec: dict[str, Any]) -> int:
    return memory_bytes(((spec.get("resources") or {}).get("limits") or {}).get("memory"))


def _probe_target_ok(probe: dict[str, Any], container_spec: dict[str, Any]) -> tuple[bool, str]:
    """Does the probe reach something the runtime serves? (path and port as configured)"""
    ports = {p.get("containerPort") for p in container_spec.get("ports") or []} | \
        {p.get("name") for p in container_spec.get("ports") or [] if p.get("name")}
    if "httpGet" in probe:
        http = probe["httpGet"]
        if http.get("port") not in ports:
            return False, f'Get "http://{{pod}}:{http.get("port")}{http.get("path", "/")}": dial tcp: connect: connection refused'
        if http.get("path", "/") not in SERVED_PATHS:
            return False, "HTTP probe failed with statuscode: 404"
        return True, ""
    if "tcpSocket" in probe:
        if probe["tcpSocket"].get("port") not in ports:
            return False, f"dial tcp :{probe['tcpSocket'].get('port')}: connect: connection refused"
        return True, ""
    return True, ""  # exec probes: the twin treats the command as succeeding


class ContainerRuntime(Protocol):
    """What the kubelet asks of the container runtime beyond the built artifacts
    (``twin/containers.py``)."""

    def knows(self, image: str) -> bool:
        """A utility image the runtime can run although no artifact was built for it."""
        ...

    def started(self, pod: dict[str, Any], spec: dict[str, Any], c: Container) -> None:
        """A container just started: note what its process was started with (its environment)."""
        ...

    def start_main(self, pod: dict[str, Any], spec: dict[str, Any], c: Container, now: datetime) -> None:
        """Start a utility container's main process (it may exit at once: :meth:`Kubelet.main_exited`)."""
        ...

    def tick_main(self, pod: dict[str, Any], c: Container, now: datetime) -> None:
        """A kubelet pass over a running utility container (a process whose time is up exits)."""
        ...

    def probe(self, c: Container, probe: dict[str, Any]) -> tuple[bool, str]:
        """A probe of a utility container (what its main process serves)."""
        ...


class InitRunner(Protocol):
    """The init containers of a pod (``twin/init_containers.py``)."""

    def pending(self, pod: dict[str, Any], c: Container, now: datetime) -> bool:
        """Advance the pod's init containers; True while its app container must wait."""
        ...

    def forget(self, uid: str) -> None: ...

    def logs(self, uid: str, name: str, previous: bool) -> Optional[list[tuple[datetime, str]]]: ...


class Kubelet:
    def __init__(self, store: Store, events: EventRecorder, artifacts: ArtifactStore, scheduler: Scheduler,
                 router: Router, node_zone: Callable[[str], str]) -> None:
        self.store = store
        self.events = events
        self.artifacts = artifacts
        self.scheduler = scheduler
        self.router = router
        self.node_zone = node_zone
        self.containers: dict[str, Container] = {}  # pod uid -> its (single) app container
        self.by_name: dict[tuple[str, str], Container] = {}  # (namespace, pod) -> container
        self.heartbeats: dict[str, datetime] = {}
        self.pulled: set[tuple[str, str]] = set()  # (node, image)
        self.disk_pressure: set[str] = set()  # nodes whose disk is filling up (a fault knob)
        self._pressured: set[str] = set()  # nodes this kubelet reported DiskPressure on
        self._evictions = 0
        self.runtime: Optional[ContainerRuntime] = None  # utility images, environments (TwinCluster sets it)
        self.inits: Optional[InitRunner] = None  # init containers (TwinCluster sets it)
        self.probe_queue = ProbeQueue()  # probes that wait out their timeout behind an overload

    # -- public ----------------------------------------------------------------------------
    def container_of(self, namespace: str, pod: str) -> Optional[Container]:
        obj = self.store.get("Pod", namespace, pod)
        return self.containers.get(obj["metadata"]["uid"]) if obj else None

    def tick(self, up_nodes: set[str], dt: float) -> None:
        now = self.store.clock()
        for node in up_nodes:
            self.heartbeats[node] = now
        live_uids = set()
        for pod in self.store.list("Pod"):
            node = pod["spec"].get("nodeName")
            uid = pod["metadata"]["uid"]
            live_uids.add(uid)
            if not node or node not in up_nodes or not pod_is_active(pod):
                continue
            c = self.containers.get(uid) or self._container_for(pod, node)
            if "initContainers" in pod["spec"] and self.inits is not None and self.inits.pending(pod, c, now):
                continue
            self._run(pod, c, now, dt)
        for uid in list(self.containers):
            if uid not in live_uids:
                gone = self.containers.pop(uid)
                if self.by_name.get((gone.namespace, gone.pod_name)) is gone:  # not a StatefulSet pod's successor
                    self.by_name.pop((gone.namespace, gone.pod_name), None)
                if self.inits is not None:
                    self.inits.forget(uid)
                self.probe_queue.forget(uid)
        if self.disk_pressure or self._pressured:
            self._disk_pressure(up_nodes, now)

    def start_now(self, pod: dict[str, Any]) -> Optional[Container]:
        """Start a scheduled pod's container at once, not at the next tick (a debug pod of a
        utility image, created through the API during an agent's step). The caller checked that
        its node is up."""
        node = pod["spec"].get("nodeName")
        if not node or not pod_is_active(pod):
            return None
        c = self.containers.get(pod["metadata"]["uid"]) or self._container_for(pod, node)
        now = self.store.clock()
        if "initContainers" in pod["spec"] and self.inits is not None and self.inits.pending(pod, c, now):
            return c  # its init containers first (they may run on at the next ticks)
        self._run(pod, c, now, 0.0)
        if c.state == "running":
            self._run(pod, c, now, 0.0)  # the first pass after the start: probes, readiness
        return c

    def main_exited(self, pod: dict[str, Any], c: Container, code: int, now: datetime) -> None:
        """A utility container's main process exited with ``code``: restarted as the pod's
        ``restartPolicy`` says (with CrashLoopBackOff back-off), or terminated for good."""
        policy = pod["spec"].get("restartPolicy", "Always")
        reason = "Completed" if code == 0 else "Error"
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            self._crash(pod, c, now, "", reason, code)
        else:
            c.state, c.reason, c.message, c.ready = "terminated", reason, "", False
            c.exit_code, c.finished_at = code, now
        self._write_status(pod, pod["spec"]["containers"][0], c, now)

    def _container_for(self, pod: dict[str, Any], node: str) -> Container:
        spec = pod["spec"]["containers"][0]
        labels = pod["metadata"].get("labels") or {}
        c = Container(pod["metadata"]["uid"], spec["name"], spec.get("image", ""), app=pod["metadata"]["namespace"],
                      service=labels.get("app", spec["name"]), zone=self.node_zone(node), node=node,
                      pod_name=pod["metadata"]["name"], namespace=pod["metadata"]["namespace"],
                      cpu_limit=cpu_millicores(((spec.get("resources") or {}).get("limits") or {}).get("cpu")))
        self.containers[c.pod_uid] = c
        self.by_name[(c.namespace, c.pod_name)] = c
        return c

    # -- lifecycle -------------------------------------------------------------------------
    def _run(self, pod: dict[str, Any], c: Container, now: datetime, dt: float) -> None:
        spec = pod["spec"]["containers"][0]
        if c.state == "terminated":
            pass
        elif c.state != "running":
            if c.next_start is None or now >= c.next_start:
                self._start(pod, spec, c, now)
        else:
            if c.main is not None and self.runtime is not None:
                self.runtime.tick_main(pod, c, now)
            if c.state == "running":
                self._probe(pod, spec, c, now, dt)
                self._check_memory(pod, spec, c, now)
        self._write_status(pod, spec, c, now)

    def _artifact(self, image: str, app: str, service: str) -> Optional[Artifact]:
        artifact = self.artifacts.by_image(image)
        if artifact is None and "@" not in image and ":" in image.rsplit("/", 1)[-1]:
            # a stock image (a datastore); tags of images we never built do not exist
            if image.split(":")[0].rsplit("/", 1)[-1] in ("redis", "mongo", "memcached", "postgres", "mysql"):
                artifact = datastore_artifact(app, service, image)
        return artifact

    def _config(self, pod: dict[str, Any], spec: dict[str, Any]) -> tuple[Optional[dict[str, str]], str]:
        data: dict[str, str] = {}
        ns = pod["metadata"]["namespace"]
        for source in spec.get("envFrom") or []:
            ref = source.get("configMapRef")
            if ref:
                cm = self.store.get("ConfigMap", ns, ref["name"])
                if cm is None:
                    if ref.get("optional"):
                        continue
                    return None, f'configmap "{ref["name"]}" not found'
                data.update(cm.get("data") or {})
        for env in spec.get("env") or []:
            if "value" in env:
                data[env["name"]] = str(env["value"])
            elif "valueFrom" in env and "configMapKeyRef" in env["valueFrom"]:
                ref = env["valueFrom"]["configMapKeyRef"]
                cm = self.store.get("ConfigMap", ns, ref["name"])
                if cm is None or ref["key"] not in (cm.get("data") or {}):
                    if ref.get("optional"):
                        continue
                    return None, f'couldn\'t find key {ref["key"]} in ConfigMap {ns}/{ref["name"]}'
                data[env["name"]] = cm["data"][ref["key"]]
            elif "valueFrom" in env and "secretKeyRef" in env["valueFrom"]:
                ref = env["valueFrom"]["secretKeyRef"]
                secret = self.store.get("Secret", ns, ref["name"])
                value = _secret_data(secret).get(ref["key"]) if secret is not None else None
                if value is None:
                    if ref.get("optional"):
                        continue
                    return None, (f'secret "{ref["name"]}" not found' if secret is None else
                                  f'couldn\'t find key {ref["key"]} in Secret {ns}/{ref["name"]}')
                data[env["name"]] = value
        for source in spec.get("envFrom") or []:
            ref = source.get("secretRef")
            if ref:
                secret = self.store.get("Secret", ns, ref["name"])
                if secret is None:
                    if ref.get("optional"):
                        continue
                    return None, f'secret "{ref["name"]}" not found'
                data.update({k: v for k, v in _secret_data(secret).items() if k not in data})
        return data, ""

    def sandbox(self, pod: dict[str, Any], now: datetime) -> None:
        """The pod's sandbox: its IP and start time, given once (before its first container)."""
        node = pod["spec"]["nodeName"]
        if not pod["status"].get("podIP"):
            node_obj = self.store.get("Node", None, node)
            if node_obj is not None:
                pod["status"]["podIP"] = self.scheduler.next_ip(node_obj)
                pod["status"]["podIPs"] = [{"ip": pod["status"]["podIP"]}]
                pod["status"]["hostIP"] = next((a["address"] for a in node_obj["status"].get("addresses", [])
                                                if a["type"] == "InternalIP"), "")
                pod["status"]["startTime"] = iso(now)

    def _start(self, pod: dict[str, Any], spec: dict[str, Any], c: Container, now: datetime) -> None:
        node = pod["spec"]["nodeName"]
        self.sandbox(pod, now)
        artifact = self._artifact(c.image, c.app, c.service)
        if artifact is None and self.runtime is not None and self.runtime.knows(c.image):
            self._start_utility(pod, spec, c, now)
            return
        if artifact is None:
            reason = "ImagePullBackOff" if c.reason in ("ErrImagePull", "ImagePullBackOff") else "ErrImagePull"
            msg = f'rpc error: code = NotFound desc = failed to pull and unpack image "{c.image}": not found'
            if reason == "ErrImagePull":
                self.events.record(pod, "Warning", "Failed", f'Failed to pull image "{c.image}": {msg}', "kubelet", node)
            else:
                self.events.record(pod, "Normal", "BackOff", f'Back-off pulling image "{c.image}"', "kubelet", node)
            self._back_off(c, now, reason, msg if reason == "ErrImagePull" else f'Back-off pulling image "{c.image}"')
            return
        if (node, c.image) not in self.pulled:
            self.pulled.add((node, c.image))
            self.events.record(pod, "Normal", "Pulled", f'Successfully pulled image "{c.image}"', "kubelet", node)
        config = self._new_process(pod, spec, c, now)
        if config is None:
            return
        ctx = Context(app=c.app, service=c.service, pod=c.pod_name, zone=c.zone, config_data=config,
                      router=self.router, logger=lambda line: c.log(self.store.clock(), line))
        self.events.record(pod, "Normal", "Created", f"Created container {c.name}", "kubelet", node)
        self.events.record(pod, "Normal", "Started", f"Started container {c.name}", "kubelet", node)
        c.started_at = now
        c.log(now, f"INFO starting {c.service} ({artifact.digest[:19]}) on {c.node}")
        try:
            module = load_module(artifact, c.pod_name)
            startup = getattr(module, "startup", None)
            if callable(startup):
                failed: list[BaseException] = []

                def run_startup() -> None:
                    try:
                        startup(ctx)
                    except Exception as exc:  # noqa: BLE001 - re-raised below: the process exits
                        failed.append(exc)

                self.router.invoke(ctx, run_startup, weight=0.0)
                if failed:
                    raise failed.pop()  # (a list still holding it would make a cycle through this frame)
        except ContainerCrash as crash:
            self._crash(pod, c, now, str(crash), "Error", 1)
            return
        except Exception as exc:  # startup() raised: the process exits
            self._crash(pod, c, now, format_exception(exc), "Error", 1)
            return
        c.module, c.ctx = module, ctx
        c.state, c.reason, c.message = "running", "", ""
        c.ready = False
        c.liveness_failures = c.readiness_failures = 0
        c.log(now, f"INFO {c.service} listening on :8080")
        if self.runtime is not None:
            self.runtime.started(pod, spec, c)

    def _new_process(self, pod: dict[str, Any], spec: dict[str, Any], c: Container,
                     now: datetime) -> Optional[dict[str, str]]:
        """What every container start does before its process runs: resolve the configuration
        (None, with the back-off recorded, when it cannot be), count the restart and keep the
        last run's logs as ``--previous``. The configuration, when it can start."""
        config, problem = self._config(pod, spec)
        if config is None:
            self.events.record(pod, "Warning", "Failed", f"Error: {problem}", "kubelet", pod["spec"]["nodeName"])
            self._back_off(c, now, "CreateContainerConfigError", problem)
            return None
        if c.started_at is not None or c.last_termination is not None:
            c.restarts += 1
        c.previous_logs = list(c.logs) if c.last_termination else c.previous_logs
        if c.last_termination:
            c.logs.clear()
        return config

    def _start_utility(self, pod: dict[str, Any], spec: dict[str, Any], c: Container, now: datetime) -> None:
        """A utility image (busybox, alpine, curl, netshoot, nginx): no code of ours, its command
        runs in the exec shell (ContainerRuntime.start_main)."""
        assert self.runtime is not None
        node = pod["spec"]["nodeName"]
        if (node, c.image) not in self.pulled:
            self.pulled.add((node, c.image))
            self.events.record(pod, "Normal", "Pulling", f'Pulling image "{c.image}"', "kubelet", node)
            self.events.record(pod, "Normal", "Pulled", f'Successfully pulled image "{c.image}"', "kubelet", node)
        config = self._new_process(pod, spec, c, now)
        if config is None:
            return
        self.events.record(pod, "Normal", "Created", f"Created container {c.name}", "kubelet", node)
        self.events.record(pod, "Normal", "Started", f"Started container {c.name}", "kubelet", node)
        c.started_at = now
        c.state, c.reason, c.message = "running", "", ""
        c.ready = False
        c.liveness_failures = c.readiness_failures = 0
        self.runtime.started(pod, spec, c)
        self.runtime.start_main(pod, spec, c, now)

    def _back_off(self, c: Container, now: datetime, reason: str, message: str) -> None:
        c.state, c.reason, c.message = "waiting", reason, message
        c.backoff = min(MAX_BACKOFF, max(10.0, c.backoff * 2))
        c.next_start = now + timedelta(seconds=c.backoff)

    def _crash(self, pod: dict[str, Any], c: Container, now: datetime, output: str, reason: str, code: int) -> None:
        for line in output.splitlines():
            c.log(now, line)
        c.last_termination = {"terminated": {"exitCode": code, "reason": reason,
                                             "startedAt": iso(c.started_at or now), "finishedAt": iso(now),
                                             "containerID": self._container_id(c)}}
        c.module = c.ctx = None
        c.ready = False
        self._back_off(c, now, "CrashLoopBackOff",
                       f"back-off {int(min(MAX_BACKOFF, max(10.0, c.backoff * 2)))}s restarting failed container={c.name} "
                       f"pod={c.pod_name}_{c.namespace}({c.pod_uid})")
        self.events.record(pod, "Warning", "BackOff", "Back-off restarting failed container", "kubelet", c.node)

    def _reaches(self, c: Container, plan: _ProbePlan, which: str, probe: dict[str, Any], spec: dict[str, Any],
                 utility: bool) -> tuple[bool, str]:
        """Does the probe reach what it asks for, and why not? A utility container's process
        answers live; any other's answer depends only on the pod's spec, so it is kept with the
        plan (a new pod version makes a new plan)."""
        if utility and self.runtime is not None:
            return self.runtime.probe(c, probe)
        target = plan.targets.get(which)
        if target is None:
            target = plan.targets[which] = _probe_target_ok(probe, spec)
        return target

    def _probe(self, pod: dict[str, Any], spec: dict[str, Any], c: Container, now: datetime, dt: float) -> None:
        plan = c.probe_plan
        rv = pod["metadata"]["resourceVersion"]
        if plan is None or plan.rv != rv:
            plan = c.probe_plan = _probe_plan(rv, spec)
        utility = c.main is not None and self.runtime is not None  # its probes reach what its process serves
        age = (now - c.started_at).total_seconds() if c.started_at else 0.0
        # Liveness: the process answers /healthz as long as it runs.
        liveness = plan.liveness
        if liveness is not None and c.started_at and age >= plan.liveness_delay:
            ok, why = self._reaches(c, plan, "liveness", liveness, spec, utility)
            late = self.probe_queue.timeouts(c, liveness, dt) if ok and plan.liveness_http else []
            if late:  # an overloaded pod: some probes waited out their timeout in its queue
                if self._late_liveness(pod, c, liveness, late, now):
                    return
            elif not ok:
                c.liveness_failures += max(1, int(dt // liveness.get("periodSeconds", 10)))
                self.events.record(pod, "Warning", "Unhealthy", f"Liveness probe failed: {why.replace('{pod}', pod['status'].get('podIP', ''))}",
                                   "kubelet", c.node)
                if c.liveness_failures >= liveness.get("failureThreshold", 3):
                    self.events.record(pod, "Normal", "Killing",
                                       f"Container {c.name} failed liveness probe, will be restarted", "kubelet", c.node)
                    self._crash(pod, c, now, "", "Error", 137)
                    c.backoff = 0.0
                    c.next_start = now
                    return
            else:
                c.liveness_failures = 0
        readiness = plan.readiness
        if readiness is None:
            c.ready = True
            return
        if c.started_at and age < plan.readiness_delay:
            return
        ok, why = self._reaches(c, plan, "readiness", readiness, spec, utility)
        if ok and plan.readiness_http and c.module is not None and callable(getattr(c.module, "ready", None)):
            timeout_ms = plan.timeout_ms
            weight = dt / plan.period
            module, ctx = c.module, c.ctx
            assert ctx is not None  # set and cleared with c.module
            outcome = self.router.invoke(ctx, lambda: module.ready(ctx), weight=weight)
            if outcome.error is not None:
                ok, why = False, f"HTTP probe failed with statuscode: 503 ({outcome.error})"
            elif outcome.latency_ms > timeout_ms:
                ok, why = False, 'Get "http://{pod}:8080/readyz": context deadline exceeded (Client.Timeout exceeded while awaiting headers)'
            elif not outcome.value:
                ok, why = False, "HTTP probe failed with statuscode: 503"
        if ok:
            c.readiness_failures = 0
            c.ready = True
        else:
            c.readiness_failures += 1
            if c.readiness_failures >= readiness.get("failureThreshold", 3) or not c.ready:
                c.ready = False
            self.events.record(pod, "Warning", "Unhealthy",
                               f"Readiness probe failed: {why.replace('{pod}', pod['status'].get('podIP', ''))}",
                               "kubelet", c.node)

    def _late_liveness(self, pod: dict[str, Any], c: Container, liveness: dict[str, Any], late: list[bool],
                       now: datetime) -> bool:
        """This pass's liveness probes against an overloaded pod (``twin/probes.py``: True for
        each that waited past its timeout): consecutive timeouts up to ``failureThreshold`` kill
        the container. True if it was killed."""
        http = liveness["httpGet"]
        why = (f'Get "http://{pod["status"].get("podIP", "")}:{http.get("port")}{http.get("path", "/")}": '
               "context deadline exceeded (Client.Timeout exceeded while awaiting headers)")
        if any(late):
            self.events.record(pod, "Warning", "Unhealthy", f"Liveness probe failed: {why}", "kubelet", c.node)
        for timed_out in late:
            c.liveness_failures = c.liveness_failures + 1 if timed_out else 0
            if c.liveness_failures >= liveness.get("failureThreshold", 3):
                self.events.record(pod, "Normal", "Killing",
                                   f"Container {c.name} failed liveness probe, will be restarted", "kubelet", c.node)
                self._crash(pod, c, now, "", "Error", 137)
                c.backoff = 0.0
                c.next_start = now
                return True
        return False

    def _check_memory(self, pod: dict[str, Any], spec: dict[str, Any], c: Container, now: datetime) -> None:
        c.memory = self._measure_memory(c)
        plan = c.probe_plan  # _probe read this version of the pod's spec just before
        limit = plan.memory_limit if plan is not None and plan.rv == pod["metadata"]["resourceVersion"] \
            else _memory_limit(spec)
        if limit and c.memory > limit:
            c.log(now, f"fatal error: runtime: out of memory (rss {c.memory // 2**20}Mi, limit {limit // 2**20}Mi)")
            self._crash(pod, c, now, "", "OOMKilled", 137)
            self.events.record(pod, "Warning", "OOMKilling",
                               f"Memory cgroup out of memory: Killed process (python) total-vm:{c.memory // 1024}kB",
                               "kernel-monitor", c.node)

    def memory_of(self, c: Container) -> int:
        """The container's working set as of its last kubelet pass (measured once a tick)."""
        return c.memory if c.module is not None else 0

    def _measure_memory(self, c: Container) -> int:
        if c.module is None:
            return 0
        base = DATASTORE_MEMORY if c.image and "@" not in c.image else BASE_MEMORY
        retained = len(c.ctx.cache_dict) if c.ctx else 0
        for name, value in vars(c.module).items():
            kind = type(value)
            if kind in _PLAIN_GLOBALS:
                continue
            if isinstance(value, RETAINING) and not name.startswith("__"):
                retained += len(value)
        return base + retained * RETAINED_ENTRY_BYTES

    # -- disk pressure ---------------------------------------------------------------------
    def _disk_pressure(self, up_nodes: set[str], now: datetime) -> None:
        """The eviction manager: report DiskPressure (the node lifecycle controller's taint
        comes with it) and evict one pod per housekeeping pass while the disk stays full."""
        for node in self.store.list("Node"):
            name = node["metadata"]["name"]
            if name not in up_nodes:
                continue
            if name in self.disk_pressure:
                if name not in self._pressured:
                    self._pressured.add(name)
                    set_condition(node, "DiskPressure", "True", now, "KubeletHasDiskPressure", "kubelet has disk pressure")
                    taints = node["spec"].setdefault("taints", [])
                    if not any(t["key"] == DISK_PRESSURE_TAINT for t in taints):
                        taints.append({"key": DISK_PRESSURE_TAINT, "effect": "NoSchedule"})
                    self.store.touch(node)
                    self.events.record(node, "Normal", "NodeHasDiskPressure",
                                       f"Node {name} status is now: NodeHasDiskPressure", "kubelet", name)
                self._evict_one(node, now)
            elif name in self._pressured:
                self._pressured.discard(name)
                set_condition(node, "DiskPressure", "False", now, "KubeletHasNoDiskPressure", "kubelet has no disk pressure")
                node["spec"]["taints"] = [t for t in node["spec"].get("taints") or [] if t["key"] != DISK_PRESSURE_TAINT]
                if not node["spec"]["taints"]:
                    node["spec"].pop("taints")
                self.store.touch(node)
                self.events.record(node, "Normal", "NodeHasNoDiskPressure",
                                   f"Node {name} status is now: NodeHasNoDiskPressure", "kubelet", name)

    def _evict_one(self, node: dict[str, Any], now: datetime) -> None:
        name = node["metadata"]["name"]
        victims = [p for p in self.store.list("Pod") if p["spec"].get("nodeName") == name and pod_is_active(p)]
        if not victims:
            return
        # Rank as the eviction manager does: the biggest consumer of the starved resource first.
        pod = max(victims, key=lambda p: (self._usage_rank(p), p["metadata"]["name"]))
        self._evictions += 1
        available = f"{7_800_000 - 37_000 * (self._evictions % 40)}Ki"
        spec = pod["spec"]["containers"][0]
        usage = f"{96 + 7 * (self._evictions % 13)}Ki"
        message = (f"The node was low on resource: ephemeral-storage. Threshold quantity: {EPHEMERAL_THRESHOLD}, "
                   f"available: {available}. Container {spec['name']} was using {usage}, request is 0, "
                   f"has larger consumption of ephemeral-storage. ")
        self.events.record(node, "Warning", "EvictionThresholdMet", "Attempting to reclaim ephemeral-storage",
                           "kubelet", name)
        self.events.record(pod, "Warning", "Evicted", message, "kubelet", name)
        self.events.record(pod, "Normal", "Killing", f"Stopping container {spec['name']}", "kubelet", name)
        c = self.containers.pop(pod["metadata"]["uid"], None)
        if c is not None and self.by_name.get((c.namespace, c.pod_name)) is c:
            self.by_name.pop((c.namespace, c.pod_name), None)
        status = pod["status"]
        status.update(phase="Failed", reason="Evicted", message=message)
        for key in ("podIP", "podIPs"):
            status.pop(key, None)
        started = (c.started_at if c is not None else None) or now
        status["containerStatuses"] = [{
            "name": spec["name"], "image": spec.get("image", ""), "imageID": "", "ready": False, "started": False,
            "restartCount": c.restarts if c is not None else 0,
            "state": {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                     "message": "The container could not be located when the pod was terminated",
                                     "startedAt": iso(started), "finishedAt": iso(now)}},
            "lastState": {}}]
        set_condition(pod, "DisruptionTarget", "True", now, "TerminationByKubelet",
                      "The node was low on resource: ephemeral-storage.")
        for type_ in ("Ready", "ContainersReady"):
            set_condition(pod, type_, "False", now, "PodFailed", "")
        self.store.touch(pod)

    def _usage_rank(self, pod: dict[str, Any]) -> int:
        c = self.containers.get(pod["metadata"]["uid"])
        return len(c.logs) + self.memory_of(c) // 2**20 if c is not None else 0

    # -- status ----------------------------------------------------------------------------
    @staticmethod
    def _container_id(c: Container) -> str:
        return f"containerd://{c.pod_uid.replace('-', '')}{c.restarts:04d}"

    def _write_status(self, pod: dict[str, Any], spec: dict[str, Any], c: Container, now: datetime) -> None:
        # Nothing to write when neither the container nor anyone else changed the pod since the
        # last write (most pods, most ticks).
        signature = (c.state, c.reason, c.message, c.ready, c.restarts, c.started_at, id(c.last_termination),
                     pod["metadata"]["resourceVersion"])
        if c.written == signature:
            return
        status = pod["status"]
        before = (status.get("phase"), [dict(x) for x in status.get("containerStatuses") or []],
                  [dict(x) for x in status.get("conditions") or []])
        cs: dict[str, Any] = {"name": c.name, "image": c.image, "imageID": c.image if "@" in c.image else "",
                              "ready": c.ready and c.state == "running", "restartCount": c.restarts,
                              "started": c.state == "running"}
        if c.state == "running":
            cs["state"] = {"running": {"startedAt": iso(c.started_at or now)}}
            cs["containerID"] = self._container_id(c)
        elif c.state == "terminated":
            cs["state"] = {"terminated": {"exitCode": c.exit_code or 0, "reason": c.reason,
                                          "startedAt": iso(c.started_at or now), "finishedAt": iso(c.finished_at or now),
                                          "containerID": self._container_id(c)}}
            cs["containerID"] = self._container_id(c)
        else:
            waiting: dict[str, Any] = {"reason": c.reason}
            if c.message:
                waiting["message"] = c.message
            cs["state"] = {"waiting": waiting}
        cs["lastState"] = dict(c.last_termination) if c.last_termination else {}
        status["containerStatuses"] = [cs]
        if c.state == "terminated":
            status["phase"] = "Succeeded" if c.exit_code == 0 else "Failed"
        else:
            status["phase"] = "Running" if c.state == "running" else "Pending"
        ready = "True" if cs["ready"] else "False"
        why = "PodCompleted" if c.state == "terminated" else "ContainersNotReady"
        unready = "" if c.state == "terminated" else f"containers with unready status: [{c.name}]"
        set_condition(pod, "Initialized", "True", now)
        set_condition(pod, "Ready", ready, now, "" if ready == "True" else why, "" if ready == "True" else unready)
        set_condition(pod, "ContainersReady", ready, now, "" if ready == "True" else why,
                      "" if ready == "True" else unready)
        after = (status.get("phase"), status["containerStatuses"], status.get("conditions"))
        if after != before:
            self.store.touch(pod)
        c.written = signature[:-1] + (pod["metadata"]["resourceVersion"],)


def _secret_data(secret: dict[str, Any]) -> dict[str, str]:
    """A Secret's values as the container sees them (``data`` is base64, ``stringData`` plain)."""
    out: dict[str, str] = {}
    for key, value in (secret.get("data") or {}).items():
        try:
            out[key] = base64.b64decode(str(value)).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue
    for key, value in (secret.get("stringData") or {}).items():
        out[key] = str(value)
    return out
