"""Storage fault kinds (faults/storage.py) on a real twin running the shop: volume-filling.

Injected, the change fills the cart cache's claim within tens of minutes (what the kubelet
reports) until the cache refuses writes with ENOSPC and the cart's writes fail; restarting or
scaling the datastore, or reverting alone, leave the volume full; reverting and expanding the
claim repairs it. Repairs are the writes an agent makes (kubectl delete/scale/patch, a revert
through the pipeline)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.twins import AppTwin, default_app

from pytest_sremarathon.alerts.rules import volume_filling_up
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import Fault, builtin_registry
from pytest_sremarathon.faults.catalogue import CuratedChange, load_catalogue
from pytest_sremarathon.k8s.objects import pod_is_active

NS, CLAIM = "shop", "data-cart-cache-0"
CATALOGUE = {c.id: c for c in load_catalogue(APPS_DIR / "shop")}


class Twin(AppTwin):
    def __init__(self, repos: Path) -> None:
        super().__init__([default_app(NS)], repos, start=EPOCH + timedelta(hours=10))  # busy daytime traffic
        self.registry = builtin_registry()
        self.run(minutes=5)
        self.cluster.settled()
        self.run(minutes=10)

    def curated(self, app: str, change_id: str) -> CuratedChange:
        return CATALOGUE[change_id]

    def mitigated(self, fault: Fault) -> bool:
        return self.registry[fault.kind].mitigated(self, fault)

    def metric(self, svc: str, name: str, ticks: int = 4) -> float:
        values = self.cluster.metrics.window(NS, svc, name, ticks)
        return sum(values) / len(values) if values else 0.0

    def used(self) -> float:
        return float(self.cluster.volume_usage.describe()[f"{NS}/{CLAIM}"])

    def full(self) -> bool:
        return bool(self.cluster.volume_usage.full(NS, CLAIM))

    def _update(self, kind: str, name: str, change: Callable[[dict[str, Any]], None]) -> None:
        obj = copy.deepcopy(self.store.get(kind, NS, name))
        change(obj)
        self.store.replace(obj)


@pytest.fixture
def twin(tmp_path: Path) -> Twin:
    return Twin(tmp_path / "repos")


def test_volume_filling_fails_writes_until_reverted_and_the_claim_expanded(twin: Twin) -> None:
    kind = twin.registry["volume-filling"]
    assert kind.family == "change" and kind.component_form == "service:<app>/<datastore>"
    now = twin.clock.now
    fault = Fault(id="F01", kind="volume-filling", family="change", app=NS, start=now, end=now + timedelta(hours=3),
                  params={"change": "cart-support-history"})
    before = twin.used()
    kind.inject(twin, fault)
    assert fault.component == "service:shop/cart-cache" and ("shop", "cart") in fault.impact
    for _ in range(20):
        twin.run(0.5)
        if kind.active(twin, fault):
            break
    assert kind.active(twin, fault) and not twin.mitigated(fault)
    sts = twin.store.get("StatefulSet", NS, "cart-cache")
    assert "--auto-aof-rewrite-percentage" in sts["spec"]["template"]["spec"]["containers"][0]["args"]
    # The claim fills within tens of minutes at the day's request rates.
    started = twin.clock.now
    for _ in range(120):
        if twin.full():
            break
        twin.run(0.5)
    assert twin.full(), f"not full after an hour: {twin.used() / 2**20:.0f} MiB used (from {before / 2**20:.0f})"
    assert twin.clock.now - started <= timedelta(minutes=30)
    twin.run(2)
    paged = [labels for labels, _, _ in volume_filling_up(twin.cluster, twin.apps)]
    assert paged == [{"namespace": NS, "app": NS, "service": "cart-cache", "persistentvolumeclaim": CLAIM}]
    assert twin.metric("cart", "error_ratio") > 0.05 and twin.metric("frontend", "error_ratio") > 0.05
    assert not twin.mitigated(fault)
    # Wrong: restarting the datastore's pod (the claim keeps the file), scaling it out (the new
    # pod's empty claim does not take the full one's writes).
    twin.store.delete("Pod", NS, "cart-cache-0")
    twin.run(3)
    assert twin.full() and not twin.mitigated(fault)
    assert twin.metric("cart", "error_ratio", 2) > 0.05
    twin._update("StatefulSet", "cart-cache", lambda o: o["spec"].update(replicas=2))
    twin.run(3)
    assert twin.full() and not twin.mitigated(fault)
    twin._update("StatefulSet", "cart-cache", lambda o: o["spec"].update(replicas=1))
    twin.run(2)
    # Wrong alone: the revert stops the growth, but the full log cannot be rewritten.
    assert fault.change is not None
    twin.pipelines.revert(NS, fault.change, "agent")
    twin.run(6)
    assert not kind.live(twin, fault)
    assert twin.full() and not twin.mitigated(fault)
    # The documented repair's second half: expand the claim (the class allows it).
    twin._update("PersistentVolumeClaim", CLAIM,
                 lambda o: o["spec"]["resources"]["requests"].update(storage="4Gi"))
    for _ in range(10):
        twin.run(0.5)
        if twin.mitigated(fault):
            break
    assert twin.mitigated(fault)
    twin.run(3)
    assert twin.metric("cart", "error_ratio", 2) < 0.01 and not twin.full()
    assert not list(volume_filling_up(twin.cluster, twin.apps))
    for _ in range(10):
        twin.run(1)
        assert twin.mitigated(fault)
    refs = {(r.kind, r.name) for r in kind.evidence(twin, fault)}
    assert ("PersistentVolumeClaim", CLAIM) in refs and ("StatefulSet", "cart-cache") in refs
    assert ("Deployment", "cart") in refs
    kind.cleanup(twin, fault)
    assert all(pod_is_active(p) for p in twin.active_pods(NS, "cart-cache"))


def test_cleanup_of_an_unrepaired_volume_filling_reverts_and_expands(twin: Twin) -> None:
    kind = twin.registry["volume-filling"]
    now = twin.clock.now
    fault = Fault(id="F01", kind="volume-filling", family="change", app=NS, start=now, end=now + timedelta(hours=3),
                  params={"change": "cart-support-history"})
    kind.inject(twin, fault)
    for _ in range(120):
        if twin.full():
            break
        twin.run(0.5)
    assert twin.full()
    kind.cleanup(twin, fault)
    twin.run(8)
    assert not twin.full() and twin.mitigated(fault)
    assert twin.metric("cart", "error_ratio", 2) < 0.01
