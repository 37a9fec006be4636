"""kind provisioning: a two-zone cluster on Docker.

:func:`cluster_config` writes the kind config the marathon needs: one control plane and
``nodes_per_zone`` workers per zone, each worker labelled ``topology.kubernetes.io/zone``
(kind ≥ 0.11 applies ``nodes[].labels``; a ``node-role.kubernetes.io/*`` label there makes
creation fail, so there is none). The API server listens on 127.0.0.1 only.

:class:`KindCluster` creates and deletes the cluster with the ``kind`` CLI, keeps its
kubeconfig out of the user's ``~/.kube/config``, and waits — printing progress — until every
node is Ready and carries its zone. :func:`unavailable` says why kind cannot run here (no
``kind``, no Docker, Docker not answering), for a clear error or a clean test skip.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from ..cluster import Topology
from ..errors import SremarathonError
from .api import KubeApi
from .images import docker_unavailable

ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_NAME = "sremarathon"
KIND_API = "kind.x-k8s.io/v1alpha4"

Progress = Callable[[str], None]


class KindError(SremarathonError):
    pass


def worker_names(zones: Sequence[str], nodes_per_zone: int) -> list[tuple[str, str]]:
    """(node name, zone) of the workers: the twin's names (``worker-a1`` …), so that a fault's
    ``node:<name>`` means the same machine on both backends."""
    return Topology(tuple(zones), nodes_per_zone).node_names()


def cluster_config(name: str = DEFAULT_NAME, zones: Sequence[str] = ("zone-a", "zone-b"), nodes_per_zone: int = 2,
                   node_image: Optional[str] = None, *, twin_names: bool = True) -> dict[str, Any]:
    """The kind ``Cluster`` config: a control plane, then the workers zone by zone. With
    ``twin_names`` each worker registers under the twin's node name (a kubeadm
    ``JoinConfiguration`` patch); its container keeps kind's name (``<name>-worker<N>``) and
    the node's ``spec.providerID`` (``kind://docker/<cluster>/<container>``) links the two."""
    if not zones:
        raise ValueError("a cluster needs at least one zone")
    if nodes_per_zone < 1:
        raise ValueError("nodes_per_zone must be at least 1")
    nodes: list[dict[str, Any]] = [{"role": "control-plane"}]
    for node_name, zone in worker_names(zones, nodes_per_zone):
        node: dict[str, Any] = {"role": "worker", "labels": {ZONE_LABEL: zone}}
        if twin_names:
            node["kubeadmConfigPatches"] = [
                f"kind: JoinConfiguration\nnodeRegistration:\n  name: {node_name}\n"]
        nodes.append(node)
    if node_image:
        for n in nodes:
            n["image"] = node_image
    return {"kind": "Cluster", "apiVersion": KIND_API, "name": name,
            "networking": {"apiServerAddress": "127.0.0.1"}, "nodes": nodes}


def config_yaml(config: dict[str, Any]) -> str:
    return "# kind cluster for pytest-sremarathon (generated)\n" + yaml.safe_dump(config, sort_keys=False)


def node_containers(config: dict[str, Any]) -> list[tuple[str, str, Optional[str]]]:
    """(container name, role, zone) of every node, as kind names the containers:
    ``<name>-control-plane``, ``<name>-worker``, ``<name>-worker2``, …"""
    name = config["name"]
    out: list[tuple[str, str, Optional[str]]] = []
    cp = workers = 0
    for n in config["nodes"]:
        if n["role"] == "control-plane":
            cp += 1
            out.append((f"{name}-control-plane" + (str(cp) if cp > 1 else ""), "control-plane", None))
        else:
            workers += 1
            out.append((f"{name}-worker" + (str(workers) if workers > 1 else ""), "worker",
                        (n.get("labels") or {}).get(ZONE_LABEL)))
    return out


def create_argv(name: str, config_path: Path, kubeconfig: Path, *, wait: str = "0s") -> list[str]:
    return ["kind", "create", "cluster", "--name", name, "--config", str(config_path),
            "--kubeconfig", str(kubeconfig), "--wait", wait]


def delete_argv(name: str, kubeconfig: Optional[Path] = None) -> list[str]:
    argv = ["kind", "delete", "cluster", "--name", name]
    return argv + (["--kubeconfig", str(kubeconfig)] if kubeconfig else [])


def get_clusters_argv() -> list[str]:
    return ["kind", "get", "clusters"]


def get_kubeconfig_argv(name: str) -> list[str]:
    return ["kind", "get", "kubeconfig", "--name", name]


def unavailable() -> Optional[str]:
    """Why a kind cluster cannot be created here (None when it can)."""
    if shutil.which("kind") is None:
        return "the `kind` CLI is not installed (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
    return docker_unavailable()


def _run(argv: list[str], *, timeout: float, what: str) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise KindError(f"{argv[0]} is not installed (needed to {what})") from None
    except subprocess.TimeoutExpired:
        raise KindError(f"{' '.join(argv[:3])} did not finish within {timeout:g}s ({what})") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise KindError(f"{' '.join(argv[:3])} failed ({proc.returncode}) trying to {what}:\n{tail}")
    return proc


@dataclass
class KindCluster:
    """One kind cluster and its private kubeconfig under ``workdir``."""

    name: str
    workdir: Path
    zones: tuple[str, ...] = ("zone-a", "zone-b")
    nodes_per_zone: int = 2
    node_image: Optional[str] = None
    progress: Progress = field(default=lambda msg: print(msg, flush=True))
    created: bool = False  # by us (an existing cluster is reused and never deleted)
    twin_names: bool = True  # workers register as worker-a1 … (see cluster_config)

    @property
    def config(self) -> dict[str, Any]:
        return cluster_config(self.name, self.zones, self.nodes_per_zone, self.node_image, twin_names=self.twin_names)

    @property
    def kubeconfig(self) -> Path:
        return Path(self.workdir) / f"kind-{self.name}.kubeconfig"

    def exists(self) -> bool:
        out = _run(get_clusters_argv(), timeout=60, what="list kind clusters").stdout
        return self.name in out.split()

    def create(self, timeout: float = 900) -> Path:
        """Create the cluster (or reuse one of that name); returns its kubeconfig."""
        Path(self.workdir).mkdir(parents=True, exist_ok=True)
        if self.exists():
            self.progress(f"kind: reusing existing cluster {self.name}")
            self.kubeconfig.write_text(_run(get_kubeconfig_argv(self.name), timeout=60,
                                            what="read the cluster's kubeconfig").stdout)
            return self.kubeconfig
        path = Path(self.workdir) / f"kind-{self.name}.yaml"
        path.write_text(config_yaml(self.config))
        self.progress(f"kind: creating cluster {self.name}: 1 control plane, {self.nodes_per_zone} worker(s) in "
                      f"each of {', '.join(self.zones)} (a few minutes on first use: the node image is pulled)")
        t0 = time.monotonic()
        _run(create_argv(self.name, path, self.kubeconfig), timeout=timeout, what=f"create kind cluster {self.name}")
        self.created = True
        self.progress(f"kind: cluster {self.name} created in {time.monotonic() - t0:.0f}s")
        return self.kubeconfig

    def delete(self) -> None:
        self.progress(f"kind: deleting cluster {self.name}")
        _run(delete_argv(self.name, self.kubeconfig if self.kubeconfig.exists() else None), timeout=300,
             what=f"delete kind cluster {self.name}")

    def wait_nodes(self, api: KubeApi, timeout: float = 300, every: float = 5.0) -> list[dict[str, Any]]:
        """Until every node is Ready and every worker carries its zone label."""
        want = 1 + len(self.zones) * self.nodes_per_zone  # an existing cluster may have more
        deadline = time.monotonic() + timeout
        t0 = time.monotonic()
        last = ""
        while True:
            try:
                nodes = api.get("/api/v1/nodes").get("items", [])
            except Exception as exc:  # noqa: BLE001 - the API server may still be starting
                nodes, err = [], str(exc)
            else:
                err = ""
            ready = [n for n in nodes if _ready(n)]
            zoned = [n for n in nodes if (n["metadata"].get("labels") or {}).get(ZONE_LABEL) in self.zones]
            line = f"kind: {len(ready)}/{want} nodes Ready, {len(zoned)}/{want - 1} workers zoned" + \
                   (f" ({err})" if err else "")
            if line != last:
                self.progress(f"{line} after {time.monotonic() - t0:.0f}s")
                last = line
            if len(ready) >= want and len(zoned) >= want - 1:
                return nodes
            if time.monotonic() > deadline:
                raise KindError(f"cluster {self.name}: {line} after {timeout:g}s")
            time.sleep(every)


def _ready(node: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])
