"""Causal repair credit (SCORING.md §3): which recorded action put the cluster into the state a
mitigation condition reads.

End to end, real ``kubectl`` commands through the real API server and policy point leave a
``truth.effect`` exactly when they change what a condition can read. On a twin running the shop,
provenance follows a write through the deployment controller to the pods it creates, and a
fault healed by the orchestrator's own restart is never the agent's, however the agent touched
the objects before.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.cli import run_json
from support.kubectl import find_kubectl
from support.twins import AppTwin, default_app

from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import Fault, builtin_registry
from pytest_sremarathon.faults.infrastructure import rollout_restart
from pytest_sremarathon.provenance import Cause, EvidenceRef, Provenance

NS = "shop"


# --------------------------------------------------------------------------- end to end, kubectl

@pytest.mark.skipif(find_kubectl() is None, reason="needs a kubectl binary")
def test_only_writes_that_change_what_conditions_read_make_effects(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="10m", schedule={"faults": 0})
    result = run_json("--agent", "marathon_agents:KubectlTouches", "--scenario", str(scenario), "--out",
                      str(tmp_path / "runs"))
    events = list(open_bundle(result["bundle"]).events)
    step = next(e for e in events if e.type == "agent.step" and e.data["step"] == 1)
    assert all(r.startswith("0:") for r in step.data["report"]["notes"].split("|")), step.data["report"]["notes"]
    actions = [e.data for e in events if e.type == "action"]
    effects = {(e.data["action"], e.data["object"], e.data["aspect"]) for e in events if e.type == "truth.effect"}
    by_target = {}
    for a in actions:
        by_target.setdefault(a["target"].removeprefix("kube/").removeprefix("shop/"), []).append(a["id"])
    assert len(actions) == 8 and all(a["allowed"] for a in actions) and len({a["id"] for a in actions}) == 8
    annotate, no_op_patch, restart, set_env = by_target["deployments/cart"][0], by_target["deployments/cart"][1], \
        by_target["deployments/cart"][2], by_target["deployments/payment"][0]
    node = next(a["target"].split("/")[-1] for a in actions if a["target"].startswith("kube/nodes/"))
    label, cordon = by_target[f"nodes/{node}"]
    scale, same_count = by_target["deployments/frontend/scale"][0], by_target["deployments/ad/scale"][0]
    assert effects == {
        (restart, "Deployment/shop/cart", "template"),
        (scale, "Deployment/shop/frontend", "replicas"),
        (set_env, "Deployment/shop/payment", "template"),
        (cordon, f"Node/-/{node}", "unschedulable"),
    }
    assert not {annotate, no_op_patch, label, same_count} & {a for a, _, _ in effects}


# --------------------------------------------------------------------------- on the twin

class ShopTwin(AppTwin):
    """The shop on a two-zone twin, its pipeline and a provenance tracker (observing after
    every tick once it exists): the marathon's World with the agent's and the orchestrator's
    hands made explicit."""

    def __init__(self, repos: Path) -> None:
        super().__init__([default_app(NS)], repos, start=EPOCH + timedelta(hours=10))
        self.registry = builtin_registry()
        self.run(10)
        self.provenance = Provenance(self.store)
        self._actions = 0

    def after_tick(self, now: datetime) -> None:
        if hasattr(self, "provenance"):  # not during the warm-up
            self.provenance.observe()

    def agent(self, target: str, write) -> str:
        """One agent action: recorded (expected by provenance), then the write it makes."""
        self._actions += 1
        action = f"act-{self._actions:05d}"
        self.provenance.expect(Cause("agent", self.clock.now, action), target)
        write()
        self.provenance.observe(only="agent")
        return action

    def annotate(self, name: str) -> None:
        d = self.store.get("Deployment", NS, name)
        d["metadata"].setdefault("annotations", {})["touched"] = self.clock.now.isoformat()
        self.store.touch(d)

    def annotate_template(self, kind: str, name: str) -> None:
        """``kubectl rollout restart``'s write."""
        obj = self.store.get(kind, NS, name)
        obj["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})["restartedAt"] = "now"
        self.store.touch(obj, spec_changed=True)

    def pods(self, svc: str) -> list[dict[str, Any]]:
        return self.active_pods(NS, svc)

    def origin(self, pod: dict[str, Any]) -> Cause:
        cause = self.provenance.cause_of(EvidenceRef("Pod", NS, pod["metadata"]["name"], "origin"))
        assert cause is not None
        return cause


@pytest.fixture()
def twin(tmp_path: Path) -> ShopTwin:
    return ShopTwin(tmp_path / "repos")


def test_a_restart_is_followed_from_the_template_to_the_pods_it_creates(twin: ShopTwin) -> None:
    before = {p["metadata"]["name"] for p in twin.pods("cart")}
    action = twin.agent("kube/shop/deployments/cart", lambda: rollout_restart(twin, NS, "cart"))
    assert twin.provenance.cause_of(EvidenceRef("Deployment", NS, "cart", "template")).action == action
    twin.run(5)
    new = [p for p in twin.pods("cart") if p["metadata"]["name"] not in before]
    assert new and all(twin.origin(p).action == action for p in new)
    assert all(not twin.origin(p).by_agent for p in twin.pods("checkout"))  # untouched: the initial deploy
    assert [e.aspect for e in twin.provenance.drain_effects()] == ["template"]


def test_metadata_touches_cause_nothing(twin: ShopTwin) -> None:
    twin.agent("kube/shop/deployments/cart", lambda: twin.annotate("cart"))
    for aspect in ("template", "replicas", "resources"):
        assert not twin.provenance.cause_of(EvidenceRef("Deployment", NS, "cart", aspect)).by_agent
    assert twin.provenance.drain_effects() == []


def test_an_autoscalers_rescale_right_after_an_agents_touch_is_not_the_agents(twin: ShopTwin) -> None:
    """The adversary annotates every Deployment every step: a rescale its HPA makes in the next
    tick is the autoscaler's, not the touch's (a sprayer must not earn replica repairs)."""
    hpa = twin.store.get("HorizontalPodAutoscaler", NS, "frontend")
    assert hpa is not None, "the shop autoscales its storefront"
    before = twin.store.get("Deployment", NS, "frontend")["spec"]["replicas"]
    twin.agent("kube/shop/deployments/frontend", lambda: twin.annotate("frontend"))
    hpa["spec"]["minReplicas"] = hpa["spec"]["maxReplicas"] = before + 1  # the orchestrator's hand
    twin.store.touch(hpa, spec_changed=True)
    twin.provenance.observe(only="orchestrator")
    twin.run(1)
    assert twin.store.get("Deployment", NS, "frontend")["spec"]["replicas"] == before + 1  # the HPA acted
    assert not twin.provenance.cause_of(EvidenceRef("Deployment", NS, "frontend", "replicas")).by_agent
    assert twin.provenance.drain_effects() == []


def test_the_replacement_of_a_pod_the_agent_deleted_is_the_agents(twin: ShopTwin) -> None:
    pod = twin.pods("cart")[0]["metadata"]["name"]
    action = twin.agent(f"kube/shop/pods/{pod}", lambda: twin.store.delete("Pod", NS, pod))
    twin.run(1)
    replacements = [p for p in twin.pods("cart") if twin.origin(p).by_agent]
    assert [twin.origin(p).action for p in replacements] == [action]


def credential_fault(twin: ShopTwin) -> Fault:
    kind = twin.registry["dependency-credential-expired"]
    now = twin.clock.now
    fault = Fault(id="F01", kind=kind.name, family=kind.family, app=NS, start=now, end=now + timedelta(hours=1),
                  params={"datastore": "cart-cache"})
    kind.inject(twin, fault)
    fault.injected = True
    twin.run(2)
    assert not kind.mitigated(twin, fault)
    return fault


def healed_by(twin: ShopTwin, fault: Fault):
    kind = twin.registry[fault.kind]
    for _ in range(20):
        twin.run(0.5)
        if kind.mitigated(twin, fault):
            return twin.provenance.attribute(kind.evidence(twin, fault), since=fault.start)
    pytest.fail("the restart did not mitigate the rotated credential")


def test_a_fault_healed_by_the_orchestrators_restart_is_not_the_agents(twin: ShopTwin) -> None:
    """The issue's case: the agent only annotates, an unrelated roll picks up the new password."""
    fault = credential_fault(twin)
    twin.agent("kube/shop/deployments/cart", lambda: twin.annotate("cart"))
    rollout_restart(twin, NS, "cart")  # the orchestrator's hand: no recorded agent action
    twin.provenance.observe(only="orchestrator")
    assert healed_by(twin, fault).by == "orchestrator"


def test_the_agents_restart_of_the_clients_is_credited_with_its_action(twin: ShopTwin) -> None:
    fault = credential_fault(twin)
    action = twin.agent("kube/shop/deployments/cart", lambda: rollout_restart(twin, NS, "cart"))
    a = healed_by(twin, fault)
    assert a.by == "agent" and a.actions == (action,)
    assert "Deployment/shop/cart#template" in a.evidence


def test_an_agent_write_older_than_the_fault_earns_nothing(twin: ShopTwin) -> None:
    before = twin.clock.now
    twin.agent("kube/shop/deployments/cart", lambda: rollout_restart(twin, NS, "cart"))
    twin.run(3)
    evidence = twin.registry["dependency-credential-expired"].evidence(
        twin, Fault(id="F01", kind="dependency-credential-expired", family="dependency", app=NS, start=twin.clock.now,
                    end=twin.clock.now, params={"datastore": "cart-cache"}))
    assert twin.provenance.attribute(evidence, since=before).by == "agent"
    assert twin.provenance.attribute(evidence, since=twin.clock.now).by == "orchestrator"


def test_a_claim_expansion_and_a_statefulset_restart_are_the_agents(twin: ShopTwin) -> None:
    """The storage repairs a judge reads: a claim's requested size, a StatefulSet's template."""
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "kv", "namespace": NS},
           "spec": {"replicas": 1, "serviceName": "kv", "selector": {"matchLabels": {"app": "kv"}},
                    "template": {"metadata": {"labels": {"app": "kv"}},
                                 "spec": {"containers": [{"name": "redis", "image": "redis:7.2-alpine"}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}
    twin.cluster.apply(sts)
    twin.run(2)
    twin.provenance.observe(only="orchestrator")
    size = EvidenceRef("PersistentVolumeClaim", NS, "data-kv-0", "size")
    assert not twin.provenance.cause_of(size).by_agent

    def expand() -> None:
        claim = twin.store.get("PersistentVolumeClaim", NS, "data-kv-0")
        claim["spec"]["resources"]["requests"]["storage"] = "2Gi"
        twin.store.touch(claim)

    action = twin.agent("kube/shop/persistentvolumeclaims/data-kv-0", expand)
    assert twin.provenance.cause_of(size).action == action
    restart = twin.agent("kube/shop/statefulsets/kv", lambda: twin.annotate_template("StatefulSet", "kv"))
    assert twin.provenance.cause_of(EvidenceRef("StatefulSet", NS, "kv", "template")).action == restart
    assert [e.aspect for e in twin.provenance.drain_effects()] == ["size", "template"]
