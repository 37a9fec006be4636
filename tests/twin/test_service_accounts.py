"""ServiceAccounts as a real cluster serves them to ``kubectl`` and the official Python client: a
``default`` account in every namespace (the serviceaccount controller's), ``kubectl create sa``,
``kubectl create token`` (a TokenRequest to ``serviceaccounts/<name>/token``) and ``kubectl
explain`` — on the default scenario's twin, through its API server."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config
from support.admission import RecordingAdmission
from support.kubectl import Kubectl, kubectl_for
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.scenario import load_scenario

TOKEN = "service-accounts-agent-token"


@pytest.fixture
def sim(tmp_path: Path) -> Any:
    s = BackendTwin(load_scenario(DEFAULT_SCENARIO), tmp_path, admission=RecordingAdmission(),
                    tokens={TOKEN: "agent"})
    s.kubeconfig = s.backend.server.write_kubeconfig(tmp_path / "sim.kubeconfig", TOKEN)  # type: ignore[attr-defined]
    s.run(60)
    yield s
    s.close()


@pytest.fixture
def kc(sim: Any, tmp_path: Path) -> Kubectl:
    return kubectl_for(sim.kubeconfig, tmp_path / "cache")


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def test_every_namespace_has_a_default_service_account(sim: Any, kc: Kubectl) -> None:
    rows = [line.split() for line in kc("get", "sa", "-A").splitlines()]
    assert rows[0] == ["NAMESPACE", "NAME", "SECRETS", "AGE"]
    namespaces = {ns["metadata"]["name"] for ns in sim.store.list("Namespace")}
    assert {"default", "kube-system", "monitoring", "shop"} <= namespaces
    assert sorted((r[0], r[1], r[2]) for r in rows[1:]) == sorted((ns, "default", "0") for ns in namespaces)
    # the long names and the discovery entry answer too
    assert kc("get", "serviceaccounts", "-n", "shop", "-o", "name").split() == ["serviceaccount/default"]
    resources = kc("api-resources", "--api-group=")
    assert any(line.split()[:4] == ["serviceaccounts", "sa", "v1", "true"] for line in resources.splitlines())


def test_create_a_service_account_and_read_it_back(sim: Any, kc: Kubectl) -> None:
    assert kc("create", "sa", "x", "-n", "shop").strip() == "serviceaccount/x created"
    obj = kc.json("get", "sa", "x", "-n", "shop")
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"]["namespace"]) == \
        ("v1", "ServiceAccount", "x", "shop")
    assert obj["metadata"]["uid"] and obj["metadata"]["resourceVersion"] and obj["metadata"]["creationTimestamp"]
    text = kc("get", "sa", "x", "-n", "shop", "-o", "yaml")
    assert "kind: ServiceAccount" in text and "name: x" in text and "namespace: shop" in text
    rows = [line.split() for line in kc("get", "sa", "-n", "shop").splitlines()]
    assert [r[:3] for r in rows] == [["NAME", "SECRETS", "AGE"], ["default", "0", rows[1][2]], ["x", "0", rows[2][2]]]
    described = kc("describe", "sa", "x", "-n", "shop")
    assert "Name:" in described and "Mountable secrets:" in described and "Tokens:" in described
    again = kc.run("create", "sa", "x", "-n", "shop", check=False)
    assert again.returncode != 0
    assert 'failed to create serviceaccount: serviceaccounts "x" already exists' in again.stderr


def test_create_token_prints_a_service_account_token(sim: Any, kc: Kubectl) -> None:
    token = kc("create", "token", "default", "-n", "shop").strip()
    header, payload, signature = token.split(".")
    assert header and signature
    claims = _claims(token)
    sa = sim.store.get("ServiceAccount", "shop", "default")
    assert claims["sub"] == "system:serviceaccount:shop:default"
    assert claims["kubernetes.io"]["serviceaccount"] == {"name": "default", "uid": sa["metadata"]["uid"]}
    assert claims["aud"] == ["https://kubernetes.default.svc.cluster.local"]
    now = int(sim.clock.now.timestamp())
    assert claims["iat"] == claims["nbf"] == now and claims["exp"] == now + 3600  # the default hour
    # a lifetime and an audience of the caller's, and the object as the server answered it
    answer = kc.json("create", "token", "default", "-n", "shop", "--duration=20m", "--audience=vault")
    assert (answer["apiVersion"], answer["kind"]) == ("authentication.k8s.io/v1", "TokenRequest")
    assert answer["spec"]["expirationSeconds"] == 1200 and answer["spec"]["audiences"] == ["vault"]
    assert _claims(answer["status"]["token"])["aud"] == ["vault"]
    assert answer["status"]["expirationTimestamp"].endswith("Z")
    # bound to a pod: the token names the pod and its node
    pod = next(p for p in sim.store.list("Pod", "shop") if p["spec"].get("nodeName"))
    bound = kc("create", "token", pod["spec"].get("serviceAccountName") or "default", "-n", "shop",
               "--bound-object-kind=Pod", f"--bound-object-name={pod['metadata']['name']}")
    private = _claims(bound)["kubernetes.io"]
    assert private["pod"] == {"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    assert private["node"]["name"] == pod["spec"]["nodeName"]
    nothing = set(sim.store.list("ServiceAccount", "shop")[0]["metadata"])
    assert "secrets" not in nothing  # a token request stores nothing


def test_a_minted_token_does_not_authenticate_to_the_api(kc: Kubectl) -> None:
    """An agent must not escape the identity its requests are recorded (and policed) under by
    minting a service-account token: the API server accepts only the tokens it was given."""
    token = kc("create", "token", "default", "-n", "shop").strip()
    out = kc.run("get", "pods", "-n", "shop", f"--token={token}", check=False)
    assert out.returncode != 0 and "You must be logged in to the server" in out.stderr  # a 401


def test_create_token_for_a_missing_service_account_is_not_found(kc: Kubectl) -> None:
    out = kc.run("create", "token", "nope", "-n", "shop", check=False)
    assert out.returncode != 0
    assert 'failed to create token: serviceaccounts "nope" not found' in out.stderr
    short = kc.run("create", "token", "default", "-n", "shop", "--duration=5m", check=False)
    assert short.returncode != 0
    assert 'TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 300: ' \
           'may not specify a duration less than 10 minutes' in short.stderr
    unbound = kc.run("create", "token", "default", "-n", "shop", "--bound-object-kind=Secret",
                     "--bound-object-name=nope", check=False)
    assert unbound.returncode != 0 and 'failed to create token: secrets "nope" not found' in unbound.stderr


def test_a_new_namespace_gets_a_default_service_account(sim: Any, kc: Kubectl) -> None:
    kc("create", "namespace", "team-a")
    assert kc("get", "sa", "-n", "team-a", "-o", "name").split() == ["serviceaccount/default"]
    assert kc("create", "token", "default", "-n", "team-a")
    # deleted, the controller makes it again at once (a new object: a new uid)
    uid = sim.store.get("ServiceAccount", "team-a", "default")["metadata"]["uid"]
    kc("delete", "sa", "default", "-n", "team-a")
    assert kc("get", "sa", "-n", "team-a", "-o", "name").split() == ["serviceaccount/default"]
    assert sim.store.get("ServiceAccount", "team-a", "default")["metadata"]["uid"] != uid


def test_explain_serviceaccount(kc: Kubectl) -> None:
    out = kc("explain", "serviceaccount")
    assert "KIND:       ServiceAccount" in out and "VERSION:    v1" in out
    assert "automountServiceAccountToken\t<boolean>" in out and "secrets\t<[]ObjectReference>" in out
    assert "imagePullSecrets" in kc("explain", "sa.imagePullSecrets")


def test_python_client_lists_service_accounts(sim: Any) -> None:
    api = k8s.CoreV1Api(config.new_client_from_config(config_file=str(sim.kubeconfig)))
    everywhere = api.list_service_account_for_all_namespaces()
    namespaces = {ns["metadata"]["name"] for ns in sim.store.list("Namespace")}
    assert {(sa.metadata.namespace, sa.metadata.name) for sa in everywhere.items} == \
        {(ns, "default") for ns in namespaces}
    created = api.create_namespaced_service_account("shop", k8s.V1ServiceAccount(
        metadata=k8s.V1ObjectMeta(name="reporter"), automount_service_account_token=False))
    assert created.metadata.uid and created.automount_service_account_token is False
    assert [sa.metadata.name for sa in api.list_namespaced_service_account("shop").items] == ["default", "reporter"]
    answer = api.create_namespaced_service_account_token("reporter", "shop", k8s.AuthenticationV1TokenRequest(
        spec=k8s.V1TokenRequestSpec(audiences=["https://example.test"], expiration_seconds=900)))
    assert answer.status.token and answer.spec.expiration_seconds == 900
    assert _claims(answer.status.token)["sub"] == "system:serviceaccount:shop:reporter"
