"""What every cluster has from its first moment, as real kubectl shows it on the marathon's
backend: the default ClusterRoles and the cluster-admin binding, and an available APIService
per served group version (metrics.k8s.io included: what an SRE checks when `kubectl top` fails)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.kubectl import Kubectl, kubectl_for
from support.twins import AgentSimulation

TOKEN = "system-objects-agent-token"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    s = AgentSimulation(tmp_path_factory.mktemp("sim"), TOKEN)
    yield s
    s.close()


@pytest.fixture
def kc(sim: AgentSimulation, tmp_path: Path) -> Kubectl:
    return kubectl_for(sim.kubeconfig, tmp_path / "cache")


def _rows(table: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in table.splitlines()[1:] if line.strip()}


def test_the_default_cluster_roles_and_the_cluster_admin_binding(kc: Kubectl) -> None:
    roles = _rows(kc("get", "clusterroles"))
    assert {"cluster-admin", "admin", "edit", "view"} <= set(roles)
    binding = _rows(kc("get", "clusterrolebinding", "cluster-admin", "-o", "wide"))["cluster-admin"]
    assert "ClusterRole/cluster-admin" in binding and "system:masters" in binding
    view = kc("describe", "clusterrole", "view")
    assert "deployments.apps" in view and "[get list watch]" in view and "secrets" not in view
    assert "rbac.authorization.k8s.io/aggregate-to-edit=true" in view


def test_an_available_api_service_per_served_group_version(kc: Kubectl) -> None:
    services = _rows(kc("get", "apiservices"))
    assert services["v1beta1.metrics.k8s.io"][:2] == ["Local", "True"]
    assert services["v1.apps"][:2] == ["Local", "True"] and services["v2.autoscaling"][:2] == ["Local", "True"]
    served = {line.split()[0] for line in kc("api-versions").splitlines()}
    named = {f"{group}/{version}" if group else version
             for version, _, group in (name.partition(".") for name in services)}
    assert served <= named, served - named
