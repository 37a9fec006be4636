"""The real backend: the same marathon on a Kubernetes cluster.

``--marathon-backend kind`` creates a two-zone kind cluster (deleted at the end unless
``--marathon-keep-cluster``); ``--marathon-backend kubeconfig:PATH`` uses an existing cluster.
:class:`KubeBackend` is built like :class:`~pytest_sremarathon.backends.twin.TwinBackend` and
offers the same attributes:

1. the cluster: created and waited for (nodes Ready and zoned), or read from the kubeconfig;
2. ``cluster`` (:class:`~.cluster.KubeCluster`) and ``store`` (its mirror of the cluster);
3. ``pipelines``: the same pipelines as on the twin, deploying every app — the build step
   builds and loads one image per artifact (:mod:`.images`), the deploy server-side applies
   the rendered manifests (:mod:`.manifests`) — then waits for every rollout;
4. user traffic at each app's entry service through the API server's service proxy
   (:mod:`.traffic`), at the twin's rate × ``SREMARATHON_TRAFFIC_SCALE`` (default 0.1);
5. ``server``: the policy proxy (:mod:`.proxy`) on loopback, serving the agent's Kubernetes API
   and the ``/sremarathon/v1/`` pipeline and telemetry endpoints;
6. the ``monitoring`` namespace's Prometheus (:mod:`.monitoring`) over the series each scrape
   records (:mod:`..kube.series`), and its Alertmanager over the Observation's alerts, through
   the proxy's service proxy and at ``/prometheus/`` and ``/alertmanager/`` (the Service objects
   are not created in the cluster: the proxy answers for them). No ``jaeger-query``: the
   service processes are not traced.

``tick(dt)`` keeps the virtual clock from running ahead of the cluster (it waits until ``dt``
wall seconds have passed since the previous tick), relists the mirror and scrapes the
metrics. Images reach an existing cluster with ``kind load`` when its context is a kind
cluster (``kind-<name>``), otherwise by ``docker push`` to ``SREMARATHON_IMAGE_REGISTRY``
(or through an ``images`` publisher given by the caller).

``realtime=False`` lets virtual time run ahead of the wall clock: only for a cluster that is
itself driven by the caller's clock (the tests drive the twin behind the adapter this way).
"""

from __future__ import annotations

import functools
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

import yaml

from ..apps import AppSpec
from ..clock import EPOCH, VirtualClock
from ..errors import SremarathonError
from ..kube import kind as kindmod
from ..kube.api import KubeApi
from ..kube.cluster import KubeCluster
from ..kube.images import ImagePublisher, KindImages, RegistryImages
from ..kube.proxy import PolicyProxy
from ..kube.traffic import LoadGenerator, service_proxy_sender
from ..pipeline.service import Pipelines
from ..scenario import Scenario
from ..serving.http import Admission
from .agent_api import PREFIX, make_handler
from .monitoring import DeferredAlerts, DeferredRules, Monitoring, alertmanager_service, prometheus_service

DEFAULT_TRAFFIC_SCALE = 0.1


class KubeBackendError(SremarathonError):
    pass


def _say(msg: str) -> None:
    print(f"sremarathon: {msg}", flush=True)


def _scaled_rps(cluster: KubeCluster, app: AppSpec, scale: float) -> float:
    """User traffic for ``app``: the twin's rate at this time of day, scaled."""
    return cluster.rps(app) * scale


def _context_name(kubeconfig: Path) -> str:
    try:
        return str((yaml.safe_load(kubeconfig.read_text()) or {}).get("current-context") or "")
    except (OSError, yaml.YAMLError):
        return ""


class KubeBackend:
    name = "kube"
    rollout_poll = 5.0  # seconds between two looks at the rollouts

    def __init__(self, scenario: Scenario, clock: VirtualClock, *, emit: Callable[[str, Any], None],
                 admission: Admission, private_dir: Path, tokens: dict[str, str],
                 kubeconfig: Optional[Path] = None, keep_cluster: bool = False, cluster_name: Optional[str] = None,
                 progress: Callable[[str], None] = _say, traffic_scale: Optional[float] = None,
                 images: Optional[ImagePublisher] = None, docker: Optional[bool] = None, realtime: bool = True,
                 seed: int = 0) -> None:
        self.clock = clock
        self.progress = progress
        self.keep_cluster = keep_cluster
        self.realtime = realtime
        self.kind: Optional[kindmod.KindCluster] = None
        self.loadgens: list[LoadGenerator] = []
        self._server: Optional[PolicyProxy] = None  # None until built, and once closed
        self._cluster: Optional[KubeCluster] = None
        self._last_tick = time.monotonic()
        topo = scenario.spec.topology
        scale = traffic_scale if traffic_scale is not None else \
            float(os.environ.get("SREMARATHON_TRAFFIC_SCALE", DEFAULT_TRAFFIC_SCALE))
        work = Path(private_dir) / "kube"
        try:
            if kubeconfig is None:
                why = kindmod.unavailable()
                if why:
                    raise KubeBackendError(f"--marathon-backend kind needs kind and a running Docker: {why}")
                self.kind = kindmod.KindCluster(cluster_name or os.environ.get("SREMARATHON_KIND_CLUSTER", "sremarathon"),
                                                work, tuple(topo.zones), topo.nodes_per_zone,
                                                node_image=os.environ.get("SREMARATHON_KIND_NODE_IMAGE") or None,
                                                progress=progress,
                                                twin_names=os.environ.get("SREMARATHON_KIND_TWIN_NAMES", "1") != "0")
                kubeconfig = self.kind.create()
                images, docker = KindImages(self.kind.name, work / "images", progress=progress), True
            elif images is None:
                images, docker = self._images_for(Path(kubeconfig), work)
            api = KubeApi.from_kubeconfig(Path(kubeconfig))
            if self.kind is not None:
                self.kind.wait_nodes(api)
            cluster = self._cluster = KubeCluster(api, list(scenario.apps), clock=clock, images=images,
                                                  docker=bool(docker), progress=progress)
            self.store = cluster.store
            cluster.bootstrap()
            self.pipelines = Pipelines(list(scenario.apps), cluster, Path(private_dir) / "repos", clock, emit)
            for app in scenario.apps:
                progress(f"deploying {app.namespace} through its pipeline")
                self.pipelines.deploy(app.namespace, "HEAD", "orchestrator")
            cluster.wait_rollout(every=self.rollout_poll)
            for i, app in enumerate(scenario.apps):
                port = cluster.applied.get(("Service", app.namespace, app.traffic.entry), {}) \
                    .get("spec", {}).get("ports", [{}])[0].get("port", 8080)
                gen = LoadGenerator(app, service_proxy_sender(api, app.namespace, app.traffic.entry, port),
                                    rate=functools.partial(_scaled_rps, cluster, app, scale),
                                    seed=i)
                self.loadgens.append(gen.start())
            self.rules = DeferredRules()
            self.monitoring = Monitoring()
            prometheus, self.prometheus = prometheus_service(
                cluster.prometheus, cluster.store.lock, lambda: clock.now.timestamp(),
                targets=cluster.series.targets, rules=self.rules, admission=admission,
                start_time=clock.now.timestamp())
            self.monitoring.add(prometheus)
            self.alert_feed = DeferredAlerts()  # the Observation's alerts, as on the twin (no traces here)
            alertmanager, self.alertmanager = alertmanager_service(
                self.alert_feed.firing, lambda: clock.now, random.Random(f"{seed}:alertmanager"), cluster.store.lock,
                admission)
            self.monitoring.add(alertmanager)
            self._server = PolicyProxy(api, tokens=tokens, admission=admission,
                                       extensions={PREFIX: make_handler(self.pipelines, cluster.metrics, admission),
                                                   **self.monitoring.extensions()},
                                       service_proxy=self.monitoring.service_proxy)
            self._server.start()
            cluster.scrape(clock.now)
            progress(f"cluster ready; the agent's API is {self._server.https_url} (policy proxy)")
        except BaseException:
            self.close()
            raise
        self._last_tick = time.monotonic()

    @property
    def cluster(self) -> KubeCluster:
        """The cluster adapter (there once the constructor has returned)."""
        assert self._cluster is not None
        return self._cluster

    @property
    def urls(self) -> dict[str, str]:
        """The monitoring services' direct URLs on the policy proxy."""
        return self.monitoring.urls(self.server.url)

    @property
    def server(self) -> PolicyProxy:
        """The policy proxy (there from the constructor's return until :meth:`close`)."""
        assert self._server is not None
        return self._server

    def _images_for(self, kubeconfig: Path, work: Path) -> tuple[ImagePublisher, bool]:
        registry = os.environ.get("SREMARATHON_IMAGE_REGISTRY")
        if registry:
            return RegistryImages(work / "images", registry=registry, progress=self.progress), False
        context = _context_name(kubeconfig)
        if context.startswith("kind-") and shutil.which("kind") and shutil.which("docker"):
            return KindImages(context[len("kind-"):], work / "images", progress=self.progress), True
        raise KubeBackendError(f"--marathon-backend kubeconfig:{kubeconfig}: the service images must reach the "
                               f"cluster; it is not a kind cluster (context {context!r}), so set "
                               f"SREMARATHON_IMAGE_REGISTRY=<registry/prefix> the cluster pulls from")

    def tick(self, dt: float, rng: Any) -> None:
        """Keep virtual time from outrunning the cluster (not during the marathon's warm-up
        before t=0: the rollouts were already awaited), relist, scrape. Rates are per wall
        second between two scrapes."""
        wait = dt - (time.monotonic() - self._last_tick)
        if wait > 0 and self.realtime and self.clock.now > EPOCH:
            time.sleep(wait)
        now = time.monotonic()
        elapsed, self._last_tick = now - self._last_tick, now
        self.cluster.refresh()
        self.cluster.scrape(self.clock.now, max(elapsed, 1e-3))

    def close(self) -> None:
        for gen in self.loadgens:
            gen.stop()
        self.loadgens = []
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._cluster is not None:
            for problem in self._cluster.network.restore():
                self.progress(f"cleanup: {problem}")
            self._cluster.close()
        if self.kind is not None and self.kind.created:
            if self.keep_cluster:
                self.progress(f"kind cluster {self.kind.name} kept (--marathon-keep-cluster): "
                              f"`kind export kubeconfig --name {self.kind.name}` to use it, "
                              f"`kind delete cluster --name {self.kind.name}` to remove it; the next run reuses it")
            else:
                try:
                    self.kind.delete()
                except kindmod.KindError as exc:
                    self.progress(f"cleanup: {exc}")
            self.kind.created = False
