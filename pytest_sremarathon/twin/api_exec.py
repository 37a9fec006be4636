"""The API server's ``pods/exec`` and ``pods/attach``: ``kubectl exec``, ``kubectl attach`` and
``kubectl run -i`` against the twin's simulated containers, over WebSocket (docs/EXEC.md).

A request goes the way a real API server takes it: authorization first (here the policy point:
an exec is a mutating-class request, verb ``exec``/``attach`` on the pod, with the container
and the command line as its body), then the pod and container checks the registry makes (404
for a missing pod; 400 for a container that is not the pod's, a missing container name on a
pod with several, a pod without a node, an exec without a command), then the upgrade; once the
streams are up the think-time gate is let go (as a watch lets it go), so an interactive session
never holds the world lock, and the session runs in the container the runtime shows
(:class:`PodRuntime`, ``twin/containers.py``). Failures of the container itself (not running,
its node down, a program the image lacks) come after the upgrade, as the runtime's
``InternalError`` Status. Each request is recorded (``admission.record``; the upgraded ones
with status 101), and each session's end too when the admission offers ``record_exec``
(``serving.http.ExecRecorder``).

What an exec shows of Secrets (env from ``secretKeyRef``/``secretRef``, Secret volumes) is put to
the policy as reads of those Secrets for the requesting actor; a denied one reads as
``containers.REDACTED``. ``pods/portforward`` answers 400 with what to do instead.

:class:`PodExec` is a part of :class:`~.apiserver.ApiServer`, like :class:`~.api_writes.ObjectWrites`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, NoReturn, Optional, Protocol

from ..exec import (
    ContainerView,
    ExecFailure,
    ExecOptions,
    HandshakeError,
    InputStream,
    OutputStream,
    RunFn,
    negotiate,
    serve_exec,
    shell_runner,
)
from ..k8s.store import BY_KIND, ApiError, ResourceType, Store
from ..policy import Decision, MutationRequest
from ..serving.http import Admission
from .api_common import Ctx, Stream, bad_request, object_not_found

log = logging.getLogger(__name__)

PORT_FORWARD_MESSAGE = (
    "pods/portforward is not supported by the sremarathon twin (its containers are simulated and listen on no "
    "real port); reach the pod from inside the cluster instead: kubectl exec <pod> -- wget -qO- "
    "http://<service>.<namespace>:<port>/<path>, or a debug pod: kubectl run tmp --rm -i --restart=Never "
    "--image=busybox -- wget -qO- http://<service>.<namespace>:<port>/<path>")


class PodRuntime(Protocol):
    """What the API server asks of the container runtime (``twin/containers.Runtime``)."""

    def exec_view(self, namespace: str, name: str, container: str,
                  secret_visible: Callable[[str], bool], actor: str = "agent") -> ContainerView:
        """The view an exec of ``actor`` runs in; :class:`ExecFailure` (reported after the
        upgrade) when the container cannot run one."""
        ...

    def attach(self, namespace: str, name: str, container: str, options: ExecOptions,
               secret_visible: Callable[[str], bool]) -> tuple[RunFn, list[str]]:
        """The ``run`` of an attach to the container's main process, and that process's argv."""
        ...

    def pod_created(self, namespace: str, name: str) -> None:
        """A pod was created through the API (a debug pod of a utility image starts at once)."""
        ...


def _secret_names(spec: dict[str, Any], pod_spec: dict[str, Any]) -> set[str]:
    """The Secrets a container shows: env, envFrom and the volumes it mounts."""
    names: set[str] = set()
    for env in spec.get("env") or []:
        ref = ((env.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
        if ref:
            names.add(ref)
    for src in spec.get("envFrom") or []:
        ref = (src.get("secretRef") or {}).get("name")
        if ref:
            names.add(ref)
    mounted = {m.get("name") for m in spec.get("volumeMounts") or []}
    for vol in pod_spec.get("volumes") or []:
        if vol.get("name") not in mounted:
            continue
        if (vol.get("secret") or {}).get("secretName"):
            names.add(vol["secret"]["secretName"])
        for src in (vol.get("projected") or {}).get("sources") or []:
            if (src.get("secret") or {}).get("name"):
                names.add(src["secret"]["name"])
    return names


class PodExec:
    """The exec and attach handlers of :class:`~.apiserver.ApiServer`."""

    store: Store
    admission: Admission
    runtime: Optional[PodRuntime]

    _record: Callable[[MutationRequest, Decision, int], None]  # the API server's (ObjectWrites)

    def _create(self, ctx: Ctx, rt: ResourceType, ns: Optional[str]) -> tuple[int, str, bytes]:
        """A create, then: a debug pod starts at once (see :meth:`PodRuntime.pod_created`)."""
        status, ctype, payload = super()._create(ctx, rt, ns)  # type: ignore[misc]
        if rt.kind == "Pod" and status == 201 and self.runtime is not None and not ctx.query.get("dryRun"):
            try:
                name = json.loads(payload)["metadata"]["name"]
            except (ValueError, KeyError, TypeError):
                name = None
            if name:
                self.runtime.pod_created(ns or "default", name)
        return status, ctype, payload

    def _pod_stream(self, ctx: Ctx, ns: str, name: str, sub: str) -> NoReturn:
        """``GET …/pods/{name}/exec|attach`` with a WebSocket upgrade (raises :class:`Stream`
        once the session is over; an :class:`ApiError` before the upgrade)."""
        if sub == "portforward":
            raise bad_request(PORT_FORWARD_MESSAGE)
        if self.runtime is None:
            raise bad_request(f"pods/{sub} is not supported by the sremarathon twin: its containers are "
                              f"simulated; use pod logs, events and metrics instead")
        options = ExecOptions.from_query(ctx.raw_query)
        req = MutationRequest(actor=ctx.actor, channel="kube", verb=sub, resource="pods", namespace=ns, name=name,
                              subresource=sub, app=ns,
                              body={"container": options.container, "command": list(options.command),
                                    "stdin": options.stdin, "tty": options.tty})
        decision = self.admission.decide(req)
        if not decision.allowed:
            self._record(req, decision, 403)
            raise ApiError(403, "Forbidden", decision.message or "forbidden", kind="pods", name=name)
        try:
            container, secrets = self._check(ns, name, sub, options)
        except ApiError as e:
            self._record(req, decision, e.code)
            raise
        options = ExecOptions(command=options.command, container=container, stdin=options.stdin,
                              stdout=options.stdout, stderr=options.stderr, tty=options.tty)
        req = MutationRequest(actor=req.actor, channel=req.channel, verb=req.verb, resource=req.resource,
                              namespace=ns, name=name, subresource=sub, app=ns, body={**req.body, "container": container})
        visible = {s: self._may_read_secret(ctx.actor, ns, s) for s in sorted(secrets)}

        def secret_visible(secret: str) -> bool:
            return visible.get(secret, False)

        try:
            negotiate(ctx.headers, ctx.method)
        except HandshakeError as e:
            self._record(req, decision, e.code)
            raise ApiError(e.code, e.reason, e.message) from None
        failure: Optional[ExecFailure] = None
        run: Optional[RunFn] = None
        command = list(options.command)
        try:  # the container as it is now; what it cannot do is said after the upgrade
            if sub == "exec":
                run = shell_runner(self.runtime.exec_view(ns, name, container, secret_visible, actor=ctx.actor),
                                   options)
            else:
                run, command = self.runtime.attach(ns, name, container, options, secret_visible)
        except ExecFailure as e:
            failure = e
        action = self._record_action(req, decision, 101)

        def session(stdin: InputStream, stdout: OutputStream, stderr: OutputStream) -> int:
            ctx.release()  # the streams are up: the session goes on without the think-time gate
            if failure is not None:
                raise failure
            assert run is not None
            return run(stdin, stdout, stderr)

        try:
            result = serve_exec(ctx.conn, ctx.headers, session, method=ctx.method, options=options)
        except OSError:
            raise Stream() from None
        recorder = getattr(self.admission, "record_exec", None)
        if recorder is not None:
            try:
                recorder(action, req, {
                    "pod": f"{ns}/{name}", "container": container, "command": command, "stdin": options.stdin,
                    "tty": options.tty, "protocol": result.protocol,
                    "exit_code": getattr(run, "exit_code", None) if sub == "attach" and run else result.exit_code,
                    "error": result.error, "stdin_bytes": result.stdin_bytes, "stdout_bytes": result.stdout_bytes,
                    "stderr_bytes": result.stderr_bytes})
            except Exception:  # pragma: no cover - recording must never break the API (a sealed run)
                log.exception("admission.record_exec failed")
        raise Stream()

    def _record_action(self, req: MutationRequest, decision: Decision, status: int) -> Optional[str]:
        try:
            return self.admission.record(req, decision, status)
        except Exception:  # pragma: no cover - recording must never break the API
            log.exception("admission.record failed")
            return None

    def _check(self, ns: str, name: str, sub: str, options: ExecOptions) -> tuple[str, set[str]]:
        """The registry's checks (pkg/registry/core/pod: streamLocation): the container's name and
        the Secrets it shows."""
        if sub == "exec" and not options.command:
            raise bad_request("you must specify at least 1 command")
        with self.store.lock:
            pod = self.store.get("Pod", ns, name)
            if pod is None:
                raise object_not_found(BY_KIND["Pod"], name)
            pod_spec = pod.get("spec") or {}
            specs = pod_spec.get("containers") or []
            names = [c.get("name") for c in specs]
            init = [c.get("name") for c in pod_spec.get("initContainers") or []]
            container = options.container
            if not container:
                if len(names) == 1:
                    container = names[0]
                elif not names:
                    raise bad_request(f"a container name must be specified for pod {name}")
                else:
                    msg = f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]"
                    if init:
                        msg += f" or one of the init containers: [{' '.join(init)}]"
                    raise bad_request(msg)
            elif container not in names and container not in init:
                raise bad_request(f"container {container} is not valid for pod {name}")
            if not pod_spec.get("nodeName"):
                raise bad_request(f"pod {name} does not have a host assigned")
            spec: dict[str, Any] = next((c for c in specs if c.get("name") == container), {})
            return str(container), _secret_names(spec, pod_spec)

    def _may_read_secret(self, actor: str, ns: str, secret: str) -> bool:
        """What the policy says of this actor reading the Secret (not recorded: a redaction)."""
        req = MutationRequest(actor=actor, channel="kube", verb="get", resource="secrets", namespace=ns, name=secret,
                              app=ns)
        try:
            return self.admission.decide(req).allowed
        except Exception:  # pragma: no cover - a failing policy shows nothing
            return False
