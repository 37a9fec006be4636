"""A whole application as runtime processes on loopback: the pipeline's deploy target without
Kubernetes.

:class:`LocalCluster` offers the two things :class:`~pytest_sremarathon.pipeline.service.Pipelines`
needs from a cluster — ``artifacts`` (where the build puts artifacts) and ``apply(obj)`` (where
the deploy sends rendered objects) — and turns them into processes, as a kubelet would:

* a ``ConfigMap`` or ``Secret`` is remembered (containers read them as environment);
* a ``Deployment`` (or a datastore's ``StatefulSet``) becomes one ``python -m pytest_sremarathon.runtime`` process (replicas > 0),
  restarted when its image or environment changes. An artifact image runs that artifact; any
  other image (``redis:7.2-alpine`` …) runs the built-in datastore;
* every service of every app gets a fixed loopback port up front, and every process gets the
  address map (``SREMARATHON_SERVICE_ADDRS``), so ``ctx.call("cart", …)`` reaches the cart
  process and a name that is not a service fails like a missing DNS name.

Process output (the container log) goes to ``<workdir>/logs/<namespace>/<service>.log``.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..apps import AppSpec
from .artifacts import short_digest, write_artifact
from .code import ArtifactStore

LOOPBACK = "127.0.0.1"


class LocalClusterError(Exception):
    pass


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class LocalProcess:
    namespace: str
    service: str
    port: int
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    proc: Optional[subprocess.Popen] = None
    key: tuple = ()
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class LocalCluster:
    apps: list[AppSpec]
    workdir: Path
    python: str = sys.executable
    artifacts: ArtifactStore = field(default_factory=ArtifactStore)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.ports: dict[tuple[str, str], int] = {}
        for app in self.apps:
            for svc in app.services:
                self.ports[(app.namespace, svc)] = free_port()
        self._apps = {a.namespace: a for a in self.apps}
        self._configmaps: dict[tuple[str, str], dict[str, str]] = {}
        self._secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.processes: dict[tuple[str, str], LocalProcess] = {}

    # -- the pipeline's deploy target ------------------------------------------------------
    def apply(self, obj: dict[str, Any]) -> None:
        kind, md = obj.get("kind"), obj.get("metadata") or {}
        key = (md.get("namespace") or "default", md.get("name", ""))
        if kind == "ConfigMap":
            self._configmaps[key] = {k: str(v) for k, v in (obj.get("data") or {}).items()}
        elif kind == "Secret":
            data = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
            data.update({k: str(v) for k, v in (obj.get("stringData") or {}).items()})
            self._secrets[key] = data
        elif kind in ("Deployment", "StatefulSet"):  # a datastore's set: one process like any workload
            self._deploy(key[0], key[1], obj)

    def addrs(self, namespace: str) -> dict[str, str]:
        return {svc: f"{LOOPBACK}:{port}" for (ns, svc), port in sorted(self.ports.items()) if ns == namespace}

    def url(self, namespace: str, service: str) -> str:
        return f"http://{LOOPBACK}:{self.ports[(namespace, service)]}"

    def log(self, namespace: str, service: str) -> str:
        path = self.workdir / "logs" / namespace / f"{service}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- processes ---------------------------------------------------------------------------
    def _env_of(self, ns: str, container: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for source in container.get("envFrom") or []:
            if "configMapRef" in source:
                env.update(self._configmaps.get((ns, source["configMapRef"]["name"]), {}))
            if "secretRef" in source:
                env.update(self._secrets.get((ns, source["secretRef"]["name"]), {}))
        for e in container.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
                continue
            ref = (e.get("valueFrom") or {})
            if "configMapKeyRef" in ref:
                value = self._configmaps.get((ns, ref["configMapKeyRef"]["name"]), {}).get(ref["configMapKeyRef"]["key"])
            elif "secretKeyRef" in ref:
                value = self._secrets.get((ns, ref["secretKeyRef"]["name"]), {}).get(ref["secretKeyRef"]["key"])
            else:
                value = None
            if value is not None:
                env[e["name"]] = value
        return env

    def _deploy(self, ns: str, name: str, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers or (ns, name) not in self.ports:
            return
        container = containers[0]
        replicas = spec.get("replicas", 1)
        image = container.get("image", "")
        artifact = self.artifacts.by_image(image) if "@" in image else None
        port = self.ports[(ns, name)]
        argv = [self.python, "-m", "pytest_sremarathon.runtime", "--app", ns, "--service", name,
                "--namespace", ns, "--bind", LOOPBACK, "--port", str(port)]
        if artifact is not None:
            artifact_dir = self.workdir / "artifacts" / ns / f"{name}-{short_digest(artifact.digest)}"
            if not (artifact_dir / "artifact.json").exists():
                write_artifact(artifact, artifact_dir)
            argv += ["--artifact", str(artifact_dir)]
        else:
            argv += ["--datastore", image or "datastore"]
        app = self._apps.get(ns)
        externals = {n: {"host": e.host, "latency_ms": e.latency_ms} for n, e in app.externals.items()} if app else {}
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(self.workdir),
            "SREMARATHON_SERVICE_ADDRS": json.dumps(self.addrs(ns)),
            "SREMARATHON_EXTERNALS": json.dumps(externals),
            "POD_NAME": f"{name}-local-0", "POD_NAMESPACE": ns, "NODE_NAME": "localhost",
            **self._env_of(ns, container),
        }
        key = (argv, sorted(env.items()), replicas)
        current = self.processes.get((ns, name))
        if current is not None and current.key == key and (current.running() or replicas == 0):
            return
        if current is not None:
            self._stop(current)
        if replicas == 0:
            return
        log_path = self.workdir / "logs" / ns / f"{name}.log"
        lp = LocalProcess(ns, name, port, argv, env, log_path, key=key,
                          starts=current.starts if current else 0)
        self._start(lp)
        self.processes[(ns, name)] = lp

    def _start(self, lp: LocalProcess) -> None:
        lp.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lp.log_path, "ab") as out:
            lp.proc = subprocess.Popen(lp.argv, env=lp.env, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, cwd=str(self.workdir), start_new_session=True)
        lp.starts += 1

    @staticmethod
    def _stop(lp: LocalProcess, timeout: float = 5.0) -> None:
        if lp.proc is None or lp.proc.poll() is not None:
            return
        lp.proc.send_signal(signal.SIGTERM)
        try:
            lp.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            lp.proc.kill()
            lp.proc.wait(timeout)

    def wait_ready(self, timeout: float = 30.0, *, path: str = "/readyz") -> None:
        """Until every process answers ``path`` with 200 (raises with the logs otherwise)."""
        deadline = time.monotonic() + timeout
        pending = dict(self.processes)
        while pending:
            for key, lp in list(pending.items()):
                if lp.proc is not None and lp.proc.poll() is not None:
                    raise LocalClusterError(f"{key[0]}/{key[1]} exited with {lp.proc.returncode}:\n"
                                            f"{self.log(*key)[-4000:]}")
                if _get(lp.port, path) == 200:
                    del pending[key]
            if not pending:
                return
            if time.monotonic() > deadline:
                names = ", ".join(f"{ns}/{svc}" for ns, svc in sorted(pending))
                raise LocalClusterError(f"not ready after {timeout:g}s: {names}")
            time.sleep(0.1)

    def close(self) -> None:
        for lp in self.processes.values():
            if lp.proc is not None and lp.proc.poll() is None:
                lp.proc.send_signal(signal.SIGTERM)
        for lp in self.processes.values():
            self._stop(lp)
        self.processes.clear()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _get(port: int, path: str, timeout: float = 2.0) -> int:
    conn = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return 0
    finally:
        conn.close()
