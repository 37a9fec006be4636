"""A liveness probe that kills under load, as real ``kubectl`` shows it on the whole twin
backend: restart counts in ``get pods``, the late probes and the kills in ``describe``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from support.kubectl import find_kubectl, kubectl_for
from support.twins import DEFAULT_SCENARIO, AgentSimulation

from pytest_sremarathon.faults import Fault, builtin_registry
from pytest_sremarathon.faults.catalogue import CuratedChange
from pytest_sremarathon.scenario import load_scenario

TOKEN = "liveness-agent-token"
pytestmark = pytest.mark.skipif(find_kubectl() is None, reason="kubectl is not installed")


def test_liveness_cascade_as_kubectl_shows_it(tmp_path: Path) -> None:
    """The liveness-under-load change shipped on the whole twin backend at the run's start
    (00:00, half the daily peak): ``kubectl get pods`` counts the restarts of search's pods and
    ``kubectl describe`` shows the late probes and the kills."""
    sim = AgentSimulation(tmp_path, TOKEN)
    try:
        scenario = load_scenario(DEFAULT_SCENARIO)

        class World:
            cluster, pipelines = sim.cluster, sim.backend.pipelines
            apps = {a.namespace: a for a in scenario.apps}

            def curated(self, app: str, change_id: str) -> CuratedChange:
                return next(c for c in scenario.catalogues[app] if c.id == change_id)

        kind = builtin_registry()["liveness-under-load"]
        fault = Fault(id="F01", kind=kind.name, family=kind.family, app="hotel", start=sim.clock.now,
                      end=sim.clock.now + timedelta(hours=2), params={"change": "search-rightsize-fast-liveness"})
        kind.inject(World(), fault)
        sim.run(25 * 60)
        kubectl = kubectl_for(sim.kubeconfig, tmp_path / "cache")
        rows = [line.split() for line in kubectl("-n", "hotel", "get", "pods", "-l", "app=search",
                                                  "--no-headers").splitlines()]
        assert rows and sum(int(r[3]) for r in rows) >= 2, rows
        restarted = next(r[0] for r in rows if int(r[3]) > 0)
        described = kubectl("-n", "hotel", "describe", "pod", restarted)
        assert "Liveness probe failed" in described and "context deadline exceeded" in described, described
        assert "failed liveness probe, will be restarted" in described
        assert "Liveness:" in described and "timeout=1s" in described and "#failure=1" in described
    finally:
        sim.close()
