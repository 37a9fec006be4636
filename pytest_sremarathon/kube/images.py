"""Service images: the pipeline's build step on a real cluster.

Every artifact the build produces (same files, same digest as on the twin) becomes one image,
``registry.sremarathon.local/<app>/<service>:<first 12 hex of the digest>``, built with
``docker build`` from a generated context (:func:`build_context`: the ``Dockerfile`` next to
this module, the ``pytest_sremarathon`` package, the artifact directory) and made available to
the cluster with ``kind load docker-image`` (:class:`KindImages`) or ``docker push`` to a
registry the cluster pulls from (:class:`RegistryImages`). Datastores run the same runtime
with the built-in key-value store (the twin's ``DATASTORE_SOURCE``), so a run needs no image
but the base image (``python:3.11-slim``, or ``$SREMARATHON_BASE_IMAGE``: any Python 3.11
image with pip, for mirrors and air-gapped machines) and kind's node image.

The argv builders are pure functions; :func:`run` executes one with a clear error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

from ..errors import SremarathonError
from ..runtime.code import Artifact
from ..runtime.artifacts import is_datastore, short_digest, write_artifact

REGISTRY = "registry.sremarathon.local"
DEFAULT_BASE_IMAGE = "python:3.11-slim"
DOCKERFILE = Path(__file__).with_name("Dockerfile")
PACKAGE_DIR = Path(__file__).resolve().parent.parent
LABEL_DIGEST = "dev.sremarathon.digest"

Progress = Callable[[str], None]


class ImageError(SremarathonError):
    pass


def image_tag(artifact: Artifact, registry: str = REGISTRY) -> str:
    """``registry.sremarathon.local/shop/cart:0123456789ab`` — never ``:latest``."""
    return f"{registry.rstrip('/')}/{artifact.app}/{artifact.service}:{short_digest(artifact.digest)}"


def dockerfile() -> str:
    return DOCKERFILE.read_text()


def build_context(artifact: Artifact, dest: Path, *, datastore_image: Optional[str] = None) -> Path:
    """Write the ``docker build`` context for ``artifact`` into ``dest`` (emptied first)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    (dest / "Dockerfile").write_text(dockerfile())
    shutil.copytree(PACKAGE_DIR, dest / "pytest_sremarathon",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", "*.egg-info"))
    if is_datastore(artifact) and datastore_image is None:
        raise ImageError(f"{artifact.app}/{artifact.service}: a datastore artifact needs the stock image it stands for")
    write_artifact(artifact, dest / "artifact", datastore_image=datastore_image if is_datastore(artifact) else None)
    return dest


def base_image() -> str:
    return os.environ.get("SREMARATHON_BASE_IMAGE") or DEFAULT_BASE_IMAGE


def docker_unavailable() -> Optional[str]:
    """Why images cannot be built here (None when a Docker daemon answers)."""
    if shutil.which("docker") is None:
        return "the `docker` CLI is not installed"
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                              timeout=20, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 20s (is the Docker daemon running?)"
    if proc.returncode != 0 or not proc.stdout.strip():
        why = (proc.stderr or proc.stdout).strip().splitlines()
        return f"the Docker daemon is not reachable (`docker info`: {why[-1] if why else 'failed'})"
    return None


def build_argv(artifact: Artifact, tag: str, context: Path) -> list[str]:
    return ["docker", "build", "--tag", tag, "--build-arg", f"BASE_IMAGE={base_image()}",
            "--build-arg", f"APP={artifact.app}", "--build-arg", f"SERVICE={artifact.service}",
            "--build-arg", f"DIGEST={artifact.digest}",
            "--label", f"{LABEL_DIGEST}={artifact.digest}", str(context)]


def inspect_argv(tag: str) -> list[str]:
    return ["docker", "image", "inspect", "--format", "{{.Id}}", tag]


def kind_load_argv(tag: str, cluster: str, nodes: Sequence[str] = ()) -> list[str]:
    argv = ["kind", "load", "docker-image", tag, "--name", cluster]
    if nodes:
        argv += ["--nodes", ",".join(nodes)]
    return argv


def push_argv(tag: str) -> list[str]:
    return ["docker", "push", tag]


def run(argv: list[str], *, timeout: float = 600, what: str = "", check: bool = True,
        progress: Optional[Progress] = None) -> subprocess.CompletedProcess:
    """Run one command; an :class:`ImageError` naming it (with the end of its output) if it fails."""
    if shutil.which(argv[0]) is None:
        raise ImageError(f"{argv[0]} is not installed (needed to {what or 'run ' + ' '.join(argv[:3])})")
    if progress:
        progress(f"$ {' '.join(argv)}")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ImageError(f"{' '.join(argv[:4])} did not finish within {timeout:g}s") from None
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-12:])
        raise ImageError(f"{' '.join(argv[:4])} failed ({proc.returncode}){': ' + what if what else ''}:\n{tail}")
    return proc


class ImagePublisher(Protocol):
    """Makes an artifact's image available to the cluster; returns the image reference."""

    def publish(self, artifact: Artifact, *, datastore_image: Optional[str] = None) -> str: ...


class _DockerImages:
    def __init__(self, workdir: Path, *, registry: str = REGISTRY, progress: Optional[Progress] = None) -> None:
        self.workdir = Path(workdir)
        self.registry = registry
        self.progress = progress
        self.published: dict[str, str] = {}  # digest -> tag

    def _say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)

    def build(self, artifact: Artifact, *, datastore_image: Optional[str] = None) -> str:
        tag = image_tag(artifact, self.registry)
        if run(inspect_argv(tag), check=False).returncode == 0:
            return tag
        self._say(f"image: building {tag}")
        context = build_context(artifact, self.workdir / "contexts" / f"{artifact.app}-{artifact.service}-"
                                                                      f"{short_digest(artifact.digest)}",
                                datastore_image=datastore_image)
        run(build_argv(artifact, tag, context), what=f"build the image of {artifact.app}/{artifact.service}")
        return tag

    def publish(self, artifact: Artifact, *, datastore_image: Optional[str] = None) -> str:
        tag = self.published.get(artifact.digest)
        if tag is None:
            tag = self.build(artifact, datastore_image=datastore_image)
            self._deliver(tag)
            self.published[artifact.digest] = tag
        return tag

    def _deliver(self, tag: str) -> None:
        raise NotImplementedError


class KindImages(_DockerImages):
    """``docker build`` + ``kind load docker-image`` into one kind cluster."""

    def __init__(self, cluster: str, workdir: Path, *, registry: str = REGISTRY,
                 progress: Optional[Progress] = None) -> None:
        super().__init__(workdir, registry=registry, progress=progress)
        self.cluster = cluster

    def _deliver(self, tag: str) -> None:
        self._say(f"image: loading {tag} into kind cluster {self.cluster}")
        run(kind_load_argv(tag, self.cluster), what=f"load {tag} into the kind cluster")


class RegistryImages(_DockerImages):
    """``docker build`` + ``docker push`` to a registry the cluster pulls from
    (``--marathon-backend kubeconfig:PATH`` with ``SREMARATHON_IMAGE_REGISTRY=host:port/prefix``)."""

    def _deliver(self, tag: str) -> None:
        self._say(f"image: pushing {tag}")
        run(push_argv(tag), what=f"push {tag} (is `docker login` done for {self.registry}?)")


def main(argv: Optional[list[str]] = None) -> int:
    """Write a build context for one service of an app (for building and inspecting by hand)."""
    import argparse

    from ..apps import load_app
    from ..builtin import APPS_DIR
    from ..runtime.artifacts import package
    from ..runtime.artifacts import datastore

    p = argparse.ArgumentParser(prog="python -m pytest_sremarathon.kube.images")
    p.add_argument("--apps-dir", type=Path, default=APPS_DIR, help="one <app>/ per application (default: the built-in ones)")
    p.add_argument("--app", required=True)
    p.add_argument("--service", required=True)
    p.add_argument("--context", type=Path, required=True, help="directory to write the build context to")
    args = p.parse_args(argv)
    app = load_app(args.apps_dir / args.app)
    spec = app.services[args.service]
    if spec.datastore:
        artifact, image = datastore(app.namespace, args.service, spec.datastore), spec.datastore
    else:
        root = args.apps_dir / args.app
        files = {str(f.relative_to(root)): f.read_text() for f in sorted((root / "services").glob("*.py"))}
        artifact, image = package(app, files)[args.service], None
    build_context(artifact, args.context, datastore_image=image)
    tag = image_tag(artifact)
    print(" ".join(build_argv(artifact, tag, args.context)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
