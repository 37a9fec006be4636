"""The official Python client's typed calls against the twin: every answer decodes into its
model (the client's pydantic models reject a ``Status`` where an object is declared) and error
``Status`` bodies read as the real server writes them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import utils
from kubernetes.client.rest import ApiException

NS = "shop"


def _service(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {"name": name}},
            "spec": {"ports": [{"name": "port", "port": 80, "protocol": "TCP", "targetPort": 80}],
                     "selector": {"name": name}}}


def test_service_calls_answer_complete_services(twin: Any) -> None:
    v1 = k8s.CoreV1Api(twin.operator_client())  # the policy keeps the agent from deleting Services
    created = v1.create_namespaced_service(NS, _service("front"))
    assert created.metadata.name == "front" and created.status is not None
    assert created.spec.cluster_ip and created.spec.cluster_ip == created.spec.cluster_ips[0]
    replaced = v1.replace_namespaced_service("front", NS, created)
    assert replaced.spec.cluster_ip == created.spec.cluster_ip
    patched = v1.patch_namespaced_service("front", NS, {"spec": {"ports": [
        {"name": "new", "port": 8080, "protocol": "TCP", "targetPort": 8080}]}})
    assert sorted(p.port for p in patched.spec.ports) == [80, 8080]  # ports merge by port
    # A Service's DELETE answers with the Service (ReturnDeletedObject), which the client decodes
    # as a V1Service; a Status there raised a pydantic ValidationError client-side.
    deleted = v1.delete_namespaced_service("front", NS, body={})
    assert isinstance(deleted, k8s.V1Service) and deleted.metadata.name == "front"
    with pytest.raises(ApiException) as err:
        v1.read_namespaced_service("front", NS)
    assert err.value.status == 404


def test_create_from_yaml_reports_conflicts_in_the_real_servers_words(client: Any, tmp_path: Any) -> None:
    """``utils.create_from_yaml`` prints each failure's body verbatim; the real server's text has
    ``details`` (``name``, ``group``, ``kind``) before ``code``."""
    manifest = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "twice"},
                "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "twice"}},
                         "template": {"metadata": {"labels": {"app": "twice"}},
                                      "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}}}}
    path = tmp_path / "twice.yaml"
    path.write_text(json.dumps(manifest) + "\n---\n" + json.dumps(manifest))
    with pytest.raises(utils.FailToCreateError) as err:
        utils.create_from_yaml(client, str(path), namespace=NS)
    assert str(err.value) == (
        'Error from server (Conflict): {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
        '"message":"deployments.apps \\"twice\\" already exists","reason":"AlreadyExists",'
        '"details":{"name":"twice","group":"apps","kind":"deployments"},"code":409}\n')
