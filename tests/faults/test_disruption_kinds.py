"""pdb-blocks-drain (faults/disruption.py) on a real twin running the shop: the budget change
arrives through the pipeline, the host maintenance drains every pod but the budgeted service's,
the host retires with it (the service's requests fail), and only a budget that allows a
disruption (the revert) lets the drain finish in time."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from support.twins import AppTwin

from pytest_sremarathon.alerts.rules import high_error_rate, latency_slo_burn, pods_not_ready
from pytest_sremarathon.apps import load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import Fault, builtin_registry
from pytest_sremarathon.faults.catalogue import CuratedChange, load_catalogue
from pytest_sremarathon.faults.disruption import MAINTENANCE_NOTICE, PdbBlocksDrain
from pytest_sremarathon.k8s.objects import pod_is_active
from pytest_sremarathon.twin.daemonsets import is_daemon_pod
from pytest_sremarathon.twin.disruption import EVICTION_REFUSED

SHOP = APPS_DIR / "shop"
RULES = {"ServiceHighErrorRate": high_error_rate, "ServiceLatencySLOBurn": latency_slo_burn,
         "KubePodNotReady": pods_not_ready}
CHANGE = "checkout-pdb-keep-both"


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

    def on(self, node: str, service: str = "") -> list[dict[str, Any]]:
        # The node's DaemonSet pods (node-log-shipper) stay through a drain, as on a real cluster.
        return [p for p in self.store.list("Pod") if p["spec"].get("nodeName") == node and pod_is_active(p)
                and not is_daemon_pod(p)
                and (not service or p["metadata"]["labels"].get("app") == service)]

    def node_events(self, node: str, reason: str) -> list[str]:
        return [e["message"] for e in self.store.list("Event")
                if e["involvedObject"]["name"] == node and e["reason"] == reason]


def _start(tmp_path: Path) -> tuple[ShopWorld, PdbBlocksDrain, Fault, str]:
    world = ShopWorld(tmp_path)
    world.tick(6)
    world.cluster.settled()
    world.tick(4)
    kind = builtin_registry()["pdb-blocks-drain"]
    assert isinstance(kind, PdbBlocksDrain)
    fault = Fault(id="F01", kind=kind.name, family="change", app="shop", start=world.clock.now,
                  end=world.clock.now + timedelta(hours=1), params={"change": CHANGE})
    kind.inject(world, fault)
    for _ in range(4):  # as the marathon asks every tick until the change is live
        if kind.active(world, fault):
            break
        world.tick()
    else:
        raise AssertionError("the maintenance never started")
    fault.injected = True
    assert fault.component == "service:shop/checkout" and len(fault.nodes) == 1
    node = next(iter(fault.nodes))
    assert world.on(node, "checkout")
    return world, kind, fault, node


def test_the_drain_is_blocked_and_the_host_retires_with_the_pod(tmp_path: Path) -> None:
    world, kind, fault, node = _start(tmp_path)
    world.tick(2)
    assert world.store.get("Node", None, node)["spec"].get("unschedulable") is True
    assert [p["metadata"]["labels"]["app"] for p in world.on(node)] == ["checkout"]  # the rest moved
    blocked = world.node_events(node, "FailedDraining")
    assert blocked and EVICTION_REFUSED in blocked[0] and "shop/checkout-" in blocked[0]
    pdb = world.store.get("PodDisruptionBudget", "shop", "checkout")
    assert pdb is not None and pdb["status"]["disruptionsAllowed"] == 0
    assert not kind.mitigated(world, fault)
    seen: set[tuple[str, str]] = set()
    for _ in range(int(MAINTENANCE_NOTICE.total_seconds() // 30) + 6):
        world.tick()
        seen |= world.alerting()
        assert not kind.mitigated(world, fault)
    assert world.cluster.network.node_up[node] is False and world.node_events(node, "HostRetired")
    assert {s for _, s in seen} & {"checkout", "frontend"}, f"no symptom of the lost pod: {seen}"
    assert {("shop", s) for _, s in seen} <= fault.impact | {("shop", "checkout")}
    kind.cleanup(world, fault)
    assert world.cluster.network.node_up[node] is True
    assert not world.store.get("Node", None, node)["spec"].get("unschedulable")
    assert not kind.in_head(world, fault)


def test_dodging_the_budget_is_no_repair(tmp_path: Path) -> None:
    world, kind, fault, node = _start(tmp_path)
    world.tick(2)
    # Wrong: uncordon the node. The drainer cordons it again; the pod still cannot go.
    n = world.store.get("Node", None, node)
    del n["spec"]["unschedulable"]
    world.store.touch(n, spec_changed=True)
    for _ in range(3):
        world.tick()
        assert not kind.mitigated(world, fault)
    assert world.store.get("Node", None, node)["spec"].get("unschedulable") is True and world.on(node, "checkout")
    # Wrong: delete the pod by hand. It comes back elsewhere, but the budget still blocks the
    # next drain: not a repair.
    for p in world.on(node, "checkout"):
        world.store.delete("Pod", "shop", p["metadata"]["name"])
    for _ in range(4):
        world.tick()
        assert not kind.mitigated(world, fault)
    assert not world.on(node, "checkout")
    assert world.store.get("PodDisruptionBudget", "shop", "checkout")["spec"].get("minAvailable") == 2


def test_the_revert_lets_the_drain_finish_before_the_deadline(tmp_path: Path) -> None:
    world, kind, fault, node = _start(tmp_path)
    world.tick(2)
    assert world.on(node, "checkout")
    world.pipelines.revert("shop", fault.change or "", "agent")
    for _ in range(10):
        world.tick()
        if kind.mitigated(world, fault):
            break
    else:
        raise AssertionError("not mitigated 10 ticks after the revert")
    assert not world.on(node) and world.cluster.network.node_up[node] is True  # drained before the deadline
    for _ in range(int(MAINTENANCE_NOTICE.total_seconds() // 30)):
        world.tick()
        assert kind.mitigated(world, fault)
    assert world.cluster.network.node_up[node] is False  # the host retired, empty
    assert not (world.alerting() & {("KubePodNotReady", "checkout"), ("ServiceHighErrorRate", "checkout")})
