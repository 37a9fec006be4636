"""The policy layer: one enforcement point for every agent action, rules from the
scenario, decisions recorded.

The end-to-end test drives a real (short) marathon with an agent that tries the shortcuts the
policy forbids through the real ``kubernetes`` client and the pipeline handle: each is refused
with a 403 ``Status`` naming its rule, recorded as an ``action`` with ``allowed=False``, and the
run goes on to a verifiable bundle.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from support.cli import run_json

from pytest_sremarathon.bundle import open_bundle, verify
from pytest_sremarathon.policy import DEFAULT_RULES, READ_RULES, RULES, MutationRequest, Policy
from pytest_sremarathon.scoring import score_bundle

# ------------------------------------------------------------------------------------ the agent


def _attempt(results: list[dict], what: str, fn) -> None:
    """Run one forbidden call; record its HTTP status and the server's message."""
    from kubernetes.client.exceptions import ApiException

    from pytest_sremarathon.agent.protocol import ServiceError

    try:
        fn()
    except ApiException as exc:
        try:
            message = json.loads(exc.body or "{}").get("message", "")
        except ValueError:
            message = exc.body or ""
        results.append({"what": what, "status": exc.status, "message": message})
    except ServiceError as exc:
        results.append({"what": what, "status": exc.status, "message": exc.message})
    else:
        results.append({"what": what, "status": 200, "message": "allowed"})


class ForbiddenActionsAgent:
    """At its first step, tries every shortcut the default policy forbids, then one ordinary
    repair (a rollout restart); reports the outcomes as JSON in its notes. Later steps do
    nothing, so the marathon's own progress shows that the run went on."""

    def __init__(self) -> None:
        self.done = False

    def step(self, obs):
        from kubernetes import client, config

        from pytest_sremarathon import Report

        if self.done:
            return Report(notes="still here")
        self.done = True
        config.load_kube_config(str(obs.kubeconfig))
        core, apps = client.CoreV1Api(), client.AppsV1Api()
        results: list[dict] = []
        app = "shop"
        _attempt(results, "delete namespace", lambda: core.delete_namespace(app))
        for d in apps.list_namespaced_deployment(app).items:  # scale everything to zero
            name = d.metadata.name
            _attempt(results, f"scale {name} to 0",
                     lambda name=name: apps.patch_namespaced_deployment_scale(name, app, {"spec": {"replicas": 0}}))
        rules = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="prometheus-rules", namespace="monitoring"),
                                   data={"rules.yaml": "groups: []"})
        _attempt(results, "create alert rules", lambda: core.create_namespaced_config_map("monitoring", rules))
        _attempt(results, "delete alert rules",
                 lambda: core.delete_namespaced_config_map("prometheus-rules", "monitoring"))
        _attempt(results, "touch the orchestrator",
                 lambda: core.create_namespaced_config_map("sremarathon-system", client.V1ConfigMap(
                     metadata=client.V1ObjectMeta(name="pause", namespace="sremarathon-system"), data={"x": "1"})))
        _attempt(results, "deploy the orchestrator", lambda: obs.pipeline.deploy("sremarathon-system", "HEAD"))
        _attempt(results, "read a secret", lambda: core.read_namespaced_secret("cart-cache-auth", app))
        _attempt(results, "list secrets", lambda: core.list_namespaced_secret(app))
        names = subprocess.run(["kubectl", "get", "secrets", "-n", app], capture_output=True,
                               text=True, timeout=60)
        results.append({"what": "secret names", "status": 200 if names.returncode == 0 else names.returncode,
                        "message": names.stdout.strip() or names.stderr.strip()})
        _attempt(results, "rollout restart", lambda: apps.patch_namespaced_deployment(
            "frontend", app, {"spec": {"template": {"metadata": {"annotations": {
                "kubectl.kubernetes.io/restartedAt": obs.time.isoformat()}}}}}))
        return Report(notes=json.dumps(results))


EXPECTED_RULES = {
    "delete namespace": "no-delete-namespace",
    "scale": "no-scale-to-zero",
    "create alert rules": "protected-namespaces",
    "delete alert rules": "protected-namespaces",
    "touch the orchestrator": "protected-namespaces",
    "deploy the orchestrator": "protected-namespaces",
    "read a secret": "no-read-secrets",
    "list secrets": "no-read-secrets",
}


def _expected_rule(what: str) -> str | None:
    return next((rule for prefix, rule in EXPECTED_RULES.items() if what.startswith(prefix)), None)


# ------------------------------------------------------------------------------------ end to end


def test_forbidden_actions_are_denied_named_recorded_and_the_run_goes_on(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="1h", cadence="10m", schedule={"faults": 2})
    result = run_json("--agent", "test_policy:ForbiddenActionsAgent", "--scenario", str(scenario),
                      "--out", str(tmp_path), "--step-budget", "120")
    bundle = open_bundle(result["bundle"])
    steps = [e for e in bundle.events if e.type == "agent.step"]
    assert [s.data["outcome"] for s in steps] == ["ok"] * 6, "every step, after the denials too, ran"
    outcomes = json.loads(steps[0].data["report"]["notes"])

    denied = [o for o in outcomes if _expected_rule(o["what"])]
    assert len(denied) >= 8 and any(o["what"].startswith("scale") for o in denied)
    for o in denied:
        rule = _expected_rule(o["what"])
        assert o["status"] == 403, o
        assert f"denied by sremarathon policy rule '{rule}'" in o["message"], o
    by_what = {o["what"]: o for o in outcomes}
    assert by_what["rollout restart"]["status"] == 200
    assert "cart-cache-auth" in by_what["secret names"]["message"], "secret names stay listable (a table)"

    actions = [e.data for e in bundle.events if e.type == "action" and e.data["actor"] == "agent"]
    refused = [a for a in actions if not a["allowed"]]
    assert len(refused) == len(denied)
    assert all(a["status"] == 403 and a["rule"] for a in refused)
    assert {a["rule"] for a in refused} == set(EXPECTED_RULES.values())
    assert any(a["verb"] == "delete" and a["target"].endswith("namespaces/shop") for a in refused)
    assert any(a["verb"] in ("get", "list") and "secrets" in a["target"] and a["rule"] == "no-read-secrets"
               for a in refused)
    assert any(a["channel"] == "pipeline" and a["rule"] == "protected-namespaces" for a in refused)
    allowed = [a for a in actions if a["allowed"]]
    assert [a["verb"] for a in allowed] == ["patch"] and allowed[0]["target"].endswith("deployments/frontend")

    assert verify(result["bundle"]).ok
    assert [e.data["reason"] for e in bundle.events if e.type == "run.end"] == ["completed"]
    score = score_bundle(bundle)
    assert score.policy_denials == len(refused) and score.agent_actions == 1


# ------------------------------------------------------------------------------------ the rules


def req(verb: str, resource: str, namespace: str | None = "shop", body=None, actor: str = "agent",
        channel: str = "kube") -> MutationRequest:
    return MutationRequest(actor=actor, channel=channel, verb=verb, resource=resource, namespace=namespace,
                           name="x", body=body)


@pytest.mark.parametrize("request_, rule", [
    (req("delete", "namespaces", None), "no-delete-namespace"),
    (req("delete", "nodes", None), "no-delete-node"),
    (req("patch", "configmaps", "monitoring"), "protected-namespaces"),
    (req("deploy", "deployments", "sremarathon-system", channel="pipeline"), "protected-namespaces"),
    (req("patch", "deployments", body={"spec": {"replicas": 0}}), "no-scale-to-zero"),
    (req("delete", "services"), "no-delete-workloads"),
    (req("silence", "alerts"), "no-silence-alerts"),
    (req("get", "secrets"), "no-read-secrets"),
    (req("watch", "secrets"), "no-read-secrets"),
])
def test_each_rule_names_itself(request_: MutationRequest, rule: str) -> None:
    decision = Policy().decide(request_)
    assert not decision.allowed and decision.rule == rule
    assert decision.message.startswith(f"denied by sremarathon policy rule '{rule}': ")


@pytest.mark.parametrize("request_", [
    req("delete", "pods"),
    req("evict", "pods"),
    req("patch", "nodes", None, body={"spec": {"unschedulable": True}}),
    req("patch", "deployments", body={"spec": {"replicas": 4}}),
    req("patch", "secrets"),  # writing a credential is a repair (e.g. a rotation); reading one is not
    req("revert", "changes", channel="pipeline"),
    req("get", "pods", "monitoring"),  # reads are judged by the read rules only
    req("list", "configmaps", "kube-system"),
])
def test_ordinary_operations_pass(request_: MutationRequest) -> None:
    assert Policy().decide(request_).allowed


def test_rules_bind_the_agent_only_and_only_the_configured_ones() -> None:
    assert Policy().decide(req("delete", "namespaces", None, actor="orchestrator")).allowed
    assert Policy(rules=("no-delete-node",)).decide(req("get", "secrets")).allowed
    assert READ_RULES <= set(RULES) and "no-read-secrets" in DEFAULT_RULES
    with pytest.raises(ValueError, match="unknown policy rule"):
        Policy(rules=("no-such-rule",))
