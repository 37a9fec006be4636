"""``kubectl explain`` answers for every kind the twin serves, down any field path, with the
fields, types and descriptions of the real API (the OpenAPI v3 schemas generated from the
official client's models by ``tools/gen_openapi_schemas.py``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import kubernetes
import pytest
from support.kubectl import Kubectl

from pytest_sremarathon.k8s.store import RESOURCE_TYPES
from pytest_sremarathon.twin import openapi

ROOT = Path(__file__).resolve().parents[2]

# (path, a field it lists or its own type, words of its description)
NESTED = [
    ("statefulsets.spec.volumeClaimTemplates.spec", "storageClassName\t<string>", "PersistentVolumeClaimSpec"),
    ("statefulsets.spec.updateStrategy.rollingUpdate", "partition\t<integer>", "RollingUpdateStatefulSetStrategy"),
    ("pvc.spec.resources", "requests\t<map[string]", "VolumeResourceRequirements"),
    ("pv.spec.claimRef", "namespace\t<string>", "ObjectReference"),
    ("storageclass.volumeBindingMode", "FIELD: volumeBindingMode <string>", "how PersistentVolumeClaims"),
    ("hpa.spec.metrics.resource.target", "averageUtilization\t<integer>", "MetricTarget"),
    ("pdb.spec", "maxUnavailable\t", "PodDisruptionBudgetSpec"),
    ("networkpolicy.spec.ingress.from", "podSelector\t<LabelSelector>", "NetworkPolicyPeer"),
    ("resourcequota.spec", "hard\t<map[string]", "ResourceQuotaSpec"),
    ("limitrange.spec.limits", "defaultRequest\t<map[string]", "LimitRangeItem"),
    ("cronjob.spec.jobTemplate.spec", "backoffLimit\t<integer>", "JobSpec"),
    ("cronjob.spec.concurrencyPolicy", "FIELD: concurrencyPolicy <string>", "concurrent executions"),
    ("daemonset.spec.updateStrategy", "rollingUpdate\t<RollingUpdateDaemonSet>", "DaemonSetUpdateStrategy"),
    ("endpointslice.endpoints.conditions", "ready\t<boolean>", "EndpointConditions"),
    ("priorityclass.preemptionPolicy", "FIELD: preemptionPolicy <string>", "PreemptLowerPriority"),
    ("ingress.spec.rules.http.paths.backend", "service\t<IngressServiceBackend>", "IngressBackend"),
    ("pods.spec.containers.livenessProbe.httpGet", "path\t<string>", "HTTPGetAction"),
    ("pods.spec.initContainers", "image\t<string>", "A single application container"),
    ("deployments.spec.strategy", "rollingUpdate\t<RollingUpdateDeployment>", "DeploymentStrategy"),
]


@pytest.mark.parametrize("path, shows, described", NESTED, ids=[p for p, _, _ in NESTED])
def test_explain_reaches_nested_fields_of_the_kinds(kubectl: Kubectl, path: str, shows: str, described: str) -> None:
    out = kubectl("explain", path)
    assert shows in out
    assert described in out


def test_every_served_kind_explains_its_fields(kubectl: Kubectl) -> None:
    for rt in RESOURCE_TYPES:
        target = rt.plural
        out = kubectl("explain", target, f"--api-version={rt.group_version}")
        assert f"KIND:       {rt.kind}" in out, target
        assert "permissive schema" not in out, f"{target}: no generated schema"
        assert "metadata\t<ObjectMeta>" in out, target


def test_explain_says_which_field_does_not_exist(kubectl: Kubectl) -> None:
    bad = kubectl.run("explain", "statefulsets.spec.replicaz", check=False)
    assert bad.returncode != 0 and 'field "replicaz" does not exist' in bad.stderr


def test_the_shipped_schemas_are_what_the_generator_makes_of_the_installed_client() -> None:
    """The generated file is regenerated with the client version it names; drift from an edit
    of the twin's kinds (a new kind with no schema) fails here."""
    shipped = json.loads(Path(openapi.__file__).with_name("openapi_schemas.json").read_text())
    if shipped["kubernetes"] != kubernetes.__version__:
        pytest.skip(f"openapi_schemas.json was made with kubernetes {shipped['kubernetes']}, this is "
                    f"{kubernetes.__version__}: regenerate with python tools/gen_openapi_schemas.py to compare")
    spec = importlib.util.spec_from_file_location("gen_openapi_schemas", ROOT / "tools" / "gen_openapi_schemas.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert generator.generate() == shipped, "run python tools/gen_openapi_schemas.py"
