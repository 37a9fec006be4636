"""The real backend: the marathon on a Kubernetes cluster (kind, or any kubeconfig).

=================  ==========================================================================
``kind``           provisioning a two-zone kind cluster (config, create, wait, delete)
``api``            a small API client from a kubeconfig (TLS, token or client certificate)
``images``         the build step's images: Dockerfile, build context, ``docker build``, ``kind load``
``manifests``      the pipeline's manifests adapted to a real cluster (image tags, pull policy, env)
``cluster``        the real-cluster adapter: the twin cluster's interface over a real one
``scrape``         Prometheus text → the twin's per-service metrics
``traffic``        user traffic as real HTTP requests
``node_faults``    node, zone and network faults on kind's node containers (docker, iptables, tc)
``proxy``          the policy layer: a recording, enforcing reverse proxy for the agent
``backend``        ``KubeBackend``: all of the above behind the marathon's backend interface
=================  ==========================================================================

Importing this package is cheap; the backends load their modules when first used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def kind_backend(*args: Any, **kw: Any) -> Any:
    """``--marathon-backend kind``: a kind cluster created for the run."""
    from .backend import KubeBackend

    return KubeBackend(*args, **kw)


def kubeconfig_backend(*args: Any, target: str, **kw: Any) -> Any:
    """``--marathon-backend kubeconfig:PATH``: an existing cluster."""
    from .backend import KubeBackend

    return KubeBackend(*args, kubeconfig=Path(target), **kw)


#: Backend factories by name; a name ending in ``:`` takes an argument (``kubeconfig:PATH``).
BACKENDS = {"kind": kind_backend, "kubeconfig:": kubeconfig_backend}
