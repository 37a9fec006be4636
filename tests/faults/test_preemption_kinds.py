"""priority-preemption (faults/preemption.py) on a real twin running the default scenario's
three apps: the change moves the shop's email workers below the batch tier through the
pipeline; the nightly batch fills the cluster and the scheduler preempts exactly the email
pods (``Preempted``, ``DisruptionTarget``), whose replacements stay Pending while checkout's
orders fail; another app's pod that needs room preempts a batch worker, never a service; only
moving email back out of the class (the revert) brings it back."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.twins import AppTwin, default_app

from pytest_sremarathon.alerts.rules import high_error_rate
from pytest_sremarathon.builtin import APPS_DIR, SCENARIOS_DIR
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import Fault, builtin_registry
from pytest_sremarathon.faults.catalogue import CuratedChange, load_catalogue
from pytest_sremarathon.faults.preemption import BATCH_NAMESPACE, BATCH_PRIORITY, PriorityPreemption
from pytest_sremarathon.k8s.objects import condition, pod_is_active, pod_is_ready
from pytest_sremarathon.scenario import load_scenario
from pytest_sremarathon.schedule import generate

CHANGE = "email-best-effort-priority"
REGISTRY = builtin_registry()


class ThreeApps(AppTwin):
    def __init__(self, tmp_path: Path) -> None:
        super().__init__([default_app(n) for n in ("shop", "hotel", "social")], tmp_path / "repos",
                         start=EPOCH + timedelta(hours=14))
        self.catalogue = {c.id: c for c in load_catalogue(APPS_DIR / "shop")}

    def curated(self, app: str, change_id: str) -> CuratedChange:
        return self.catalogue[change_id]

    def pods(self, ns: str, app: str) -> list[dict[str, Any]]:
        return [p for p in self.store.list("Pod", ns) if pod_is_active(p)
                and (p["metadata"].get("labels") or {}).get("app") == app]

    def email_ready(self) -> int:
        return sum(1 for p in self.pods("shop", "email") if pod_is_ready(p))

    def preempted(self) -> list[tuple[str, str]]:
        return sorted((e["involvedObject"]["namespace"], e["involvedObject"]["name"])
                      for e in self.store.list("Event") if e["reason"] == "Preempted")

    def erroring(self) -> set[str]:
        return {labels["service"] for labels, _, _ in high_error_rate(self.cluster, self.apps)
                if labels.get("namespace", "shop") == "shop" and "service" in labels}


def _start(tmp_path: Path) -> tuple[ThreeApps, PriorityPreemption, Fault]:
    world = ThreeApps(tmp_path)
    world.tick(6)
    world.cluster.settled()
    world.tick(4)
    assert not world.preempted() and world.email_ready() == 2
    kind = builtin_registry()["priority-preemption"]  # a kind keeps what it did per fault id: a fresh one
    assert isinstance(kind, PriorityPreemption)
    fault = Fault(id="F01", kind=kind.name, family="change", app="shop", start=world.clock.now,
                  end=world.clock.now + timedelta(hours=1), params={"change": CHANGE})
    kind.inject(world, fault)
    for _ in range(12):  # as the marathon asks every tick until the change is live
        if kind.active(world, fault):
            break
        world.tick()
    else:
        raise AssertionError("the batch never arrived")
    fault.injected = True
    assert fault.component == "service:shop/email" and fault.change and kind.in_head(world, fault)
    assert fault.impact == {("shop", "email"), ("shop", "checkout"), ("shop", "frontend")}
    return world, kind, fault


def test_registered_in_the_catalogue_and_drawn_by_the_default_schedule() -> None:
    kind = REGISTRY["priority-preemption"]
    assert kind.family == "change" and kind.component_form == "service:<app>/<service>"
    assert kind.arrives and kind.repair and kind.judge
    assert "Effects" in (type(kind).__doc__ or "") and "Repair" in (type(kind).__doc__ or "")
    tag = {c.id: c for c in load_catalogue(APPS_DIR / "shop")}[CHANGE].fault
    assert tag is not None and tag.kind == "priority-preemption" and tag.service == "email"
    scenario = load_scenario(SCENARIOS_DIR / "default.yaml")
    assert any(f.kind == "priority-preemption" for seed in range(1, 6)
               for f in generate(scenario, REGISTRY, seed, EPOCH).faults)


def test_the_batch_preempts_the_service_and_only_it(tmp_path: Path) -> None:
    world, kind, fault = _start(tmp_path)
    seen: set[str] = set()
    for _ in range(10):
        world.tick()
        seen |= world.erroring()
        assert not kind.mitigated(world, fault)
    # the scheduler preempted the email pods, and nothing else but batch workers (yielding to a
    # service's pod that needs room: a CronJob's run)
    victims = [v for v in world.preempted() if v[0] != BATCH_NAMESPACE]
    assert victims and {ns for ns, _ in victims} == {"shop"}
    assert all(name.startswith("email-") for _, name in victims)
    assert set(victims) == kind.victims(world, fault)
    # what a pod watch (``kubectl get pods -w``) receives of each victim as it goes: the
    # DisruptionTarget condition
    deleted = {e.name: json.loads(e.body) for e in world.store.changes_since(0, ["Pod"]) if e.type == "DELETED"}
    for _, name in victims:
        target = condition(deleted[name], "DisruptionTarget")
        assert target is not None and target["reason"] == "PreemptionByScheduler"
    # the batch runs on every node; the email replacements are Pending, unschedulable
    batch = [p for p in world.store.list("Pod", BATCH_NAMESPACE) if pod_is_active(p)]
    assert len({p["spec"].get("nodeName") for p in batch}) == 4
    assert all(p["spec"].get("nodeName") and p["spec"]["priority"] == BATCH_PRIORITY for p in batch)
    email = world.pods("shop", "email")
    assert email and all(not p["spec"].get("nodeName") for p in email) and world.email_ready() == 0
    for p in email:
        scheduled = condition(p, "PodScheduled")
        assert scheduled is not None and scheduled["reason"] == "Unschedulable"
        assert "Insufficient cpu" in scheduled["message"]
    assert any(e["reason"] == "FailedScheduling" and e["involvedObject"]["name"] == email[0]["metadata"]["name"]
               for e in world.store.list("Event"))
    # no pod of any other service is pending; checkout's orders fail
    pending = {(p["metadata"]["namespace"], p["metadata"]["labels"].get("app")) for p in world.store.list("Pod")
               if pod_is_active(p) and not p["spec"].get("nodeName")}
    assert pending == {("shop", "email")}
    assert "checkout" in seen, f"no error alert on email's caller: {seen}"

    # another app's pod that needs room preempts a batch worker, never a service's pod
    search = world.store.get("Deployment", "hotel", "search")
    assert search is not None
    search["spec"]["replicas"] = int(search["spec"]["replicas"]) + 1
    world.store.touch(search, spec_changed=True)
    world.tick(3)
    assert all(p["spec"].get("nodeName") for p in world.pods("hotel", "search"))
    new = sorted(set(world.preempted()) - set(victims))
    assert new and all(ns == BATCH_NAMESPACE for ns, _ in new)


def test_wrong_repairs_do_not_count(tmp_path: Path) -> None:
    world, kind, fault = _start(tmp_path)
    world.tick(3)
    assert world.email_ready() == 0

    def still_broken(ticks: int = 4) -> None:
        for _ in range(ticks):
            world.tick()
            assert not kind.mitigated(world, fault)
        assert world.email_ready() == 0

    # deleting the pending pods: the ReplicaSet recreates them at the same class
    for p in world.pods("shop", "email"):
        world.store.delete("Pod", "shop", p["metadata"]["name"])
    still_broken()
    # a rollout restart: new pods, same template class
    d = world.store.get("Deployment", "shop", "email")
    assert d is not None
    d["spec"]["template"]["metadata"].setdefault("annotations", {})["kubectl.kubernetes.io/restartedAt"] = "now"
    world.store.touch(d, spec_changed=True)
    still_broken()
    # scaling the victim up: more Pending pods
    d = world.store.get("Deployment", "shop", "email")
    assert d is not None
    d["spec"]["replicas"] = 4
    world.store.touch(d, spec_changed=True)
    still_broken()
    # deleting the batch's pods by hand: their Deployments recreate them, above the service
    for p in [p for p in world.store.list("Pod", BATCH_NAMESPACE) if pod_is_active(p)]:
        world.store.delete("Pod", BATCH_NAMESPACE, p["metadata"]["name"])
    still_broken()
    assert len({p["spec"]["nodeName"] for p in world.store.list("Pod", BATCH_NAMESPACE)
                if pod_is_active(p) and p["spec"].get("nodeName")}) == 4
    # deleting the other tenant's batch outright: email runs again, still below the batch tier
    # (the next crunch preempts it again): the cause is live, so no repair
    for d in world.store.list("Deployment", BATCH_NAMESPACE):
        world.store.delete("Deployment", BATCH_NAMESPACE, d["metadata"]["name"])
    world.tick(4)
    assert world.email_ready() >= 2 and not kind.mitigated(world, fault)


def test_reverting_the_change_mitigates_and_cleanup_removes_the_batch(tmp_path: Path) -> None:
    world, kind, fault = _start(tmp_path)
    world.tick(3)
    assert world.email_ready() == 0
    world.pipelines.revert("shop", fault.change or "", "agent")
    assert not kind.in_head(world, fault)
    for _ in range(20):
        world.tick()
        if kind.mitigated(world, fault):
            break
    else:
        pytest.fail("not mitigated 20 ticks after the revert")
    for _ in range(4):
        world.tick()
        assert kind.mitigated(world, fault)
    email = world.pods("shop", "email")
    assert world.email_ready() == 2 and all(p["spec"]["priority"] == 0 for p in email)
    # the email pods at the default priority took their room back from the batch
    assert any(ns == BATCH_NAMESPACE for ns, _ in world.preempted())
    kind.cleanup(world, fault)
    world.tick(2)
    assert not [p for p in world.store.list("Pod", BATCH_NAMESPACE) if pod_is_active(p)]


# -- as a user meets it: the real kubectl against the running twin -------------------------------
class SimWorld:
    """The parts of a marathon the kind acts on, over the running twin backend."""

    def __init__(self, sim: Any) -> None:
        self.cluster, self.pipelines = sim.cluster, sim.backend.pipelines
        self.apps = {a: default_app(a) for a in ("shop", "hotel", "social")}
        self.catalogue = {c.id: c for c in load_catalogue(APPS_DIR / "shop")}

    def curated(self, app: str, change_id: str) -> CuratedChange:
        return self.catalogue[change_id]


def test_kubectl_shows_the_preemption_and_a_live_fix_mitigates(tmp_path: Path) -> None:
    from support.kubectl import kubectl_for
    from support.twins import AgentSimulation

    sim = AgentSimulation(tmp_path, "sim-agent-token")
    try:
        kc = kubectl_for(sim.kubeconfig, tmp_path / "cache")
        world = SimWorld(sim)
        kind = builtin_registry()["priority-preemption"]
        assert isinstance(kind, PriorityPreemption)
        fault = Fault(id="F01", kind=kind.name, family="change", app="shop", start=sim.clock.now,
                      end=sim.clock.now + timedelta(hours=1), params={"change": CHANGE})
        kind.inject(world, fault)
        for _ in range(12):
            if kind.active(world, fault):
                break
            sim.run(30)
        else:
            raise AssertionError("the batch never arrived")
        sim.run(90)
        classes = {r.split()[0]: r.split()[1] for r in kc("get", "pc").splitlines()[1:]}
        assert classes["shop-best-effort"] == "-100" and classes["batch-preemptible"] == "-10"
        events = kc.json("get", "events", "-A", "--field-selector=reason=Preempted")["items"]
        # (a CronJob's run preempts a few batch workers: the batch yielding to a service)
        assert events and {(e["involvedObject"]["namespace"], e["involvedObject"]["name"].split("-")[0])
                           for e in events if e["involvedObject"]["namespace"] != BATCH_NAMESPACE} == {("shop", "email")}
        rows = kc("get", "pods", "-n", "shop", "-l", "app=email", "--no-headers").splitlines()
        assert rows and all(r.split()[2] == "Pending" for r in rows)
        described = kc("describe", "pods", "-n", "shop", "-l", "app=email")
        assert "FailedScheduling" in described and "Insufficient cpu" in described
        batch = kc("get", "pods", "-n", BATCH_NAMESPACE, "-o", "wide", "--no-headers").splitlines()
        assert len({r.split()[6] for r in batch if r.split()[2] == "Running"}) == 4
        # wrong: a rollout restart brings new pods at the same class
        kc("rollout", "restart", "deployment/email", "-n", "shop")
        sim.run(90)
        assert not kind.mitigated(world, fault)
        # the fix on the live object: the service back at the default priority
        kc("patch", "deployment", "email", "-n", "shop", "--type=json",
           "-p", '[{"op": "remove", "path": "/spec/template/spec/priorityClassName"}]')
        for _ in range(20):
            sim.run(30)
            if kind.mitigated(world, fault):
                break
        else:
            pytest.fail("not mitigated after the live fix")
        rows = kc("get", "pods", "-n", "shop", "-l", "app=email", "--no-headers").splitlines()
        assert any(r.split()[1] == "1/1" and r.split()[2] == "Running" for r in rows)
    finally:
        sim.close()
