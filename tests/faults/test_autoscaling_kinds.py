"""The autoscaling fault kinds (faults/autoscaling.py) on a real twin running the shop: the
curated change reaches the HorizontalPodAutoscaler through the pipeline, the campaign's traffic
arrives, the service the broken autoscaler holds back saturates (alerts on it and its callers)
while every other service scales and keeps up; scaling the Deployment by hand or restarting its
pods is undone or changes nothing; reverting the change lets the autoscaler absorb the campaign."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.twins import AppTwin

from pytest_sremarathon.alerts.rules import high_error_rate, latency_slo_burn
from pytest_sremarathon.apps import load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import Fault, builtin_registry
from pytest_sremarathon.faults.autoscaling import AUTOSCALING_KINDS, AutoscalerFault
from pytest_sremarathon.faults.catalogue import CuratedChange, load_catalogue
from pytest_sremarathon.faults.infrastructure import utilisation
from pytest_sremarathon.k8s.objects import condition, pod_is_ready

SHOP = APPS_DIR / "shop"
REGISTRY = builtin_registry()
RULES = {"ServiceHighErrorRate": high_error_rate, "ServiceLatencySLOBurn": latency_slo_burn}


class ShopWorld(AppTwin):
    def __init__(self, tmp_path: Path) -> None:
        app = load_app(SHOP)
        super().__init__([app], tmp_path / "repos", start=EPOCH + timedelta(hours=14))
        self.app = app
        self.catalogue = {c.id: c for c in load_catalogue(SHOP)}

    def curated(self, app: str, change_id: str) -> CuratedChange:
        return self.catalogue[change_id]

    def alerting(self) -> set[tuple[str, str]]:
        return {(name, labels["service"]) for name, rule in RULES.items()
                for labels, _, _ in rule(self.cluster, self.apps) if "service" in labels}

    def replicas(self, service: str) -> int:
        d = self.store.get("Deployment", "shop", service) or self.store.get("StatefulSet", "shop", service)
        assert d is not None
        return int(d["spec"]["replicas"])

    def scale_by_hand(self, service: str, replicas: int) -> None:
        """What ``kubectl scale`` writes (the Deployment's spec.replicas)."""
        d = self.store.get("Deployment", "shop", service)
        assert d is not None
        d["spec"]["replicas"] = replicas
        self.store.touch(d, spec_changed=True)

    def hpa(self, service: str) -> dict[str, Any]:
        h = self.store.get("HorizontalPodAutoscaler", "shop", service)
        assert h is not None
        return h


def _warm(world: ShopWorld) -> None:
    world.tick(6)
    world.cluster.settled()
    world.tick(6)
    assert not world.alerting(), "the shop alerts before the fault"
    # On a normal afternoon no autoscaler moves: every service is at its Deployment's count.
    assert all(world.replicas(s) == world.app.services[s].replicas for s in world.app.services)


CASES = {"hpa-max-cut": "frontend-hpa-quota-cap", "hpa-wrong-target": "productcatalog-hpa-absolute-cpu"}


def test_every_autoscaling_kind_is_registered_and_has_a_shop_change() -> None:
    assert set(CASES) == {k.name for k in AUTOSCALING_KINDS}
    for name, change in CASES.items():
        kind = REGISTRY[name]
        assert kind.family == "change" and kind.repair and kind.judge and kind.component_form
        assert "Effects" in (type(kind).__doc__ or "") and "Repair" in (type(kind).__doc__ or "")
        curated = {c.id: c for c in load_catalogue(SHOP)}[change]
        assert curated.fault is not None and curated.fault.kind == name


@pytest.mark.parametrize("name", sorted(CASES))
def test_effects_wrong_repairs_and_revert(name: str, tmp_path: Path) -> None:
    world = ShopWorld(tmp_path)
    _warm(world)
    kind = REGISTRY[name]
    assert isinstance(kind, AutoscalerFault)
    change = world.catalogue[CASES[name]]
    assert change.fault is not None
    service = change.fault.service
    fault = Fault(id="F01", kind=name, family="change", app="shop", start=world.clock.now,
                  end=world.clock.now + timedelta(hours=2), params={"change": change.id})
    kind.inject(world, fault)
    fault.injected = True
    assert fault.component == f"service:shop/{service}" and fault.change and kind.in_head(world, fault)
    allowed = world.app.services[service].replicas if name == "hpa-wrong-target" else 3

    # 1. the effects: the campaign arrives; the held-back service saturates and alerts, the
    #    others grow within their autoscalers and keep below their limits
    seen: set[tuple[str, str]] = set()
    for _ in range(12):
        world.tick()
        seen |= world.alerting()
        assert not kind.mitigated(world, fault)
    assert world.replicas(service) == allowed
    assert utilisation(world, "shop", service, since=fault.start) > 0.85, "the held-back service is not saturated"
    assert {s for _, s in seen} & ({service} | world.app.callers_of(service)), f"no alert on {service}: {seen}"
    assert {("shop", s) for _, s in seen} <= fault.impact | {("shop", s) for s in world.app.services}
    others = [s for s in world.app.services if s != service and world.app.services[s].replicas >= 2]
    assert any(world.replicas(s) > world.app.services[s].replicas for s in others), "no other service scaled"
    hpa = world.hpa(service)
    if name == "hpa-max-cut":
        limited = condition(hpa, "ScalingLimited")
        assert limited is not None and limited["reason"] == "TooManyReplicas"
    else:
        assert hpa["status"]["desiredReplicas"] == allowed

    # 2. wrong repairs: scaling the Deployment by hand is undone by its autoscaler; restarting
    #    the pods changes nothing
    world.scale_by_hand(service, 2 * world.app.services[service].replicas)
    world.tick(2)
    assert world.replicas(service) == allowed, "the autoscaler did not set the size back"
    for p in [p for p in world.store.list("Pod", "shop") if p["metadata"]["labels"].get("app") == service]:
        world.store.delete("Pod", "shop", p["metadata"]["name"])
    for _ in range(6):
        world.tick()
        assert not kind.mitigated(world, fault)

    # 3. the documented repair: revert the change; the autoscaler absorbs the campaign
    world.pipelines.revert("shop", fault.change or "", "agent")
    assert not kind.in_head(world, fault)
    for _ in range(20):
        world.tick()
        if kind.mitigated(world, fault):
            break
    else:
        pytest.fail("not mitigated 20 ticks after the revert")
    assert world.replicas(service) > allowed
    for _ in range(8):
        world.tick()
        assert kind.mitigated(world, fault)
    assert sum(pod_is_ready(p) for p in world.store.list("Pod", "shop")
               if p["metadata"]["labels"].get("app") == service) == world.replicas(service)

    # the end of the window: the campaign ends, nothing is left to revert
    changes = len(world.pipelines.changes("shop"))
    kind.cleanup(world, fault)
    assert world.cluster.surge.get("shop", 1.0) == 1.0 and not world.cluster.network.cpu_overload_timeouts
    assert len(world.pipelines.changes("shop")) == changes


def test_the_schedule_draws_them_and_never_overlaps_a_campaign_with_a_surge() -> None:
    from pytest_sremarathon.builtin import SCENARIOS_DIR
    from pytest_sremarathon.scenario import load_scenario
    from pytest_sremarathon.schedule import generate

    scenario = load_scenario(SCENARIOS_DIR / "default.yaml")
    drawn = set()
    for seed in range(1, 9):
        faults = generate(scenario, REGISTRY, seed, EPOCH).faults
        ingress = [f for f in faults if f.kind in CASES or f.kind == "traffic-surge"]
        drawn |= {f.kind for f in ingress if f.kind in CASES}
        for a in ingress:
            for b in ingress:
                if a is not b and a.app == b.app:
                    assert a.end <= b.start or b.end <= a.start, f"seed {seed}: {a.kind} overlaps {b.kind}"
    assert drawn == set(CASES)
