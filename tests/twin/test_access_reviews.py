"""``kubectl auth can-i`` and client-go's access checks: SelfSubjectAccessReview (kubectl POSTs it
as protobuf) and SelfSubjectRulesReview, answered by the policy point the real request would meet;
``kubectl auth whoami``'s SelfSubjectReview, answered with the user the token authenticates as."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client as k8s
from support.kubectl import Kubectl


def test_kubectl_auth_can_i_answers_from_the_policy(twin: Any, any_kubectl: Kubectl) -> None:
    kubectl = any_kubectl  # 1.27, 1.33 and the one on PATH (1.32 POSTs the review as protobuf)
    recorded = len(twin.admission.records)
    assert kubectl("auth", "can-i", "create", "deployments", "-n", "shop").strip() == "yes"
    assert kubectl("auth", "can-i", "patch", "deployments/scale", "-n", "shop").strip() == "yes"
    assert kubectl("auth", "can-i", "list", "pods", "--all-namespaces").strip() == "yes"
    denied = kubectl.run("auth", "can-i", "delete", "namespaces", check=False)
    assert denied.returncode == 1 and denied.stdout.startswith("no - denied by sremarathon policy rule "
                                                               "'no-delete-namespace'"), denied
    secrets = kubectl.run("auth", "can-i", "get", "secrets", "-n", "shop", check=False)
    assert secrets.returncode == 1 and "no-read-secrets" in secrets.stdout
    protected = kubectl.run("auth", "can-i", "create", "pods", "-n", "monitoring", check=False)
    assert protected.returncode == 1 and "protected-namespaces" in protected.stdout
    everything = kubectl.run("auth", "can-i", "*", "*", "-n", "shop", check=False)
    assert everything.stdout.startswith("no"), everything  # the policy forbids some of it
    listed = kubectl.run("auth", "can-i", "--list", "-n", "shop")
    assert "*.*" in listed.stdout and "incomplete" in listed.stderr
    assert len(twin.admission.records) == recorded  # reviews change nothing: nothing recorded


def test_the_operator_may_do_everything(twin: Any) -> None:
    api = k8s.AuthorizationV1Api(twin.operator_client())
    review = api.create_self_subject_access_review({"spec": {"resourceAttributes": {
        "verb": "delete", "resource": "namespaces", "name": "shop"}}})
    assert review.status.allowed is True


def test_json_reviews_through_the_python_client(client: Any) -> None:
    api = k8s.AuthorizationV1Api(client)
    allowed = api.create_self_subject_access_review({"spec": {"resourceAttributes": {
        "namespace": "shop", "verb": "create", "resource": "pods", "subresource": "eviction"}}})
    assert allowed.status.allowed is True and allowed.kind == "SelfSubjectAccessReview"
    denied = api.create_self_subject_access_review({"spec": {"resourceAttributes": {
        "namespace": "shop", "verb": "delete", "group": "apps", "resource": "deployments", "name": "web"}}})
    assert denied.status.allowed is False and denied.status.denied is True
    assert "no-delete-workloads" in denied.status.reason
    url = api.create_self_subject_access_review({"spec": {"nonResourceAttributes": {"path": "/healthz",
                                                                                  "verb": "get"}}})
    assert url.status.allowed is True
    rules = api.create_self_subject_rules_review({"spec": {"namespace": "shop"}})
    assert rules.status.incomplete is True and rules.status.resource_rules[0].verbs == ["*"]


def test_kubectl_auth_whoami_names_the_tokens_user(twin: Any, kubectl: Kubectl) -> None:
    # kubectl 1.28+ POSTs a SelfSubjectReview (authentication.k8s.io/v1) as protobuf
    table = kubectl("auth", "whoami")
    assert "sremarathon:agent" in table and "system:authenticated" in table
    recorded = len(twin.admission.records)
    answer = json.loads(kubectl("auth", "whoami", "-o", "json"))
    assert answer["kind"] == "SelfSubjectReview" and answer["apiVersion"] == "authentication.k8s.io/v1"
    assert answer["status"]["userInfo"] == {"username": "sremarathon:agent", "groups": ["system:authenticated"]}
    assert len(twin.admission.records) == recorded


def test_whoami_through_the_python_client(client: Any, twin: Any) -> None:
    review = k8s.AuthenticationV1Api(client).create_self_subject_review({})
    assert review.status.user_info.username == "sremarathon:agent"
    operator = k8s.AuthenticationV1Api(twin.operator_client()).create_self_subject_review({})
    assert operator.status.user_info.username == "sremarathon:operator"
