"""A test-only API server on 127.0.0.1 that answers just enough for ``kubectl exec`` and the
Python client: discovery, ``GET`` of the pods it knows, and ``…/pods/<p>/exec`` through
``pytest_sremarathon.exec``. One thread per connection; every request is recorded."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pytest_sremarathon.exec import ContainerView, ExecResult, HandshakeError, error_response, exec_in_container

_RESOURCES = {
    "kind": "APIResourceList", "groupVersion": "v1",
    "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "shortNames": ["po"],
         "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"], "categories": ["all"]},
        {"name": "pods/exec", "singularName": "", "namespaced": True, "kind": "PodExecOptions",
         "verbs": ["create", "get"]},
        {"name": "pods/attach", "singularName": "", "namespaced": True, "kind": "PodAttachOptions",
         "verbs": ["create", "get"]},
    ],
}


def pod_json(name: str, namespace: str, containers: list[str]) -> dict[str, Any]:
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": "1",
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": c, "image": "busybox:1.36"} for c in containers], "nodeName": "node-a"},
        "status": {"phase": "Running", "podIP": "10.244.0.7",
                   "conditions": [{"type": t, "status": "True"} for t in
                                  ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
                   "containerStatuses": [{"name": c, "ready": True, "restartCount": 0, "image": "busybox:1.36",
                                          "imageID": "", "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}
                                         for c in containers]},
    }


@dataclass
class Pod:
    view: ContainerView
    containers: list[str] = field(default_factory=lambda: ["app"])


class ExecTestServer:
    def __init__(self, pods: dict[tuple[str, str], Pod]) -> None:
        self.pods = pods
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.results: list[ExecResult] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def write_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for this server (plain HTTP, no credentials, namespace ``default``)."""
        path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: t, cluster: {{server: "{self.url}"}}}}]
users: [{{name: u, user: {{}}}}]
contexts: [{{name: t, context: {{cluster: t, user: u, namespace: default}}}}]
current-context: t
""")
        return path

    def last_result(self, timeout: float = 10.0) -> ExecResult:
        """The newest exec's result, once its session has ended on the server side."""
        deadline = time.monotonic() + timeout
        while not self.results and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.results[-1]

    def close(self) -> None:
        self._stop.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        rfile = conn.makefile("rb", buffering=65536)
        try:
            while True:
                line = rfile.readline(65537)
                if not line:
                    return
                method, target, _ = line.decode("latin-1").split()
                headers: dict[str, str] = {}
                while True:
                    h = rfile.readline(65537)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length") or 0)
                if n:
                    rfile.read(n)
                self.requests.append((method, target, headers))
                if not self._respond(conn, rfile, method, target, headers):
                    return
        except (OSError, ValueError):
            pass
        finally:
            try:
                rfile.close()
                conn.close()
            except OSError:
                pass

    def _send(self, conn: socket.socket, code: int, body: Any) -> bool:
        data = json.dumps(body).encode()
        reason = {200: "OK", 404: "Not Found"}.get(code, "Error")
        conn.sendall(f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        return True

    def _respond(self, conn: socket.socket, rfile: Any, method: str, target: str, headers: dict[str, str]) -> bool:
        path, _, query = target.partition("?")
        path = unquote(path).rstrip("/") or "/"
        if path == "/version":
            return self._send(conn, 200, {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "platform": "linux/amd64"})
        if path == "/api":
            return self._send(conn, 200, {"kind": "APIVersions", "versions": ["v1"],
                                          "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                                          "serverAddress": "127.0.0.1"}]})
        if path == "/apis":
            return self._send(conn, 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": []})
        if path == "/api/v1":
            return self._send(conn, 200, _RESOURCES)
        parts = path.strip("/").split("/")
        if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            # a list, filtered by metadata.name as kr8s's Pod.get asks
            names = set(re.findall(r"metadata\.name=([^,&]+)", unquote(query)))
            items = [pod_json(n, ns, pod.containers) for (ns, n), pod in sorted(self.pods.items())
                     if ns == parts[3] and (not names or n in names)]
            return self._send(conn, 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                          "items": items})
        if len(parts) >= 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "pods":
            ns, name = parts[3], parts[5]
            pod = self.pods.get((ns, name))
            if pod is None:
                return self._send(conn, 404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                              "message": f'pods "{name}" not found', "reason": "NotFound",
                                              "details": {"name": name, "kind": "pods"}, "code": 404})
            if len(parts) == 6 and method == "GET":
                return self._send(conn, 200, pod_json(name, ns, pod.containers))
            if len(parts) == 7 and parts[6] == "exec":
                try:
                    result = exec_in_container(conn, headers, query, pod.view, reader=rfile, method=method)
                except HandshakeError as e:
                    conn.sendall(error_response(e))
                    return False
                self.results.append(result)
                return False
        return self._send(conn, 404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                      "message": "the server could not find the requested resource",
                                      "reason": "NotFound", "code": 404})
