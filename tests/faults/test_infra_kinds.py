"""Dependency, infrastructure and load fault kinds on a real twin running the shop.

For every kind: injected, it produces its documented effects; its mitigation condition stays
false after a wrong repair and turns true (and stays true) after the documented one; the
on-call cleanup at the end of the window leaves a healthy cluster. Repairs go through the
cluster's objects as the agent's API calls would (cordon, delete pods, scale, restart, set
env) or through the pipeline (commit + deploy).
"""

from __future__ import annotations

import base64
import copy
import math
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

import pluggy
import pytest
from support.twins import AppTwin, default_app

from pytest_sremarathon.agent_host import AgentSpec
from pytest_sremarathon.apps import AppSpec
from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import Fault, FaultKind, builtin_registry
from pytest_sremarathon.faults.catalogue import CuratedChange
from pytest_sremarathon.faults.infrastructure import partition_gaps, utilisation
from pytest_sremarathon.hookspecs import standalone_plugin_manager
from pytest_sremarathon.k8s.objects import condition
from pytest_sremarathon.k8s.store import iso
from pytest_sremarathon.marathon import Marathon, MarathonOptions
from pytest_sremarathon.scenario import Scenario, ScenarioFile, load_scenario

SCENARIO = SCENARIOS_DIR / "default.yaml"
NS = "shop"


@pytest.fixture(scope="module")
def shop() -> AppSpec:
    return default_app(NS)


class Twin(AppTwin):
    """A marathon's World without the marathon: the shop on a two-zone twin, its pipeline,
    the fault registry, and the agent's repair verbs."""

    def __init__(self, app: AppSpec, repos: Path) -> None:
        super().__init__([app], repos, start=EPOCH + timedelta(hours=10))  # busy daytime traffic
        self.registry = builtin_registry()
        self.run(minutes=5)
        self.cluster.settled()  # as a marathon's warm-up ends
        self.run(minutes=10)

    def curated(self, app: str, change_id: str) -> CuratedChange:
        raise KeyError(change_id)

    # -- time and faults -----------------------------------------------------------------------
    def inject(self, kind: str, app: str = "cluster", **params: Any) -> Fault:
        k = self.registry[kind]
        now = self.clock.now
        fault = Fault(id="F01", kind=kind, family=k.family, app=app, start=now, end=now + timedelta(hours=2),
                      params=params)
        k.inject(self, fault)
        fault.injected = True
        return fault

    def mitigated(self, fault: Fault) -> bool:
        return self.registry[fault.kind].mitigated(self, fault)

    def holds(self, fault: Fault, minutes: float) -> bool:
        """The condition is true at every tick for ``minutes``."""
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
        values = self.cluster.metrics.window(NS, svc, name, ticks)
        return sum(values) / len(values) if values else 0.0

    def worst(self, svc: str, name: str, ticks: int = 4) -> float:
        return max(self.cluster.metrics.window(NS, svc, name, ticks) or [0.0])

    def pods(self, svc: Optional[str] = None, node: Optional[str] = None) -> list[dict[str, Any]]:
        return [p for p in self.active_pods(NS, svc) if node is None or p["spec"].get("nodeName") == node]

    def zone_nodes(self, zone: str) -> list[str]:
        return [n for n, z in self.cluster.network.node_zone.items() if z == zone]

    def logs(self, svc: str) -> str:
        return "\n".join(line for c in self.cluster.kubelet.containers.values() if c.service == svc
                         for _, line in list(c.logs) + list(c.previous_logs))

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.store.list("Event") if e["reason"] == reason]

    # -- what the agent does (each is one API write) -------------------------------------------
    def _update(self, kind: str, ns: Optional[str], name: str, change: Callable[[dict[str, Any]], None]) -> None:
        obj = copy.deepcopy(self.store.get(kind, ns, name))
        change(obj)
        self.store.replace(obj)

    def cordon(self, *nodes: str) -> None:
        for n in nodes:
            self._update("Node", None, n, lambda o: o["spec"].update(unschedulable=True))

    def uncordon(self, *nodes: str) -> None:
        for n in nodes:
            self._update("Node", None, n, lambda o: o["spec"].pop("unschedulable", None))

    def delete_pod(self, pod: dict[str, Any]) -> None:
        self.store.delete("Pod", pod["metadata"]["namespace"], pod["metadata"]["name"])

    def drain(self, *nodes: str) -> None:
        self.cordon(*nodes)
        for n in nodes:
            for pod in self.pods(node=n):
                self.delete_pod(pod)

    def workload(self, svc: str) -> str:
        """The kind of the service's workload: a Deployment, or a datastore's StatefulSet."""
        return next(k for k in ("Deployment", "StatefulSet") if self.store.get(k, NS, svc) is not None)

    def scale(self, deployment: str, replicas: int) -> None:
        self._update(self.workload(deployment), NS, deployment, lambda o: o["spec"].update(replicas=replicas))

    def replicas(self, deployment: str) -> int:
        return int(self.store.get(self.workload(deployment), NS, deployment)["spec"]["replicas"])

    def rollout_restart(self, deployment: str) -> None:
        def restart(o: dict[str, Any]) -> None:
            md = o["spec"]["template"].setdefault("metadata", {})
            md.setdefault("annotations", {})["kubectl.kubernetes.io/restartedAt"] = iso(self.clock.now)
        self._update(self.workload(deployment), NS, deployment, restart)

    def set_env(self, deployment: str, name: str, value: str) -> None:
        def set_(o: dict[str, Any]) -> None:
            env = o["spec"]["template"]["spec"]["containers"][0].setdefault("env", [])
            env[:] = [e for e in env if e["name"] != name] + [{"name": name, "value": value}]
        self._update(self.workload(deployment), NS, deployment, set_)

    def assert_healthy(self) -> None:
        """Every node Ready and schedulable without fault taints, every deployment fully
        available, no errors at the entry."""
        for node in self.store.list("Node"):
            assert condition(node, "Ready")["status"] == "True", node["metadata"]["name"]
            assert condition(node, "DiskPressure")["status"] == "False", node["metadata"]["name"]
            assert not node["spec"].get("unschedulable") and not node["spec"].get("taints"), node["spec"]
        for d in self.store.list("Deployment", NS) + self.store.list("StatefulSet", NS):
            status = d.get("status", {})
            assert status.get("availableReplicas", 0) == d["spec"]["replicas"], (d["metadata"]["name"], status)
        assert self.metric("frontend", "error_ratio", 2) < 0.01
        net = self.cluster.network
        assert not (net.partitions or net.zone_latency_ms or net.dns_broken_zones or net.dns_race_share or net.node_cpu_noise
                    or net.externals_down or self.cluster.surge or self.cluster.kubelet.disk_pressure)


@pytest.fixture
def twin(shop: AppSpec, tmp_path: Path) -> Twin:
    return Twin(shop, tmp_path / "repos")


def _origin_free(twin: Twin) -> None:
    """The shop works before any fault: the baseline the effects are measured against."""
    assert twin.metric("frontend", "error_ratio") == 0.0


# -- infrastructure -----------------------------------------------------------------------------

def test_node_failure(twin: Twin) -> None:
    fault = twin.inject("node-failure", node="worker-b1")
    assert fault.component == "node:worker-b1" and fault.impact
    twin.run(2)
    node = twin.store.get("Node", None, "worker-b1")
    assert condition(node, "Ready")["status"] == "Unknown"
    assert not twin.mitigated(fault)
    twin.drain("worker-b2")  # wrong node
    twin.run(1)
    assert not twin.mitigated(fault)
    twin.uncordon("worker-b2")
    twin.drain("worker-b1")
    assert twin.becomes_mitigated(fault, within=2) and twin.holds(fault, 10)
    twin.cleanup(fault)
    twin.run(6)
    twin.assert_healthy()


def test_zone_outage(twin: Twin) -> None:
    _origin_free(twin)
    fault = twin.inject("zone-outage", zone="zone-b")
    assert fault.component == "zone:zone-b" and fault.nodes == {"worker-b1", "worker-b2"}
    twin.run(2)
    for n in fault.nodes:
        assert condition(twin.store.get("Node", None, n), "Ready")["status"] == "Unknown"
    assert twin.events("NodeNotReady")
    assert twin.metric("frontend", "error_ratio") > 0.05  # requests routed to the dark zone time out
    # Wrong: scaling the entry up does not take the dead machines out of service.
    twin.scale("frontend", 5)
    twin.run(2)
    assert not twin.mitigated(fault)
    twin.run(4)  # the taint manager evicts after 5 minutes; still not cordoned
    assert not any(p["spec"].get("nodeName") in fault.nodes for p in twin.pods())
    assert twin.events("TaintManagerEviction") and not twin.mitigated(fault)
    twin.cordon("worker-b1")  # half a repair
    twin.run(1)
    assert not twin.mitigated(fault)
    twin.drain("worker-b1", "worker-b2")
    assert twin.becomes_mitigated(fault, within=1) and twin.holds(fault, 10)
    assert twin.metric("frontend", "error_ratio") < 0.01
    twin.cleanup(fault)
    twin.run(6)
    twin.assert_healthy()


def test_zone_partition_repaired_by_keeping_calls_zone_local(twin: Twin) -> None:
    _origin_free(twin)
    fault = twin.inject("zone-partition", zone="zone-b", peer="zone-a")
    zones = {"zone-a", "zone-b"}
    gaps = partition_gaps(twin, zones)
    assert ("shop", "cart", "cart-cache") in {g[:3] for g in gaps}  # the single cache lives in one zone
    assert {("shop", "cart"), ("shop", "frontend")} <= fault.impact
    twin.run(3)
    assert twin.metric("frontend", "error_ratio") > 0.05
    assert "deadline exceeded" in twin.logs("frontend") + twin.logs("checkout")
    assert not twin.mitigated(fault)
    twin.rollout_restart("cart")  # wrong: the client is fine, its callee is in the other zone
    twin.run(3)
    assert not twin.mitigated(fault)
    for _ in range(4):  # repair: give every callee a ready pod in each zone its callers serve from
        callees = sorted({callee for _, _, callee, _ in partition_gaps(twin, zones)})
        if not callees:
            break
        for callee in callees:
            twin.scale(callee, twin.replicas(callee) + 1)
        twin.run(2)
    assert twin.becomes_mitigated(fault, within=2) and twin.holds(fault, 10)
    assert twin.metric("frontend", "error_ratio") < 0.01
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_zone_partition_repaired_by_draining_one_side(twin: Twin) -> None:
    fault = twin.inject("zone-partition", zone="zone-a", peer="zone-b")
    twin.run(2)
    assert not twin.mitigated(fault)
    twin.drain("worker-a1", "worker-a2")
    assert twin.becomes_mitigated(fault, within=3) and twin.holds(fault, 10)
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_network_latency(twin: Twin) -> None:
    p99_before = twin.metric("frontend", "latency_p99_ms")
    fault = twin.inject("network-latency", zone="zone-b", latency_ms=300)
    twin.run(3)
    assert twin.metric("frontend", "latency_p99_ms") > p99_before + 300
    assert twin.metric("currency", "latency_p99_ms") > 300  # every hop from or to zone-b
    assert not twin.mitigated(fault)
    twin.rollout_restart("frontend")  # wrong: the new pods spread into zone-b again
    twin.run(3)
    assert not twin.mitigated(fault)
    twin.drain(*twin.zone_nodes("zone-b"))
    assert twin.becomes_mitigated(fault, within=3) and twin.holds(fault, 10)
    assert twin.metric("frontend", "latency_p99_ms") < 200
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_cpu_noisy_neighbour(twin: Twin) -> None:
    node = "worker-a1"
    on_node = {p["metadata"]["labels"]["app"] for p in twin.pods(node=node)}
    p99_before = {s: twin.metric(s, "latency_p99_ms") for s in on_node}
    fault = twin.inject("cpu-noisy-neighbour", node=node, steal=0.95)
    twin.run(2)
    cpu, _ = twin.cluster.node_usage(node)
    pods_cpu = sum(c.cpu_millicores for c in twin.cluster.kubelet.containers.values() if c.node == node)
    assert cpu > 0.9 * 4000 and pods_cpu < 1000  # `kubectl top node` saturated, its pods are not
    assert any(twin.metric(s, "latency_p99_ms") > 3 * max(p99_before[s], 1.0) for s in on_node)
    # Wrong: deleting the pods without cordoning lets the scheduler put them back.
    for pod in twin.pods(node=node):
        twin.delete_pod(pod)
    twin.run(1)
    assert not twin.mitigated(fault)
    twin.drain(node)
    assert twin.becomes_mitigated(fault, within=2) and twin.holds(fault, 10)
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_disk_pressure(twin: Twin) -> None:
    node = "worker-b1"
    fault = twin.inject("disk-pressure", node=node)
    twin.run(2)
    obj = twin.store.get("Node", None, node)
    assert condition(obj, "DiskPressure")["status"] == "True"
    assert {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"} in obj["spec"]["taints"]
    evicted = [p for p in twin.store.list("Pod", NS) if p["status"].get("reason") == "Evicted"]
    assert evicted and all(p["status"]["phase"] == "Failed" and p["spec"]["nodeName"] == node for p in evicted)
    assert "ephemeral-storage" in evicted[0]["status"]["message"]
    assert twin.events("Evicted") and twin.events("EvictionThresholdMet")
    assert not twin.mitigated(fault)
    for pod in evicted:  # wrong: clearing away the evicted pods is housekeeping, not a repair
        twin.delete_pod(pod)
    twin.run(1)
    assert not twin.mitigated(fault)
    twin.drain(node)
    assert twin.becomes_mitigated(fault, within=2) and twin.holds(fault, 10)
    # nothing was scheduled onto the tainted node meanwhile
    assert not twin.pods(node=node)
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_traffic_surge(twin: Twin) -> None:
    rps_before = twin.metric("frontend", "requests_per_second")
    fault = twin.inject("traffic-surge", app=NS, utilisation=1.6)
    factor = twin.cluster.surge[NS]
    assert factor >= 3 and fault.component == "service:shop/frontend"
    twin.run(3)
    assert twin.metric("frontend", "requests_per_second") > 2 * rps_before
    saturated = sorted(s for s in twin.apps[NS].services if utilisation(twin, NS, s) > 0.7)
    assert "frontend" in saturated
    # The shop's autoscalers grew the deployments to their maximum, which absorbs part of the
    # surge (the errors of work beyond the CPU limits go); the deployments still run hot.
    assert twin.replicas("frontend") == 6
    limited = twin.store.get("HorizontalPodAutoscaler", NS, "frontend")["status"]["conditions"]
    assert {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas"}.items() <= \
        next(c for c in limited if c["type"] == "ScalingLimited").items()
    assert not twin.mitigated(fault)
    twin.rollout_restart("frontend")  # wrong: same capacity
    twin.run(2)
    assert not twin.mitigated(fault)
    twin.scale("frontend", twin.replicas("frontend") * 2)  # undone by its autoscaler (maxReplicas 6)
    twin.run(2)
    assert twin.replicas("frontend") == 6 and not twin.mitigated(fault)
    for _ in range(4):  # repair: scale each saturated deployment to run at about half its limit
        hot = [s for s in twin.apps[NS].services if utilisation(twin, NS, s) >= 0.6]
        if not hot:
            break
        for s in hot:  # what an HPA would ask for, at most tripling per step
            ready = max(1, int(twin.metric(s, "ready_pods", 1)))
            want = math.ceil(ready * min(utilisation(twin, NS, s), 10.0) / 0.45)
            want = min(max(want, twin.replicas(s)), 3 * twin.replicas(s))
            if twin.store.get("HorizontalPodAutoscaler", NS, s) is not None:  # lift its ceiling first
                twin._update("HorizontalPodAutoscaler", NS, s, lambda o, n=want: o["spec"].update(maxReplicas=n))
            twin.scale(s, want)
        twin.run(3)
    assert twin.becomes_mitigated(fault, within=3) and twin.holds(fault, 10)
    assert twin.metric("frontend", "error_ratio") < 0.01
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_traffic_surge_cut_off_by_another_fault_is_not_repaired(twin: Twin) -> None:
    fault = twin.inject("traffic-surge", app=NS, utilisation=1.6)
    twin.run(3)
    assert not twin.mitigated(fault)

    # A concurrent fault: the entry's Service selects no pod, so no request reaches the shop.
    twin._update("Service", NS, "frontend", lambda o: o["spec"]["selector"].update(app="frontend-web"))
    twin.run(4)
    assert twin.worst("frontend", "error_ratio") == 1.0 and twin.worst("currency", "requests_per_second") < 1
    assert max(utilisation(twin, NS, s) for s in ("frontend", "currency", "productcatalog")) < 0.7
    assert not twin.mitigated(fault)  # nothing reaches the saturated deployments: cooler, not repaired
    for _ in range(10):
        twin.run(0.5)
        assert not twin.mitigated(fault)


# -- dependencies -------------------------------------------------------------------------------

def test_slow_datastore(twin: Twin) -> None:
    fault = twin.inject("dependency-slow-datastore", app=NS, service="cart-cache", latency_ms=450)
    assert fault.component == "service:shop/cart-cache" and ("shop", "cart") in fault.impact
    assert "Asynchronous AOF fsync is taking too long" in twin.logs("cart-cache")
    twin.run(2)
    assert twin.worst("cart-cache", "latency_p99_ms") >= 450
    assert twin.metric("cart", "error_ratio") > 0.5  # cart's 300 ms timeout is shorter than the stall
    assert "deadline exceeded after 300ms" in twin.logs("cart")
    assert not twin.mitigated(fault)
    twin.rollout_restart("cart")  # wrong: restarting the client
    twin.run(3)
    assert not twin.mitigated(fault)
    for pod in twin.pods("cart-cache"):  # repair: kubectl delete pod
        twin.delete_pod(pod)
    assert twin.becomes_mitigated(fault, within=2) and twin.holds(fault, 10)
    assert twin.metric("cart", "error_ratio") < 0.01
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_external_outage_repaired_by_the_fallback_flag_through_the_pipeline(twin: Twin) -> None:
    fault = twin.inject("dependency-external-outage", app=NS, external="payment-provider")
    assert fault.component == "external:payment-provider"
    assert {("shop", "payment"), ("shop", "checkout"), ("shop", "frontend")} <= fault.impact
    # payment serves about one sampled call in two ticks: the count model needs two or three
    # failing samples to call the change (twin/counts.py), then its scrapes read ~100%; of
    # checkout's requests, those that charge fail
    def shows() -> bool:
        return twin.worst("payment", "error_ratio", 4) > 0.9 and twin.worst("checkout", "error_ratio", 4) > 0.5

    for _ in range(10):
        twin.run(0.5)
        if shows():
            break
    assert shows()
    assert "POST https://api.payments.example.com/v1/charges: 503 Service Unavailable" in twin.logs("payment")
    assert not twin.mitigated(fault)
    # Wrong: a rollback to what is deployed, and a restart, change nothing.
    twin.pipelines.deploy(NS, "HEAD", "agent")
    twin.rollout_restart("payment")
    twin.run(3)
    assert not twin.mitigated(fault) and twin.worst("payment", "error_ratio") > 0.9
    twin.pipelines.commit_edits(NS, [("config/payment.yaml", "PAYMENT_FALLBACK: none\n", "PAYMENT_FALLBACK: queue\n")],
                                "payment: queue charges while the provider is down",
                                "sre-agent <sre-agent@sremarathon.local>")
    twin.pipelines.deploy(NS, "HEAD", "agent")
    assert twin.becomes_mitigated(fault, within=3) and twin.holds(fault, 10)
    assert twin.worst("payment", "error_ratio") == 0.0 and "queued for settlement" in twin.logs("payment")
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def test_external_outage_repaired_with_kubectl_set_env(twin: Twin) -> None:
    fault = twin.inject("dependency-external-outage", app=NS, external="payment-provider")
    twin.run(2)
    twin.set_env("payment", "PAYMENT_FALLBACK", "maybe")  # wrong value
    twin.run(3)
    assert not twin.mitigated(fault)
    twin.set_env("payment", "PAYMENT_FALLBACK", "queue")
    assert twin.becomes_mitigated(fault, within=3) and twin.holds(fault, 10)


def test_dns_failure_in_one_zone(twin: Twin) -> None:
    fault = twin.inject("dependency-dns-zone", zone="zone-b")
    assert fault.component == "zone:zone-b" and ("shop", "frontend") in fault.impact
    assert ("shop", "currency") not in fault.impact  # answers calls, makes none
    twin.run(3)
    assert twin.metric("frontend", "error_ratio") > 0.05
    assert "lookup" in twin.logs("frontend") and "on 10.96.0.10:53: read udp: i/o timeout" in twin.logs("frontend")
    assert not twin.mitigated(fault)
    twin.rollout_restart("frontend")  # wrong: the new pods spread into zone-b again
    twin.run(3)
    assert not twin.mitigated(fault)
    twin.drain(*twin.zone_nodes("zone-b"))
    assert twin.becomes_mitigated(fault, within=3) and twin.holds(fault, 10)
    assert twin.metric("frontend", "error_ratio") < 0.01
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


def _serial_resolver(o: dict[str, Any]) -> None:
    """What the repair writes into a calling deployment (`kubectl patch`, or the manifest)."""
    o["spec"]["template"]["spec"]["dnsConfig"] = {"options": [{"name": "single-request-reopen"}]}


def test_dns_degraded_cluster_wide(twin: Twin) -> None:
    """A share of lookups lost in every zone: partial errors on the callers; restarting, scaling
    or draining a zone changes nothing; the resolver option on every caller's template does.
    Fixing only the loudest caller is not enough."""
    fault = twin.inject("dependency-dns-degraded", share=0.05)
    assert fault.component == "service:kube-system/kube-dns"
    assert ("shop", "frontend") in fault.impact and ("shop", "currency") not in fault.impact
    twin.run(4)
    ratio = twin.metric("frontend", "error_ratio")
    assert 0.05 < ratio < 0.6, ratio  # partial: most calls still resolve
    assert twin.metric("currency", "error_ratio") == 0.0  # the services called look healthy
    assert "cart.shop.svc.cluster.local on 10.96.0.10:53: read udp: i/o timeout" in twin.logs("frontend") or \
        "on 10.96.0.10:53: read udp: i/o timeout" in twin.logs("frontend")
    assert not twin.mitigated(fault)
    twin.rollout_restart("frontend")  # wrong: new pods, same resolver
    twin.scale("checkout", 4)  # wrong: more pods, same resolver
    twin.run(3)
    assert not twin.mitigated(fault)
    twin.drain(*twin.zone_nodes("zone-b"))  # wrong: it is not a zone
    twin.run(3)
    assert not twin.mitigated(fault) and twin.metric("frontend", "error_ratio") > 0.02
    twin.uncordon(*twin.zone_nodes("zone-b"))
    twin._update("Deployment", NS, "frontend", _serial_resolver)  # only the loudest caller
    twin.run(3)
    assert not twin.mitigated(fault)
    callers = sorted(svc for ns, svc in twin.registry[fault.kind]._callers(twin))  # type: ignore[attr-defined]
    for svc in callers:
        if svc != "frontend":
            twin._update("Deployment", NS, svc, _serial_resolver)
    assert twin.becomes_mitigated(fault, within=4) and twin.holds(fault, 10)
    assert twin.metric("frontend", "error_ratio") < 0.01
    refs = {(r.kind, r.name) for r in twin.registry[fault.kind].evidence(twin, fault)}
    assert ("Deployment", "checkout") in refs and ("Deployment", "currency") not in refs
    twin.cleanup(fault)
    assert not twin.cluster.network.dns_race_share
    twin.run(3)


def test_credential_rotated_under_its_clients(twin: Twin) -> None:
    secret = twin.store.get("Secret", NS, "cart-cache-auth")
    old = secret["data"]["password"]
    fault = twin.inject("dependency-credential-expired", app=NS, datastore="cart-cache")
    assert fault.component == "service:shop/cart-cache"
    assert twin.store.get("Secret", NS, "cart-cache-auth")["data"]["password"] != old
    twin.run(3)
    assert twin.metric("cart", "ready_pods", 1) == 0  # readiness checks the cache with the old password
    probes = [e["message"] for e in twin.events("Unhealthy") if e["involvedObject"]["name"].startswith("cart-")]
    assert any("WRONGPASS invalid username-password pair" in m for m in probes)
    assert twin.metric("frontend", "error_ratio") > 0.05
    assert not twin.mitigated(fault)
    twin.rollout_restart("cart-cache")  # wrong: the server now reads the new password too
    twin.run(3)
    assert not twin.mitigated(fault)
    twin.rollout_restart("cart")
    assert twin.becomes_mitigated(fault, within=4) and twin.holds(fault, 10)
    assert twin.metric("frontend", "error_ratio") < 0.01
    new = base64.b64decode(twin.store.get("Secret", NS, "cart-cache-auth")["data"]["password"]).decode()
    assert all(c.ctx.config_data["CART_CACHE_PASSWORD"] == new
               for c in twin.cluster.kubelet.containers.values() if c.service == "cart" and c.ctx)
    twin.cleanup(fault)
    twin.run(3)
    twin.assert_healthy()


# -- the on-call cleanup of an unrepaired fault ---------------------------------------------------

UNREPAIRED = [
    ("node-failure", "cluster", {"node": "worker-a2"}),
    ("zone-outage", "cluster", {"zone": "zone-a"}),
    ("zone-partition", "cluster", {"zone": "zone-a", "peer": "zone-b"}),
    ("network-latency", "cluster", {"zone": "zone-a", "latency_ms": 250}),
    ("cpu-noisy-neighbour", "cluster", {"node": "worker-b2", "steal": 0.9}),
    ("disk-pressure", "cluster", {"node": "worker-a1"}),
    ("traffic-surge", NS, {"utilisation": 2.0}),
    ("dependency-slow-datastore", NS, {"service": "cart-cache", "latency_ms": 250}),
    ("dependency-external-outage", NS, {"external": "payment-provider"}),
    ("dependency-dns-zone", "cluster", {"zone": "zone-a"}),
    ("dependency-credential-expired", NS, {"datastore": "cart-cache"}),
]


@pytest.mark.parametrize("kind, app, params", UNREPAIRED, ids=[k for k, _, _ in UNREPAIRED])
def test_cleanup_of_an_unrepaired_fault_restores_the_cluster(twin: Twin, kind: str, app: str,
                                                             params: dict[str, Any]) -> None:
    fault = twin.inject(kind, app, **params)
    # the catalogue's component form (``sremarathon kinds``) is how injection names the cause
    form = twin.registry[kind].component_form
    assert re.fullmatch(re.sub(r"<[^>]+>", "[a-z0-9-]+", form), fault.component), (form, fault.component)
    twin.run(6)
    assert not twin.mitigated(fault)
    twin.cleanup(fault)  # the end of the window: the on-call human's fix
    twin.run(8)
    twin.assert_healthy()


# -- third-party kinds through the pluggy hook ----------------------------------------------------

class PodKill(FaultKind):
    """A plugin's kind: deletes one frontend pod; mitigated once the frontend is fully ready."""

    name = "acme-pod-kill"
    family = "acme"
    injected_at: list[datetime] = []

    def inject(self, world: Any, fault: Fault) -> None:
        pod = next(p for p in world.cluster.store.list("Pod", "shop") if p["metadata"]["labels"].get("app") == "frontend")
        world.cluster.store.delete("Pod", "shop", pod["metadata"]["name"])
        fault.component = "service:shop/frontend"
        fault.impact = {("shop", "frontend")}
        fault.description = f"deleted {pod['metadata']['name']}"
        PodKill.injected_at.append(world.clock.now)

    def mitigated(self, world: Any, fault: Fault) -> bool:
        d = world.cluster.store.get("Deployment", "shop", "frontend")
        return d["status"].get("readyReplicas", 0) == d["spec"]["replicas"]

    def cleanup(self, world: Any, fault: Fault) -> None:
        return None


class AcmePlugin:
    """What a third-party package registers (under the ``sremarathon`` entry point, or in a
    conftest.py with ``@pytest.hookimpl``)."""

    @pluggy.HookimplMarker("pytest")
    def pytest_sremarathon_fault_kinds(self) -> list[type[FaultKind]]:
        return [PodKill]


def test_a_plugin_kind_is_scheduled_and_injected_by_a_marathon(tmp_path: Path) -> None:
    pm = standalone_plugin_manager()
    pm.register(AcmePlugin())
    base = load_scenario(SCENARIO).with_overrides(duration=2400, faults=1)
    data = base.spec.model_dump()
    data["schedule"].update(families={"acme": 1.0}, warmup=600, quiet_tail=600)
    scenario = Scenario(base.path, ScenarioFile.model_validate(data), base.apps, base.catalogues, base.text)
    PodKill.injected_at.clear()
    marathon = Marathon(scenario, MarathonOptions(agent=AgentSpec(agent="pytest_sremarathon.baselines:NoopAgent"),
                                                  seed=7, out_dir=tmp_path / "runs", isolation="none"),
                        hook=pm.hook)
    result = marathon.run()
    (fault,) = result.schedule.faults
    assert fault.kind == "acme-pod-kill" and fault.family == "acme" and fault.injected
    assert PodKill.injected_at == [fault.start]
    truth = [e.data for e in open_bundle(result.bundle).events if e.type == "truth.fault"]
    assert truth and truth[0]["kind"] == "acme-pod-kill" and truth[0]["component"] == "service:shop/frontend"
