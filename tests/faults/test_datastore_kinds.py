"""Datastore fault kinds (faults/datastore.py) on a real twin running one app.

For every kind: injected, it produces the effects an agent can see (logs, probe events, error
and latency metrics); its mitigation condition stays false after the wrong repairs and turns
true, and stays true, after the documented one; the on-call cleanup leaves a healthy app.
Repairs are the API writes an agent would make (delete pods, scale, rollout restart).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import pytest
from support.twins import AppTwin, default_app

from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import Fault, builtin_registry
from pytest_sremarathon.faults.catalogue import CuratedChange
from pytest_sremarathon.k8s.store import iso


class Twin(AppTwin):
    """One app on a two-zone twin with the fault registry and the agent's repair verbs."""

    def __init__(self, ns: str, repos: Path) -> None:
        super().__init__([default_app(ns)], repos, start=EPOCH + timedelta(hours=10))  # busy daytime traffic
        self.ns = ns
        self.registry = builtin_registry()
        self.run(minutes=5)
        self.cluster.settled()
        self.run(minutes=10)

    def curated(self, app: str, change_id: str) -> CuratedChange:
        raise KeyError(change_id)

    def inject(self, kind: str, **params: Any) -> Fault:
        now = self.clock.now
        fault = Fault(id="F01", kind=kind, family=self.registry[kind].family, app=self.ns, start=now,
                      end=now + timedelta(hours=2), params=params)
        self.registry[kind].inject(self, fault)
        fault.arrived = True
        return fault

    def activate(self, fault: Fault, within: float) -> None:
        for _ in range(int(within * 2)):
            self.run(0.5)
            if self.registry[fault.kind].active(self, fault):
                fault.injected = True
                return
        pytest.fail(f"{fault.kind} did not take effect within {within} minutes")

    def mitigated(self, fault: Fault) -> bool:
        return self.registry[fault.kind].mitigated(self, fault)

    def holds(self, fault: Fault, minutes: float) -> bool:
        for _ in range(int(minutes * 2)):
            self.run(0.5)
            if not self.mitigated(fault):
                return False
        return True

    def becomes_mitigated(self, fault: Fault, within: float) -> bool:
        for _ in range(int(within * 2)):
            self.run(0.5)
            if self.mitigated(fault):
                return True
        return False

    def cleanup(self, fault: Fault) -> None:
        self.registry[fault.kind].cleanup(self, fault)
        fault.ended = True

    # -- what the agent sees -------------------------------------------------------------------
    def metric(self, svc: str, name: str, ticks: int = 4) -> float:
        values = self.cluster.metrics.window(self.ns, svc, name, ticks)
        return sum(values) / len(values) if values else 0.0

    def logs(self, svc: str) -> str:
        return "\n".join(line for c in self.cluster.kubelet.containers.values()
                         if c.namespace == self.ns and c.service == svc
                         for _, line in list(c.logs) + list(c.previous_logs))

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.store.list("Event") if e["reason"] == reason]

    def pods(self, svc: Optional[str] = None) -> list[dict[str, Any]]:
        return self.active_pods(self.ns, svc)

    # -- what the agent does (each is one API write) -------------------------------------------
    def _update(self, kind: str, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        obj = copy.deepcopy(self.store.get(kind, self.ns, name))
        change(obj)
        self.store.replace(obj)

    def workload(self, svc: str) -> str:
        """The kind of the workload behind a service (a Deployment today; a datastore may be a
        StatefulSet): found by name, as ``kubectl get deploy,sts <name>`` would."""
        return next(k for k in ("Deployment", "StatefulSet") if self.store.get(k, self.ns, svc) is not None)

    def scale(self, svc: str, replicas: int) -> None:
        self._update(self.workload(svc), svc, lambda o: o["spec"].update(replicas=replicas))

    def rollout_restart(self, svc: str) -> None:
        def restart(o: dict[str, Any]) -> None:
            md = o["spec"]["template"].setdefault("metadata", {})
            md.setdefault("annotations", {})["kubectl.kubernetes.io/restartedAt"] = iso(self.clock.now)
        self._update(self.workload(svc), svc, restart)

    def delete_pods(self, svc: str) -> None:
        for pod in self.pods(svc):
            self.store.delete("Pod", self.ns, pod["metadata"]["name"])

    def assert_healthy(self) -> None:
        for svc in self.apps[self.ns].services:
            obj = self.store.get(self.workload(svc), self.ns, svc)
            status = obj.get("status", {})
            assert status.get("availableReplicas", status.get("readyReplicas", 0)) == obj["spec"]["replicas"], (svc, status)
        assert self.metric("frontend", "error_ratio", 2) < 0.01


@pytest.fixture
def shop(tmp_path: Path) -> Twin:
    return Twin("shop", tmp_path / "repos")


# -- datastore-failover -------------------------------------------------------------------------

def test_failover_leaves_clients_on_the_old_primary_until_they_restart(shop: Twin) -> None:
    twin = shop
    assert twin.metric("frontend", "error_ratio") == 0.0
    (old,) = twin.pods("cart-cache")
    old_ip = old["status"]["podIP"]
    fault = twin.inject("datastore-failover", datastore="cart-cache")
    assert fault.component == "service:shop/cart-cache"
    assert {("shop", "cart"), ("shop", "frontend")} <= fault.impact
    twin.activate(fault, within=2)  # the detection delay, then the replacement serves
    twin.run(3)
    # The datastore is healthy again: a new pod at a new address, and it says it took over.
    (new,) = twin.pods("cart-cache")
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and new["status"]["podIP"] != old_ip
    assert "MASTER MODE enabled" in twin.logs("cart-cache")
    assert twin.metric("cart-cache", "ready_pods", 1) == 1
    # … but its clients still dial the dead address, and say so.
    unreachable = f"Error 113 connecting to {old_ip}:6379. No route to host."
    assert unreachable in twin.logs("cart") or any(
        unreachable in e["message"] for e in twin.events("Unhealthy") if e["involvedObject"]["name"].startswith("cart-"))
    assert twin.metric("cart", "ready_pods", 1) == 0
    assert twin.metric("frontend", "error_ratio") > 0.05
    assert not twin.mitigated(fault)
    # Wrong: restarting the datastore again, or scaling it, reaches no client.
    twin.delete_pods("cart-cache")
    twin.run(2)
    assert not twin.mitigated(fault)
    twin.scale("cart-cache", 2)
    twin.run(2)
    assert not twin.mitigated(fault) and twin.metric("frontend", "error_ratio") > 0.05
    twin.scale("cart-cache", 1)
    # Wrong: restarting a caller of the client changes nothing either.
    twin.rollout_restart("checkout")
    twin.run(2)
    assert not twin.mitigated(fault)
    # The documented repair: restart the clients, which resolve the Service again.
    twin.rollout_restart("cart")
    assert twin.becomes_mitigated(fault, within=4) and twin.holds(fault, 10)
    assert twin.metric("frontend", "error_ratio") < 0.01
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_unrepaired_failover_is_cleaned_up_by_restarting_the_clients(shop: Twin) -> None:
    twin = shop
    fault = twin.inject("datastore-failover", datastore="cart-cache")
    form = twin.registry["datastore-failover"].component_form
    assert re.fullmatch(re.sub(r"<[^>]+>", "[a-z0-9-]+", form), fault.component)
    twin.activate(fault, within=2)
    twin.run(3)
    assert not twin.mitigated(fault)
    twin.cleanup(fault)
    twin.run(4)
    assert twin.mitigated(fault)
    twin.assert_healthy()


def test_a_mongodb_failover_shows_the_election_and_the_drivers_error(tmp_path: Path) -> None:
    twin = Twin("hotel", tmp_path / "repos")
    (old,) = twin.pods("mongodb-user")
    fault = twin.inject("datastore-failover", datastore="mongodb-user")
    twin.activate(fault, within=2)
    twin.run(2)
    assert '"newState":"PRIMARY"' in twin.logs("mongodb-user")
    unreachable = f"{old['status']['podIP']}:27017: [Errno 113] No route to host"
    assert unreachable in twin.logs("user") + "".join(e["message"] for e in twin.events("Unhealthy"))
    assert not twin.mitigated(fault)
    twin.rollout_restart("mongodb-user")  # wrong: the datastore is not what the clients dial
    twin.run(2)
    assert not twin.mitigated(fault)
    twin.rollout_restart("user")
    assert twin.becomes_mitigated(fault, within=4) and twin.holds(fault, 5)


# -- cache-stampede -----------------------------------------------------------------------------

@pytest.fixture
def hotel(tmp_path: Path) -> Twin:
    return Twin("hotel", tmp_path / "repos")


def test_a_flushed_cache_becomes_an_overload_that_outlives_its_trigger(hotel: Twin) -> None:
    twin = hotel
    assert twin.metric("frontend", "error_ratio") == 0.0
    warm_db_rps = twin.metric("mongodb-hotels", "requests_per_second")
    fault = twin.inject("cache-stampede", cache="memcached-rate", backend="mongodb-hotels", headroom=0.7)
    assert fault.component == "service:hotel/mongodb-hotels"
    assert {("hotel", "rate"), ("hotel", "geo"), ("hotel", "frontend")} <= fault.impact
    backend = twin.cluster.network.backends["hotel/mongodb-hotels"]
    twin.run(3)
    # What the agent can see: the flush, the database slow and far busier than usual, the
    # callers' deadlines passing, errors at the entry; and the cache stays cold.
    assert "flush_all" in twin.logs("memcached-rate")
    assert twin.metric("mongodb-hotels", "latency_p99_ms", 2) > 1000
    assert twin.metric("mongodb-hotels", "requests_per_second", 2) > warm_db_rps + 10
    assert "deadline exceeded" in twin.logs("rate")
    assert twin.metric("frontend", "error_ratio") > 0.05
    assert backend.hit_ratio < 0.5 and not twin.mitigated(fault)
    # It outlives its trigger: minutes later nothing has refilled.
    twin.run(5)
    assert backend.hit_ratio < 0.5 and backend.delay_ms > 300 and not twin.mitigated(fault)
    # Wrong: restarting the cache flushes it again; restarting its clients or the database
    # leaves the loop (misses, timeouts, retries) as it was.
    for wrong in ("memcached-rate", "rate", "mongodb-hotels"):
        twin.rollout_restart(wrong)
        twin.run(3)
        assert not twin.mitigated(fault), wrong
        assert twin.metric("frontend", "error_ratio", 2) > 0.05, wrong
    # The documented repair: capacity above the stuck load until the cache is warm …
    twin.scale("mongodb-hotels", 2)
    assert twin.becomes_mitigated(fault, within=5) and backend.hit_ratio >= 0.9
    twin.run(1)
    assert twin.metric("frontend", "error_ratio", 2) < 0.01
    # … after which the warm cache keeps the database under its normal capacity.
    twin.scale("mongodb-hotels", 1)
    assert twin.holds(fault, 10)
    assert twin.metric("frontend", "error_ratio") < 0.01
    twin.cleanup(fault)
    assert not twin.cluster.network.backends and not twin.cluster.network.pod_delay_ms
    twin.run(2)
    twin.assert_healthy()


def test_an_unrepaired_stampede_is_cleaned_up(hotel: Twin) -> None:
    twin = hotel
    fault = twin.inject("cache-stampede", cache="memcached-rate", backend="mongodb-hotels", headroom=0.8)
    form = twin.registry["cache-stampede"].component_form
    assert re.fullmatch(re.sub(r"<[^>]+>", "[a-z0-9-]+", form), fault.component)
    twin.run(3)
    assert not twin.mitigated(fault)
    twin.cleanup(fault)
    twin.run(4)
    twin.assert_healthy()
