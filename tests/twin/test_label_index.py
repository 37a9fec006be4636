"""LabelIndex: the live objects of one kind by (namespace, one label's value), in list order,
kept from the store's changes; a group's version moves with any change to a member."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from pytest_sremarathon.k8s.store import Store
from pytest_sremarathon.twin.label_index import LabelIndex


def _store() -> Store:
    store = Store(clock=lambda: datetime(2026, 1, 5, tzinfo=timezone.utc))
    for ns in ("a", "b"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return store


def _pod(name: str, ns: str = "a", **labels: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"containers": []}, "status": {"phase": "Pending"}}


def _names(objs: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def test_groups_follow_creates_relabels_replaces_and_deletes_in_list_order() -> None:
    store = _store()
    store.create(_pod("z", app="web"))
    index = LabelIndex(store, "Pod", "app")  # seeded from what is stored already
    store.create(_pod("m", app="web"))
    store.create(_pod("q", app="db"))
    store.create(_pod("a", ns="b", app="web"))
    store.create(_pod("n"))  # no label: in no group
    assert _names(index.members("a", "web")) == _names(store.list("Pod", "a", labels={"app": "web"})) == ["m", "z"]
    assert _names(index.members("b", "web")) == ["a"]

    before = index.version("a", "web")
    db = index.version("a", "db")
    pod = store.get("Pod", "a", "m")
    assert pod is not None
    pod["metadata"]["labels"]["app"] = "db"  # relabelled in place, then published
    store.touch(pod)
    assert _names(index.members("a", "web")) == ["z"]
    assert _names(index.members("a", "db")) == ["m", "q"]
    assert index.version("a", "web") > before and index.version("a", "db") > db

    replaced = dict(store.get("Pod", "a", "z") or {}, status={"phase": "Running"})
    store.replace(replaced, check_rv=False)
    assert index.members("a", "web")[0] is replaced

    version = index.version("a", "web")
    store.touch(store.get("Pod", "a", "q") or {})  # another group's change
    assert index.version("a", "web") == version
    store.delete("Pod", "a", "z")
    assert index.members("a", "web") == [] and index.version("a", "web") > version
    assert index.members("c", "web") == [] and index.version("c", "web") == 0


def test_a_touch_of_an_object_no_longer_stored_changes_no_group() -> None:
    store = _store()
    index = LabelIndex(store, "Pod", "app")
    gone = store.create(_pod("x", app="web"))
    store.delete("Pod", "a", "x")
    version = index.version("a", "web")
    store.touch(gone)
    assert index.members("a", "web") == [] and index.version("a", "web") == version
