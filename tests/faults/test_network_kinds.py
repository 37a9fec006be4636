"""The network and admission fault kinds (faults/network.py) against the blunt and wrong
repairs an agent is tempted by: deleting every NetworkPolicy, opening the callee to everyone,
restarting the blocked caller, deleting or raising the quota, deleting the LimitRange. Each
ends (or not) the symptoms, but none is the documented repair: the judge must stay false —
while an equivalent hand fix on the live object is credited. (The effect test, the benign
rollback and restart wrong repairs and the documented revert run for these kinds' shop changes
in test_change_kinds.py's ``test_fault_effects_and_mitigation``.)"""

from __future__ import annotations

import copy
from pathlib import Path

from test_change_kinds import TwinWorld, _hold, _inject, _restart_pods, _until_mitigated, _warm

from pytest_sremarathon.faults import Fault
from pytest_sremarathon.faults.change import ChangeFault
from pytest_sremarathon.k8s.objects import condition, pod_is_ready


def _checkout_calls(world: TwinWorld) -> list[str]:
    """The status codes of this tick's sampled calls into checkout."""
    return [k[4] for k in world.cluster.traffic.samples if k[:2] == ("shop", "checkout")]


def _netpol_world(tmp_path: Path) -> tuple[TwinWorld, ChangeFault, Fault]:
    world = TwinWorld(tmp_path)
    _warm(world)
    kind, fault = _inject(world, world.catalogue["cart-ingress-storefront-only"])
    for _ in range(10):
        world.tick()
        if "cart: HTTP 504: deadline exceeded" in world.logs("checkout"):
            break
    assert not kind.mitigated(world, fault)
    assert fault.impact == {("shop", "checkout"), ("shop", "frontend")}  # not cart: it sees nothing
    return world, kind, fault


def test_networkpolicy_restarting_either_side_is_no_repair(tmp_path: Path) -> None:
    world, kind, fault = _netpol_world(tmp_path)
    _restart_pods(world, "checkout")
    _restart_pods(world, "cart")
    _hold(world, kind, fault, False, 6, "after restarting the caller and the callee")


def test_networkpolicy_deleting_every_policy_ends_symptoms_but_is_not_credited(tmp_path: Path) -> None:
    world, kind, fault = _netpol_world(tmp_path)
    for p in world.store.list("NetworkPolicy", "shop"):
        world.store.delete("NetworkPolicy", "shop", p["metadata"]["name"])
    world.tick(2)
    assert _checkout_calls(world) and all(code == "200" for code in _checkout_calls(world))  # symptoms gone
    _hold(world, kind, fault, False, 6, "after deleting every NetworkPolicy of the namespace")


def test_networkpolicy_opening_the_callee_to_everyone_is_not_credited(tmp_path: Path) -> None:
    world, kind, fault = _netpol_world(tmp_path)
    world.cluster.apply({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                         "metadata": {"name": "cart-allow-all", "namespace": "shop"},
                         "spec": {"podSelector": {"matchLabels": {"app": "cart"}}, "ingress": [{}]}})
    world.tick(2)
    assert all(code == "200" for code in _checkout_calls(world))
    _hold(world, kind, fault, False, 6, "after opening cart to every pod")


def test_networkpolicy_putting_the_caller_back_by_hand_is_credited(tmp_path: Path) -> None:
    world, kind, fault = _netpol_world(tmp_path)
    policy = copy.deepcopy(world.store.get("NetworkPolicy", "shop", "cart-allow-callers"))
    assert policy is not None
    policy["spec"]["ingress"][0]["from"].append({"podSelector": {"matchLabels": {"app": "checkout"}}})
    world.store.replace(policy, check_rv=False)
    _until_mitigated(world, kind, fault, max_ticks=3)
    _hold(world, kind, fault, True, 4, "after the hand fix")


def _rollout_world(tmp_path: Path, change: str, service: str) -> tuple[TwinWorld, ChangeFault, Fault]:
    world = TwinWorld(tmp_path)
    _warm(world)
    kind, fault = _inject(world, world.catalogue[change])
    for _ in range(10):
        world.tick()
        if condition(world.store.get("Deployment", "shop", service) or {}, "ReplicaFailure") is not None:
            break
    d = world.store.get("Deployment", "shop", service)
    assert d is not None and condition(d, "ReplicaFailure") is not None
    events = [e for e in world.store.list("Event", "shop") if e["reason"] == "FailedCreate"]
    assert events and events[0]["involvedObject"]["kind"] == "ReplicaSet" and events[0]["type"] == "Warning"
    assert not kind.mitigated(world, fault)
    return world, kind, fault


def test_quota_deleted_lets_the_rollout_finish_but_is_not_credited(tmp_path: Path) -> None:
    world, kind, fault = _rollout_world(tmp_path, "checkout-invoice-renderer-cpu", "checkout")
    world.store.delete("ResourceQuota", "shop", "compute")
    for _ in range(12):
        world.tick()
    d = world.store.get("Deployment", "shop", "checkout")
    assert d is not None and condition(d, "ReplicaFailure") is None  # the 4-CPU pods were admitted
    _hold(world, kind, fault, False, 4, "after deleting the quota")


def test_quota_raised_to_fit_the_typo_is_not_credited(tmp_path: Path) -> None:
    world, kind, fault = _rollout_world(tmp_path, "checkout-invoice-renderer-cpu", "checkout")
    quota = copy.deepcopy(world.store.get("ResourceQuota", "shop", "compute"))
    assert quota is not None
    quota["spec"]["hard"]["requests.cpu"] = "20"
    world.store.replace(quota, check_rv=False)
    _hold(world, kind, fault, False, 8, "after raising the quota")


def test_limitrange_deleted_lets_pods_in_but_is_not_credited(tmp_path: Path) -> None:
    world, kind, fault = _rollout_world(tmp_path, "platform-container-bounds", "payment")
    world.store.delete("LimitRange", "shop", "container-bounds")
    for _ in range(12):
        world.tick()
    assert sum(pod_is_ready(p) for p in world.pods("payment")) >= 2
    _hold(world, kind, fault, False, 4, "after deleting the LimitRange")


def test_limitrange_restored_by_hand_is_credited(tmp_path: Path) -> None:
    world, kind, fault = _rollout_world(tmp_path, "platform-container-bounds", "payment")
    lr = copy.deepcopy(world.store.get("LimitRange", "shop", "container-bounds"))
    assert lr is not None
    lr["spec"]["limits"][0]["max"]["memory"] = "2Gi"
    lr["spec"]["limits"][0]["default"]["memory"] = "256Mi"
    world.store.replace(lr, check_rv=False)
    _until_mitigated(world, kind, fault, max_ticks=20)
