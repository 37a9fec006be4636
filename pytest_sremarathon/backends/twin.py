"""The embedded backend: a two-zone twin cluster with the scenario's applications deployed
through their pipelines, served over a loopback Kubernetes API. The marathon and
`sremarathon twin up` build it the same way."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..clock import VirtualClock
from ..cluster import Topology
from ..k8s.store import Store
from ..pipeline.service import Pipelines
from ..runtime.code import ArtifactStore
from ..scenario import Scenario
from ..serving.http import Admission
from ..twin.apiserver import ApiServer
from ..twin.cluster import TwinCluster
from .agent_api import PREFIX, make_handler


class TwinBackend:
    name = "twin"

    def __init__(self, scenario: Scenario, clock: VirtualClock, *, emit: Callable[[str, Any], None],
                 admission: Admission, private_dir: Path, tokens: dict[str, str]) -> None:
        self.clock = clock
        self.store = Store(clock)
        topo = scenario.spec.topology
        self.cluster = TwinCluster(self.store, list(scenario.apps), ArtifactStore(),
                                   Topology(tuple(topo.zones), topo.nodes_per_zone, topo.node_cpu, topo.node_memory))
        self.cluster.bootstrap()
        self.pipelines = Pipelines(list(scenario.apps), self.cluster, private_dir / "repos", clock, emit)
        for app in scenario.apps:
            self.pipelines.deploy(app.namespace, "HEAD", "orchestrator")
        self.server = ApiServer(self.store, tokens=tokens, admission=admission, telemetry=self.cluster,
                                extensions={PREFIX: make_handler(self.pipelines, self.cluster.metrics, admission)})
        self.server.start()

    def tick(self, dt: float, rng: random.Random) -> None:
        self.cluster.tick(dt, rng)

    def close(self) -> None:
        self.server.stop()
