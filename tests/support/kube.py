"""Helpers for the real-backend tests (tests/kube/): the twin standing in for a real cluster's
API server (everything else is real: HTTP, TLS, kubectl, the official client, the policy)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Optional

import yaml

from pytest_sremarathon.builtin import APPS_DIR, SCENARIOS_DIR
from pytest_sremarathon.clock import VirtualClock
from pytest_sremarathon.scenario import load_scenario
from support.admission import RecordingAdmission
from support.twins import BackendTwin

ORCHESTRATOR_TOKEN = "orchestrator-token-upstream-0123"


class Upstream(BackendTwin):
    """A running twin with the shop deployed (:func:`shop_scenario`), reachable with the
    orchestrator's token; its policy point records."""

    admission: RecordingAdmission

    def __init__(self, tmp: Path) -> None:
        super().__init__(load_scenario(shop_scenario(tmp)), tmp, admission=RecordingAdmission(),
                         tokens={ORCHESTRATOR_TOKEN: "orchestrator"})

    @property
    def url(self) -> str:
        return self.backend.server.url


def shop_scenario(tmp: Path) -> Path:
    data = yaml.safe_load((SCENARIOS_DIR / "default.yaml").read_text())
    data.update(apps_dir=str(APPS_DIR), apps=["shop"], duration="1h", segment="1h")
    path = tmp / "shop.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# -- the real backend with the twin as its cluster ---------------------------------------------

class TwinImages:
    """The image publisher for a twin standing in for a cluster: "loading" an image puts the
    artifact into the twin's image store under the image's tag, where its kubelet pulls it."""

    def __init__(self, twin_artifacts: Any) -> None:
        self.twin_artifacts = twin_artifacts

    def publish(self, artifact: Any, *, datastore_image: Optional[str] = None) -> str:
        self.twin_artifacts.put(artifact, datastore_image=datastore_image)
        return self.twin_artifacts.tags[artifact.digest]


def kube_on_twin_factory(*args: Any, **kw: Any) -> Any:
    """A :class:`KubeBackend` whose cluster is a twin served by its own API server (with its
    own clock, advanced one tick per marathon tick)."""
    import threading
    import time

    from pytest_sremarathon.backends.kube import KubeBackend
    from pytest_sremarathon.cluster import Topology
    from pytest_sremarathon.k8s.store import Store
    from pytest_sremarathon.kube.cluster import PublishingArtifacts
    from pytest_sremarathon.twin.apiserver import ApiServer
    from pytest_sremarathon.twin.cluster import TwinCluster

    class KubeOnTwin(KubeBackend):
        rollout_poll = 0.2

        def __init__(self, scenario: Any, clock: Any, **kw: Any) -> None:
            self.twin_clock = VirtualClock(clock.now)
            store = Store(self.twin_clock)
            artifacts = PublishingArtifacts(None)
            topo = scenario.spec.topology
            self.twin = TwinCluster(store, list(scenario.apps), artifacts,
                                    Topology(tuple(topo.zones), topo.nodes_per_zone, topo.node_cpu, topo.node_memory))
            self.twin.bootstrap()
            self.upstream = ApiServer(store, tokens={ORCHESTRATOR_TOKEN: "orchestrator"},
                                      admission=RecordingAdmission(), telemetry=self.twin)
            self.upstream.start()
            kubeconfig = self.upstream.write_kubeconfig(Path(kw["private_dir"]) / "upstream.kubeconfig",
                                                        ORCHESTRATOR_TOKEN)
            running = threading.Event()
            running.set()

            def run_cluster() -> None:  # a real cluster runs on its own while the backend waits for it
                while running.is_set():
                    self._tick_twin(30, random.Random(0))
                    time.sleep(0.02)

            ticker = threading.Thread(target=run_cluster, daemon=True)
            ticker.start()
            try:
                super().__init__(scenario, clock, kubeconfig=kubeconfig, images=TwinImages(artifacts), docker=False,
                                 realtime=False, traffic_scale=0.0, progress=lambda _m: None, **kw)
            except BaseException:
                self.upstream.stop()
                raise
            finally:
                running.clear()
                ticker.join(5)

        def _tick_twin(self, dt: float, rng: random.Random) -> None:
            self.twin_clock.advance(dt)
            self.twin.tick(dt, rng)

        def tick(self, dt: float, rng: Any) -> None:
            self._tick_twin(dt, rng)
            super().tick(dt, rng)

        def close(self) -> None:
            super().close()
            self.upstream.stop()

    return KubeOnTwin(*args, **kw)


class HookStub:
    """The plugin's hook relay for a Marathon run outside pytest: registers extra backends;
    every other hook answers nothing."""

    def __init__(self, backends: dict[str, Any]) -> None:
        self.backends = backends

    def __getattr__(self, name: str) -> Any:
        if name.endswith("_backends"):
            return lambda **_: [self.backends]
        if name.endswith("_fault_kinds"):
            return lambda **_: []
        return lambda **_: None
