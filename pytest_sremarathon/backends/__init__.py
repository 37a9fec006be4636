"""Cluster backends: what a marathon runs on, behind one contract.

=================  ==========================================================================
``twin``           the embedded two-zone twin behind its loopback API server (the default)
``kube``           a real cluster (``kind``, or ``kubeconfig:PATH``) behind the policy proxy
``agent_api``      the ``/sremarathon/v1/`` pipeline and telemetry endpoints both mount
=================  ==========================================================================

These modules are the composition roots: they wire a cluster (:mod:`..twin` or :mod:`..kube`,
which know nothing of each other), the pipelines, the agent's endpoints and the server into an
object that satisfies :class:`Backend`. The marathon, the fault kinds (through
:class:`~pytest_sremarathon.cluster.Cluster`) and ``sremarathon twin up`` use nothing else.

Backends are found by name (:func:`resolve_backend`): the built-in ones plus those a plugin
returns from the ``pytest_sremarathon_backends`` hook. Importing this package is cheap; a
backend's modules load when it is built.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

if TYPE_CHECKING:
    from ..clock import VirtualClock
    from ..cluster import Cluster
    from ..k8s.store import Store
    from ..pipeline.service import Pipelines
    from ..scenario import Scenario
    from ..serving.http import Admission
    from ..serving.loopback import LoopbackServer


class Backend(Protocol):
    """A running cluster with the scenario's apps deployed through their pipelines, and the
    server the agent talks to. Built as ``factory(scenario, clock, emit=, admission=,
    private_dir=, tokens=, **options)``."""

    name: str

    @property
    def store(self) -> Store: ...  # every object of the cluster (on kube: a mirror, relisted each tick)
    @property
    def cluster(self) -> Cluster: ...
    @property
    def pipelines(self) -> Pipelines: ...
    @property
    def server(self) -> LoopbackServer: ...  # the agent's Kubernetes API and /sremarathon/v1/, on loopback

    def tick(self, dt: float, rng: random.Random) -> None:
        """Advance the cluster by ``dt`` virtual seconds (the clock is already set)."""

    def close(self) -> None:
        """Stop serving and release what the backend created (idempotent)."""


BackendFactory = Callable[..., Backend]


def twin_backend(scenario: Scenario, clock: VirtualClock, *, emit: Callable[[str, Any], None],
                 admission: Admission, private_dir: Path, tokens: dict[str, str], seed: int = 0) -> Backend:
    """``twin`` (the default): the embedded cluster (``seed``: the run's, for the monitoring
    services' own random streams)."""
    from .twin import TwinBackend

    return TwinBackend(scenario, clock, emit=emit, admission=admission, private_dir=private_dir, tokens=tokens,
                       seed=seed)


def kind_backend(*args: Any, **kw: Any) -> Backend:
    """``kind``: a kind cluster created for the run."""
    from .kube import KubeBackend

    return KubeBackend(*args, **kw)


def kubeconfig_backend(*args: Any, target: str, **kw: Any) -> Backend:
    """``kubeconfig:PATH``: an existing cluster."""
    from .kube import KubeBackend

    return KubeBackend(*args, kubeconfig=Path(target), **kw)


#: Built-in factories by name; a name ending in ``:`` takes an argument (``kubeconfig:PATH``).
BUILTIN: dict[str, BackendFactory] = {"twin": twin_backend, "kind": kind_backend, "kubeconfig:": kubeconfig_backend}


def backend_factories(hook: Any = None) -> dict[str, BackendFactory]:
    """Backends by name: the built-in ones plus those from ``pytest_sremarathon_backends`` hooks."""
    factories = dict(BUILTIN)
    for extra in (hook.pytest_sremarathon_backends() if hook else []):
        factories.update(extra or {})
    return factories


def resolve_backend(name: str, hook: Any = None, **options: Any) -> Optional[BackendFactory]:
    """The factory for ``name`` (None if unknown): an exact name, or ``prefix:ARG`` for a
    factory registered as ``prefix:`` (called with ``target=ARG``); the ``options`` it accepts
    (``keep_cluster``) are bound."""
    factories = backend_factories(hook)
    factory, bound = (None if name.endswith(":") else factories.get(name)), {}
    if factory is None:
        prefix, sep, arg = name.partition(":")
        factory = factories.get(prefix + ":") if sep and arg else None
        bound["target"] = arg
    if factory is None:
        return None
    try:
        params = inspect.signature(factory).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        bound.update({k: v for k, v in options.items() if takes_any or k in params})
    except (TypeError, ValueError):
        pass
    return functools.partial(factory, **bound) if bound else factory
