"""What the twin models, seen through its objects and metrics as an SRE would see them."""

from __future__ import annotations

import copy
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.clock import VirtualClock
from pytest_sremarathon.k8s.objects import condition, pod_is_ready
from pytest_sremarathon.policy import Decision, MutationRequest
from pytest_sremarathon.scenario import load_scenario


class AllowAll:
    def decide(self, req: MutationRequest) -> Decision:
        return Decision(True)

    def record(self, req: MutationRequest, decision: Decision, status: int) -> None:
        pass


class Shop(BackendTwin):
    """The twin backend running only the shop, three virtual minutes after ``start_hour``."""

    def __init__(self, tmp: Path, start_hour: int = 0) -> None:
        clock = VirtualClock()
        clock.advance(start_hour * 3600)
        scenario = load_scenario(DEFAULT_SCENARIO)
        scenario.apps = [a for a in scenario.apps if a.namespace == "shop"]
        super().__init__(scenario, tmp, admission=AllowAll(), tokens={"t": "agent"}, clock=clock)
        self.run(180)

    def edit(self, kind: str, name: str, change: Any) -> None:
        obj = copy.deepcopy(self.store.get(kind, "shop", name))
        change(obj)
        self.store.replace(obj, check_rv=False)

    def metric(self, svc: str, name: str, ticks: int = 4) -> float:
        values = self.cluster.metrics.window("shop", svc, name, ticks)
        return sum(values) / len(values)

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.store.list("Event") if e["reason"] == reason]


@pytest.fixture
def shop(tmp_path: Path) -> Any:
    s = Shop(tmp_path)
    yield s
    s.close()


def _container(d: dict[str, Any]) -> dict[str, Any]:
    return d["spec"]["template"]["spec"]["containers"][0]


def test_a_readiness_probe_typo_stalls_the_rollout_while_old_pods_keep_serving(shop: Shop) -> None:
    old = {p["metadata"]["name"] for p in shop.pods("cart")}
    shop.edit("Deployment", "cart", lambda d: _container(d)["readinessProbe"]["httpGet"].update(path="/readz"))
    shop.run(900)
    pods = shop.pods("cart")
    assert old <= {p["metadata"]["name"] for p in pods}, "old pods were removed before new ones were ready"
    new = [p for p in pods if p["metadata"]["name"] not in old]
    assert new and not any(pod_is_ready(p) for p in new)
    probes = [e["message"] for e in shop.events("Unhealthy")
              if e["involvedObject"]["name"] in {p["metadata"]["name"] for p in new}]
    assert probes and all("statuscode: 404" in m for m in probes)
    assert shop.metric("cart", "error_ratio") == 0
    progressing = condition(shop.store.get("Deployment", "shop", "cart"), "Progressing")
    assert progressing["reason"] == "ProgressDeadlineExceeded"


def test_a_stalled_rollout_times_out_in_the_first_pass_after_its_progress_deadline(shop: Shop) -> None:
    """The deadline is a clock the controller must keep reading while nothing else moves."""
    def typo(d: dict[str, Any]) -> None:
        d["spec"]["progressDeadlineSeconds"] = 150
        _container(d)["readinessProbe"]["httpGet"]["path"] = "/readz"

    shop.edit("Deployment", "cart", typo)
    marks: list[str] = []  # the Progressing condition's lastUpdateTime while the rollout progresses
    while True:
        shop.run(30)
        progressing = condition(shop.store.get("Deployment", "shop", "cart"), "Progressing")
        if progressing["reason"] == "ProgressDeadlineExceeded":
            break
        assert progressing["reason"] == "ReplicaSetUpdated" and len(marks) < 40
        marks.append(progressing["lastUpdateTime"])
    last_progress = datetime.strptime(marks[-1], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    waited = (shop.clock.now - last_progress).total_seconds()
    assert 150 < waited <= 150 + 30, f"timed out {waited:.0f} s after the last progress (deadline 150 s)"
    assert [e for e in shop.events("ProgressDeadlineExceeded") if e["involvedObject"]["name"] == "cart"]


def test_a_memory_limit_cut_gives_oomkilled_restarts_with_growing_back_off(shop: Shop) -> None:
    shop.edit("Deployment", "currency", lambda d: _container(d)["resources"]["limits"].update(memory="32Mi"))
    shop.run(600)
    statuses = [p["status"]["containerStatuses"][0] for p in shop.pods("currency") if p["status"].get("containerStatuses")]
    assert any(s["lastState"].get("terminated", {}).get("reason") == "OOMKilled" and s["restartCount"] >= 2
               for s in statuses)
    assert any(s["state"].get("waiting", {}).get("reason") == "CrashLoopBackOff" for s in statuses)
    restarts = max(s["restartCount"] for s in statuses)
    shop.run(600)
    later = max(p["status"]["containerStatuses"][0]["restartCount"] for p in shop.pods("currency"))
    assert later - restarts < restarts + 2, "back-off did not slow the restarts down"


def test_a_zone_partition_shows_errors_on_callers_not_only_the_callee(shop: Shop) -> None:
    cache_zone = shop.cluster.network.node_zone[shop.pods("cart-cache")[0]["spec"]["nodeName"]]
    shop.cluster.network.partitions.add(frozenset({"zone-a", "zone-b"}))
    shop.run(180)
    # carts across the partition cannot reach their cache: their readiness fails ...
    far = [p for p in shop.pods("cart") if shop.cluster.network.node_zone[p["spec"]["nodeName"]] != cache_zone]
    assert far and not any(pod_is_ready(p) for p in far)
    # ... so callers in that zone time out crossing the partition, while the cache is healthy
    assert shop.metric("frontend", "error_ratio", 4) > 0.02
    assert shop.metric("cart-cache", "error_ratio", 4) == 0
    logs = [line for p in shop.pods("frontend") for _, line in shop.cluster.pod_log("shop", p["metadata"]["name"], None, False)]
    assert any("deadline exceeded" in line for line in logs)


def test_cordoning_moves_no_running_pod_but_blocks_new_ones(shop: Shop) -> None:
    node = "worker-a1"
    running = [p["metadata"]["name"] for p in shop.store.list("Pod", "shop") if p["spec"].get("nodeName") == node]
    assert running
    obj = copy.deepcopy(shop.store.get("Node", None, node))
    obj["spec"]["unschedulable"] = True
    shop.store.replace(obj, check_rv=False)
    # ad's HorizontalPodAutoscaler would scale a manual 8 back to what its load needs (as on a
    # real cluster): take it away first, as an operator scaling by hand does
    shop.store.delete("HorizontalPodAutoscaler", "shop", "ad")
    shop.edit("Deployment", "ad", lambda d: d["spec"].update(replicas=8))
    shop.run(180)
    still = [p["metadata"]["name"] for p in shop.store.list("Pod", "shop") if p["spec"].get("nodeName") == node]
    assert set(running) <= set(still)
    assert not [p for p in shop.pods("ad") if p["spec"].get("nodeName") == node and p["metadata"]["name"] not in running]
    assert len([p for p in shop.pods("ad") if pod_is_ready(p)]) == 8


def test_replicas_spread_across_zones_and_impossible_requests_stay_pending(shop: Shop) -> None:
    zones = {shop.cluster.network.node_zone[p["spec"]["nodeName"]] for p in shop.pods("frontend")}
    assert zones == {"zone-a", "zone-b"}
    # the shop's quota and LimitRange would refuse such a pod at admission (FailedCreate: see
    # test_network_admission_kinds.py); without them it reaches the scheduler
    shop.store.delete("ResourceQuota", "shop", "compute")
    shop.store.delete("LimitRange", "shop", "container-bounds")
    shop.edit("Deployment", "email", lambda d: _container(d)["resources"]["requests"].update(cpu="64"))
    shop.run(120)
    pending = [p for p in shop.pods("email") if not p["spec"].get("nodeName")]
    assert pending
    message = shop.events("FailedScheduling")[-1]["message"]
    assert message.startswith("0/4 nodes are available:") and "Insufficient cpu" in message


def test_a_lost_node_turns_not_ready_and_its_pods_are_evicted_after_five_minutes(shop: Shop) -> None:
    node = "worker-b1"
    victims = {p["metadata"]["name"] for p in shop.store.list("Pod", "shop") if p["spec"].get("nodeName") == node}
    shop.cluster.network.node_up[node] = False
    shop.run(120)
    assert condition(shop.store.get("Node", None, node), "Ready")["status"] == "Unknown"
    assert victims <= {p["metadata"]["name"] for p in shop.store.list("Pod", "shop")}  # not yet evicted
    shop.run(300)
    left = {p["metadata"]["name"] for p in shop.store.list("Pod", "shop")}
    assert not victims & left
    assert shop.events("TaintManagerEviction")
    assert all(len([p for p in shop.pods(app) if pod_is_ready(p)]) >= 1 for app in ("frontend", "cart", "currency"))


def test_traffic_follows_the_day_and_cpu_contention_adds_latency(tmp_path: Path) -> None:
    night, day = Shop(tmp_path, start_hour=4), Shop(tmp_path, start_hour=16)
    try:
        assert day.metric("frontend", "requests_per_second") > 2 * night.metric("frontend", "requests_per_second")
        calm = day.metric("productcatalog", "latency_p99_ms")
        for node in day.cluster.network.node_up:
            day.cluster.network.node_cpu_noise[node] = 3800.0  # noisy neighbours on every node
        day.run(120)
        assert day.metric("productcatalog", "latency_p99_ms", 2) > 3 * calm
    finally:
        night.backend.close()
        day.backend.close()
