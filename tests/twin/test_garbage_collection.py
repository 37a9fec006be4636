"""The garbage collector deletes what lost its controlling owner, also long after the last
collection that found something (it only looks again when an owner went away or an object
was written whose owner was missing)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from test_cluster_behaviour import Shop

from pytest_sremarathon.k8s.objects import pod_is_active


def _cart_pods(shop: Shop) -> list[dict[str, Any]]:
    return [p for p in shop.store.list("Pod", "shop", labels={"app": "cart"}) if pod_is_active(p)]


@pytest.fixture
def shop(tmp_path: Path) -> Any:
    s = Shop(tmp_path)
    s.run(300)  # quiet passes: nothing to collect
    yield s
    s.close()


def test_a_pod_written_with_a_missing_owner_is_collected_at_the_next_pass(shop: Shop) -> None:
    pod = copy.deepcopy(_cart_pods(shop)[0])
    md = pod["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        md.pop(key, None)
    md["name"] = "cart-stray"
    md["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "cart-gone", "uid": "no-such-uid",
                              "controller": True}]
    shop.store.create(pod)
    shop.run(30)
    assert shop.store.get("Pod", "shop", "cart-stray") is None


def test_the_pods_of_a_deleted_replicaset_are_collected(shop: Shop) -> None:
    owned = [p["metadata"]["name"] for p in _cart_pods(shop)]
    rs = next(r for r in shop.store.list("ReplicaSet", "shop") if r["metadata"]["name"].startswith("cart-")
              and r["spec"].get("replicas"))
    with shop.store.lock:  # gone without a cascading delete: what the collector is for
        shop.store.delete("ReplicaSet", "shop", rs["metadata"]["name"])
    shop.run(60)
    left = {p["metadata"]["name"] for p in shop.store.list("Pod", "shop")}
    assert owned and not left & set(owned)
    assert _cart_pods(shop)  # the Deployment made a new ReplicaSet and pods
