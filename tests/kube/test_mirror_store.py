"""The kube backend's mirror of a real cluster answers per-namespace lists with what the last
sync saw (the alert rules list a namespace's pods every tick)."""

from __future__ import annotations

from datetime import datetime, timezone

from pytest_sremarathon.kube.cluster import MirrorStore


def _pod(ns: str, name: str, rv: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": ns, "name": name, "resourceVersion": rv},
            "spec": {}, "status": {}}


def test_a_namespace_list_shows_the_pods_of_the_latest_sync() -> None:
    store = MirrorStore(lambda: datetime(2026, 1, 5, tzinfo=timezone.utc))
    store.sync("Pod", [_pod("shop", "cart-1", "10")])
    assert [p["metadata"]["name"] for p in store.list("Pod", "shop")] == ["cart-1"]
    store.sync("Pod", [_pod("shop", "cart-1", "10"), _pod("shop", "cart-2", "11"), _pod("hotel", "geo-1", "12")])
    assert [p["metadata"]["name"] for p in store.list("Pod", "shop")] == ["cart-1", "cart-2"]
    store.sync("Pod", [_pod("hotel", "geo-1", "12")])
    assert store.list("Pod", "shop") == []
    assert [p["metadata"]["name"] for p in store.list("Pod", "hotel")] == ["geo-1"]
