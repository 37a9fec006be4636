"""Init containers: what the kubelet runs, in order, before a pod's app container starts.

Each init container of ``spec.initContainers`` must exit 0 before the next one starts; the app
container waits (``PodInitializing``) until all have. An init container of a utility image
(busybox, alpine, curl …) runs its command in the exec shell, so a ``nc -z db 5432`` or a
``wget`` of a Service meets the twin's network as an exec would; one of an image we built runs
the app's own start-up and is done; an image no one built fails to pull. A failed init
container is restarted with the CrashLoopBackOff back-off (``restartPolicy`` Always or
OnFailure, as Deployments' pods have), so ``kubectl get pods`` shows ``Init:0/1``,
``Init:Error`` and ``Init:CrashLoopBackOff`` from the status written here, in the real
kubelet's shape (``status.initContainerStatuses``, the ``Initialized`` condition), and
``kubectl logs -c <init>`` reads each init container's own log.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Optional

from ..exec import ExecFailure, run_process
from ..exec.shell import BufIn, BufOut
from ..k8s.objects import set_condition
from ..k8s.store import iso
from .containers import Runtime, main_argv
from .kubelet import LOG_LINES, MAX_BACKOFF, Container

if TYPE_CHECKING:
    from .kubelet import Kubelet


@dataclass
class InitRun:
    """One init container's runtime state."""

    name: str
    image: str
    state: str = "waiting"  # waiting | running | terminated
    reason: str = "PodInitializing"
    message: str = ""
    exit_code: int = 0
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    ends_at: Optional[datetime] = None  # a running command's end on its own clock
    pending_code: int = 0  # … and its exit code then
    restarts: int = 0
    next_start: Optional[datetime] = None
    backoff: float = 0.0
    last_termination: Optional[dict[str, Any]] = None
    logs: deque = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    previous_logs: list = field(default_factory=list)

    def log(self, t: datetime, text: str) -> None:
        for part in text.splitlines():
            self.logs.append((t, part))


class InitContainers:
    """The init-container part of every twin kubelet (``Kubelet.inits``)."""

    def __init__(self, kubelet: Kubelet, runtime: Runtime) -> None:
        self.kubelet = kubelet
        self.runtime = runtime
        self.runs: dict[str, list[InitRun]] = {}  # pod uid -> its init containers, in order
        self.done: set[str] = set()  # pods whose init containers all completed (nothing more to do)

    def forget(self, uid: str) -> None:
        self.runs.pop(uid, None)
        self.done.discard(uid)

    def logs(self, uid: str, name: str, previous: bool) -> Optional[list[tuple[datetime, str]]]:
        """An init container's log (``kubectl logs -c``); None if ``name`` is not one of the pod's."""
        run = next((r for r in self.runs.get(uid, []) if r.name == name), None)
        if run is None:
            return None
        return list(run.previous_logs if previous else run.logs)

    def pending(self, pod: dict[str, Any], c: Container, now: datetime) -> bool:
        """Advance the pod's init containers; True while the app container must still wait."""
        uid = pod["metadata"]["uid"]
        if uid in self.done:
            return False
        specs = pod["spec"].get("initContainers") or []
        runs = self.runs.get(uid)
        if runs is None:
            runs = self.runs[uid] = [InitRun(s.get("name", ""), str(s.get("image", ""))) for s in specs]
        for spec, run in zip(specs, runs):
            if run.state == "terminated" and run.exit_code == 0:
                continue
            self._advance(pod, spec, run, c, now)
            break
        done = all(r.state == "terminated" and r.exit_code == 0 for r in runs)
        self._write_status(pod, runs, c, now, done)
        if done:
            self.done.add(uid)
        return not done

    # -- one init container ----------------------------------------------------------------
    def _advance(self, pod: dict[str, Any], spec: dict[str, Any], run: InitRun, c: Container, now: datetime) -> None:
        """Play the init container's timeline up to ``now``: a command that ended since the last
        pass ended when its own clock said, and a back-off that ran out restarts it then, so
        the state at ``now`` is the one a real kubelet would show (not one step per tick)."""
        for _ in range(8):  # a few exits and restarts fit in one tick at most
            if run.state == "running":
                if run.ends_at is None or now < run.ends_at:
                    return
                self._exited(pod, run, run.pending_code, run.ends_at)
                continue
            if run.state == "terminated" or (run.next_start is not None and now < run.next_start):
                return
            self._start(pod, spec, run, c, run.next_start or now)

    def _start(self, pod: dict[str, Any], spec: dict[str, Any], run: InitRun, c: Container, now: datetime) -> None:
        node = pod["spec"]["nodeName"]
        events = self.kubelet.events
        self.kubelet.sandbox(pod, now)
        utility = self.runtime.knows(run.image)
        if not utility and self.kubelet.artifacts.by_image(run.image) is None:
            msg = f'rpc error: code = NotFound desc = failed to pull and unpack image "{run.image}": not found'
            events.record(pod, "Warning", "Failed", f'Failed to pull image "{run.image}": {msg}', "kubelet", node)
            self._back_off(run, now, "ErrImagePull", msg)
            return
        if (node, run.image) not in self.kubelet.pulled:
            self.kubelet.pulled.add((node, run.image))
            events.record(pod, "Normal", "Pulled", f'Successfully pulled image "{run.image}"', "kubelet", node)
        if run.started_at is not None or run.last_termination is not None:
            run.restarts += 1
            run.previous_logs = list(run.logs)
            run.logs.clear()
        events.record(pod, "Normal", "Created", f"Created container {run.name}", "kubelet", node)
        events.record(pod, "Normal", "Started", f"Started container {run.name}", "kubelet", node)
        run.state, run.reason, run.message, run.started_at = "running", "", "", now
        if not utility:
            self._exited(pod, run, 0, now)  # our own image: its start-up step, which passes
            return
        code, seconds = self._execute(pod, spec, run, c, now)
        if seconds >= 1.0:
            run.ends_at, run.pending_code = now + timedelta(seconds=min(seconds, 10 * 365 * 86400.0)), code
        else:
            self._exited(pod, run, code, now)

    def _execute(self, pod: dict[str, Any], spec: dict[str, Any], run: InitRun, c: Container,
                 now: datetime) -> tuple[int, float]:
        """Run the init container's command in the exec shell: (exit code, seconds it took)."""
        box = Container(c.pod_uid, run.name, run.image, app=c.app, service=c.service, zone=c.zone, node=c.node,
                        pod_name=c.pod_name, namespace=c.namespace)
        box.started_at = now
        view = self.runtime.view(pod, box, secret_visible=lambda _name: True, container=run.name, main=True)
        out = BufOut()
        try:
            end = run_process(view, main_argv(self.runtime.image_of(box, run.image), spec), BufIn(b""), out, out)
            code, seconds = end.code, (float("inf") if end.stopped else end.seconds)
        except ExecFailure as e:
            out.write(f"{e}\n")
            code, seconds = 128, 0.0
        run.log(now, bytes(out.data).decode(errors="replace").replace("\r\n", "\n"))
        return code, seconds

    def _exited(self, pod: dict[str, Any], run: InitRun, code: int, now: datetime) -> None:
        run.ends_at = None
        run.exit_code, run.finished_at = code, now
        if code == 0:
            run.state, run.reason = "terminated", "Completed"
            return
        run.last_termination = {"terminated": {"exitCode": code, "reason": "Error",
                                               "startedAt": iso(run.started_at or now), "finishedAt": iso(now),
                                               "containerID": self._container_id(pod, run)}}
        if pod["spec"].get("restartPolicy", "Always") == "Never":
            run.state, run.reason = "terminated", "Error"
            return
        uid = pod["metadata"]["uid"]
        self._back_off(run, now, "CrashLoopBackOff",
                       f"back-off {int(min(MAX_BACKOFF, max(10.0, run.backoff * 2)))}s restarting failed "
                       f"container={run.name} pod={pod['metadata']['name']}_{pod['metadata']['namespace']}({uid})")
        self.kubelet.events.record(pod, "Warning", "BackOff", "Back-off restarting failed container "
                                   f"{run.name} in pod {pod['metadata']['name']}_{pod['metadata']['namespace']}({uid})",
                                   "kubelet", pod["spec"]["nodeName"])

    @staticmethod
    def _back_off(run: InitRun, now: datetime, reason: str, message: str) -> None:
        run.state, run.reason, run.message = "waiting", reason, message
        run.backoff = min(MAX_BACKOFF, max(10.0, run.backoff * 2))
        run.next_start = now + timedelta(seconds=run.backoff)

    @staticmethod
    def _container_id(pod: dict[str, Any], run: InitRun) -> str:
        return f"containerd://{pod['metadata']['uid'].replace('-', '')}{run.name.encode().hex()[:8]}{run.restarts:04d}"

    # -- status ----------------------------------------------------------------------------
    def _write_status(self, pod: dict[str, Any], runs: list[InitRun], c: Container, now: datetime,
                      done: bool) -> None:
        status = pod["status"]
        before = (status.get("phase"), status.get("initContainerStatuses"), status.get("containerStatuses"),
                  [dict(x) for x in status.get("conditions") or []])
        statuses = []
        for run in runs:
            cs: dict[str, Any] = {"name": run.name, "image": run.image, "imageID": "",
                                  "ready": run.state == "terminated" and run.exit_code == 0,
                                  "restartCount": run.restarts, "started": run.state == "running"}
            if run.state == "running":
                cs["state"] = {"running": {"startedAt": iso(run.started_at or now)}}
                cs["containerID"] = self._container_id(pod, run)
            elif run.state == "terminated":
                cs["state"] = {"terminated": {"exitCode": run.exit_code, "reason": run.reason,
                                              "startedAt": iso(run.started_at or now),
                                              "finishedAt": iso(run.finished_at or now),
                                              "containerID": self._container_id(pod, run)}}
                cs["containerID"] = self._container_id(pod, run)
            else:
                waiting: dict[str, Any] = {"reason": run.reason}
                if run.message:
                    waiting["message"] = run.message
                cs["state"] = {"waiting": waiting}
            cs["lastState"] = dict(run.last_termination) if run.last_termination else {}
            statuses.append(cs)
        status["initContainerStatuses"] = statuses
        if done:
            if before != (status.get("phase"), statuses, before[2], before[3]):
                self.kubelet.store.touch(pod)
            return  # the app container's own pass writes the rest
        failed = any(r.state == "terminated" and r.exit_code != 0 for r in runs)
        status["phase"] = "Failed" if failed else "Pending"
        status["containerStatuses"] = [{"name": c.name, "image": c.image, "imageID": "", "ready": False,
                                        "restartCount": 0, "started": False,
                                        "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {}}]
        incomplete = [r.name for r in runs if not (r.state == "terminated" and r.exit_code == 0)]
        set_condition(pod, "Initialized", "False", now, "ContainersNotInitialized",
                      f"containers with incomplete status: [{' '.join(incomplete)}]")
        for type_ in ("Ready", "ContainersReady"):
            set_condition(pod, type_, "False", now, "ContainersNotReady", f"containers with unready status: [{c.name}]")
        after = (status.get("phase"), statuses, status["containerStatuses"], status.get("conditions"))
        if after != before:
            self.kubelet.store.touch(pod)
