"""The real ``kubectl`` against one kubeconfig (the twin's, the policy proxy's or a kind
cluster's), with a discovery cache of its own.

The kubectl is the one on ``PATH``. Older client versions (``kubectl.1.27``, …, as the Google
Cloud SDK ships them) are looked for in ``$SREMARATHON_KUBECTL_DIR`` when it is set, else
beside the real file of that kubectl (``/usr/bin/kubectl`` may be a link into the SDK). A test
whose kubectl is not there is skipped, saying what was looked for.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

#: A directory with ``kubectl.<major>.<minor>`` client binaries, if not beside ``kubectl``.
KUBECTL_DIR_ENV = "SREMARATHON_KUBECTL_DIR"


def versions_dir() -> Optional[str]:
    """Where the versioned kubectls are looked for (None: nowhere to look)."""
    if os.environ.get(KUBECTL_DIR_ENV):
        return os.environ[KUBECTL_DIR_ENV]
    found = shutil.which("kubectl")
    return os.path.dirname(os.path.realpath(found)) if found else None


def find_kubectl(version: str = "") -> Optional[str]:
    """The kubectl on PATH or, with ``version`` ("1.27"), that client version's binary."""
    if not version:
        return shutil.which("kubectl")
    directory = versions_dir()
    if directory is None:
        return None
    path = os.path.join(directory, f"kubectl.{version}")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def require_kubectl(version: str = "") -> str:
    """:func:`find_kubectl`, or skip the test saying what is missing and where it looked."""
    binary = find_kubectl(version)
    if binary is not None:
        return binary
    if not version:
        pytest.skip("kubectl is not installed (not on PATH)")
    where = versions_dir()
    pytest.skip(f"kubectl {version} is not installed: no executable kubectl.{version} "
                + (f"in {where}" if where else "(no kubectl on PATH to look beside)")
                + f" (set {KUBECTL_DIR_ENV} to the directory that has it)")


@dataclass
class Kubectl:
    """One kubectl binary, one kubeconfig, its own cache (and HOME): nothing of the machine's
    Kubernetes configuration (``KUBE*`` variables, ``~/.kube``) reaches it."""

    binary: str
    kubeconfig: Path
    cache_dir: Path

    def argv(self, *args: str) -> list[str]:
        """The command line of ``kubectl ARGS`` against this kubeconfig and cache."""
        return [self.binary, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir), *args]

    def environ(self, extra: Optional[Mapping[str, str]] = None) -> dict[str, str]:
        """Its environment: this one without ``KUBE*``, ``HOME`` its cache; ``extra`` on top."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        environ["HOME"] = str(self.cache_dir)
        environ.update(extra or {})
        return environ

    def run(self, *args: str, input: Optional[str] = None, check: bool = True,
            env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
        """``kubectl ARGS`` with ``input`` on its stdin (nothing by default: never the test
        process's own); with ``check``, a non-zero exit fails the test with its output. ``env``
        adds variables (``KUBE_EDITOR`` for ``kubectl edit``)."""
        proc = subprocess.run(self.argv("--request-timeout", "20s", *args), input="" if input is None else input,
                              capture_output=True, text=True, timeout=60, env=self.environ(env))
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n"
                                 f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def start(self, *args: str) -> subprocess.Popen:
        """``kubectl ARGS`` left running (a watch), its output read as it comes; the caller ends it."""
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.environ())

    def __call__(self, *args: str, input: Optional[str] = None) -> str:
        return self.run(*args, input=input).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))


def kubectl_for(kubeconfig: Path, cache_dir: Path, version: str = "") -> Kubectl:
    """A :class:`Kubectl` for ``kubeconfig`` (the test is skipped when that kubectl is absent)."""
    return Kubectl(require_kubectl(version), kubeconfig, cache_dir)
