"""Twins the tests run applications on, without a marathon around them.

- :class:`AppTwin`: apps deployed through their real pipelines onto a two-zone
  ``TwinCluster``, advanced tick by tick (what ``Marathon.start()`` builds, minus the agent,
  the alerts and the recorder). Test files extend it with what they look at and do.
- :class:`BackendTwin`: the whole twin backend (store, cluster, pipelines, API server) on a
  scenario, as ``sremarathon twin up`` serves it, advanced in virtual seconds.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from pytest_sremarathon.apps import AppSpec
from pytest_sremarathon.backends.twin import TwinBackend
from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.clock import EPOCH, VirtualClock
from pytest_sremarathon.cluster import Topology
from pytest_sremarathon.k8s.objects import pod_is_active
from pytest_sremarathon.k8s.store import Store
from pytest_sremarathon.pipeline.service import Pipelines
from pytest_sremarathon.runtime.code import ArtifactStore
from pytest_sremarathon.scenario import Scenario, load_scenario
from pytest_sremarathon.twin.cluster import TwinCluster

DEFAULT_SCENARIO = SCENARIOS_DIR / "default.yaml"
TICK = 30  # virtual seconds a tick, as the marathon ticks


def default_app(namespace: str) -> AppSpec:
    """One application of the built-in default scenario."""
    return next(a for a in load_scenario(DEFAULT_SCENARIO).apps if a.namespace == namespace)


class AppTwin:
    """``apps`` on a fresh twin (``topology``, or two zones of two nodes), HEAD of each app
    deployed through its pipeline (repositories under ``repos``) by the orchestrator.

    Each tick advances the clock by ``tick_seconds`` and the cluster with :meth:`tick_rng` (by
    default seeded with the tick's number, so a run is the same every time), then calls
    :meth:`after_tick`. ``emit`` receives the pipelines' events (default: dropped).
    """

    tick_seconds: float = TICK
    #: Ticks of warm-up, after which the twin settles as a marathon's does (TwinCluster.settled:
    #: the count model forgets the start-up failures); None: never.
    settle_after: Optional[int] = None

    def __init__(self, apps: Iterable[AppSpec], repos: Path, *, start: datetime = EPOCH,
                 topology: Optional[Topology] = None, emit: Optional[Callable[[str, Any], None]] = None) -> None:
        app_list = list(apps)
        self.apps: dict[str, AppSpec] = {a.namespace: a for a in app_list}
        self.clock = VirtualClock(start)
        self.store = Store(self.clock)
        self.cluster = TwinCluster(self.store, app_list, ArtifactStore(), topology or Topology())
        self.cluster.bootstrap()
        self.pipelines = Pipelines(app_list, self.cluster, repos, self.clock, emit or (lambda _t, _d: None))
        for ns in self.apps:
            self.pipelines.deploy(ns, "HEAD", "orchestrator")
        self.ticks = 0

    def tick_rng(self) -> random.Random:
        return random.Random(f"tick:{self.ticks}")

    def after_tick(self, now: datetime) -> None:
        """What runs after every tick (alert evaluation, observers); nothing here."""

    def tick(self, n: int = 1) -> None:
        for _ in range(n):
            self.ticks += 1
            now = self.clock.advance(self.tick_seconds)
            self.cluster.tick(self.tick_seconds, self.tick_rng())
            if self.ticks == self.settle_after:
                self.cluster.settled()
            self.after_tick(now)

    def run(self, minutes: float) -> None:
        """Advance ``minutes`` of virtual time, tick by tick."""
        self.tick(int(minutes * 60 / self.tick_seconds))

    def active_pods(self, namespace: str, service: Optional[str] = None) -> list[dict[str, Any]]:
        """The active pods of ``namespace`` (of one ``service``: its ``app`` label)."""
        return [p for p in self.store.list("Pod", namespace) if pod_is_active(p)
                and (service is None or (p["metadata"].get("labels") or {}).get("app") == service)]


def run_for(seconds: float, clock: VirtualClock, tick: Callable[[float, random.Random], None]) -> None:
    """Advance ``clock`` by ``seconds`` in ticks of :data:`TICK`, calling ``tick(dt, rng)``
    after each with randomness seeded by the tick's time."""
    for _ in range(int(seconds / TICK)):
        clock.advance(TICK)
        tick(TICK, random.Random(clock.now.isoformat()))


class BackendTwin:
    """The twin backend on ``scenario`` with the policy point ``admission`` and the API tokens
    ``tokens``; its private files in a new directory under ``tmp``. Close it when done."""

    def __init__(self, scenario: Scenario, tmp: Path, *, admission: Any, tokens: dict[str, str],
                 clock: Optional[VirtualClock] = None) -> None:
        self.clock = clock or VirtualClock()
        self.admission = admission
        self.backend = TwinBackend(scenario, self.clock, emit=lambda *_: None, admission=admission,
                                   private_dir=Path(tempfile.mkdtemp(dir=tmp)), tokens=tokens)
        self.store, self.cluster = self.backend.store, self.backend.cluster

    def run(self, seconds: float) -> None:
        """Advance ``seconds`` of virtual time, tick by tick (see :func:`run_for`)."""
        run_for(seconds, self.clock, self.backend.tick)

    def pods(self, app: str, namespace: str = "shop") -> list[dict[str, Any]]:
        """Every pod of ``app`` (by its ``app`` label) in ``namespace``, whatever its phase."""
        return [p for p in self.store.list("Pod", namespace) if p["metadata"]["labels"].get("app") == app]

    def close(self) -> None:
        self.backend.close()


class AgentSimulation(BackendTwin):
    """The default scenario's twin backend three virtual minutes in, behind the recording policy
    point, with the agent's kubeconfig (``kubeconfig``) for ``token``."""

    admission: Any  # a support.admission.RecordingAdmission

    def __init__(self, tmp: Path, token: str) -> None:
        from support.admission import RecordingAdmission

        super().__init__(load_scenario(DEFAULT_SCENARIO), tmp, admission=RecordingAdmission(), tokens={token: "agent"})
        self.kubeconfig = self.backend.server.write_kubeconfig(tmp / "sim.kubeconfig", token)
        self.run(180)

    def active(self, app: str) -> list[dict[str, Any]]:
        """``app``'s active pods in the shop."""
        return [p for p in self.pods(app) if pod_is_active(p)]
