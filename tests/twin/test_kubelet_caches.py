"""The kubelet's and the event recorder's shortcuts give what the long way gives: the module
globals counted toward a container's memory, the Service link variables, the uids and times
the store writes, and the events the TTL expires."""

from __future__ import annotations

import types
import uuid
from collections import deque
from datetime import datetime, timedelta, timezone
from typing import Any

from pytest_sremarathon.clock import VirtualClock
from pytest_sremarathon.k8s.objects import EventRecorder
from pytest_sremarathon.k8s.store import Store, _iso, _uuid5
from pytest_sremarathon.twin.containers import service_env
from pytest_sremarathon.twin.kubelet import BASE_MEMORY, RETAINED_ENTRY_BYTES, Container, Kubelet

EPOCH = datetime(2026, 1, 5, tzinfo=timezone.utc)


def _store() -> Store:
    store = Store(VirtualClock(EPOCH))
    for ns in ("default", "shop"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return store


def test_uids_are_uuid5_of_the_counter() -> None:
    ns = uuid.UUID("6f1c0b7e-5d0e-4c4e-9d7a-2f6a1d3b9e10")
    for n in list(range(2000)) + [10**12, 2**64]:
        assert _uuid5(ns, str(n)) == str(uuid.uuid5(ns, str(n)))
    assert _uuid5(ns, "päd") == str(uuid.uuid5(ns, "päd"))


def test_iso_of_each_time_even_right_after_another() -> None:
    a, b = EPOCH, EPOCH + timedelta(seconds=1, microseconds=5)
    for t in (a, a, b, a, b, b, EPOCH.replace(tzinfo=None)):
        assert _iso(t) == t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _measure(kubelet: Kubelet, c: Container) -> int:
    return (kubelet._measure_memory(c) - BASE_MEMORY) // RETAINED_ENTRY_BYTES


def test_memory_follows_globals_bound_rebound_and_deleted() -> None:
    kubelet = Kubelet.__new__(Kubelet)
    module = types.ModuleType("svc")
    module.__dict__["__builtins__"] = {"a": 1}  # never counted
    module.__dict__.update(CACHE={}, SEEN=[1, 2], QUEUE=deque([1]), LIMIT=3, handle=len)
    c = Container("uid", "svc", "registry/svc@sha256:0", "shop", "svc", module=module)
    assert _measure(kubelet, c) == 0 + 2 + 1
    module.CACHE["k"] = 1  # grown in place: the same globals, the same types
    assert _measure(kubelet, c) == 1 + 2 + 1
    module.LIMIT = {1: 1, 2: 2}  # rebound to another type
    assert _measure(kubelet, c) == 1 + 2 + 1 + 2
    module.SEEN = (1, 2, 3)  # no longer counted
    assert _measure(kubelet, c) == 1 + 1 + 2
    del module.QUEUE
    module.EXTRA = {3}
    assert _measure(kubelet, c) == 1 + 2 + 1
    module.__dict__["__all__"] = ["x"]  # dunder names never count
    assert _measure(kubelet, c) == 1 + 2 + 1


def test_service_links_follow_service_changes() -> None:
    from pytest_sremarathon.twin.containers import Runtime

    store = _store()
    runtime = Runtime.__new__(Runtime)
    runtime.store, runtime._links = store, {}

    def svc(name: str, ns: str, ip: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterIP": ip, "ports": [{"port": 80}]}}

    assert runtime._service_links("shop", True) == service_env(store, "shop", True)
    cart = store.create(svc("cart", "shop", "10.96.0.12"))
    assert runtime._service_links("shop", True) == service_env(store, "shop", True)
    assert "CART_SERVICE_HOST" in runtime._service_links("shop", True)
    cart["spec"]["ports"] = [{"port": 8080}]
    store.touch(cart)
    assert runtime._service_links("shop", True)["CART_SERVICE_PORT"] == "8080"
    store.create(svc("kubernetes", "default", "10.96.0.1"))  # the API server's, in default
    assert runtime._service_links("shop", True) == service_env(store, "shop", True)
    assert runtime._service_links("shop", False) == service_env(store, "shop", False)
    store.delete("Service", "shop", "cart")
    assert "CART_SERVICE_HOST" not in runtime._service_links("shop", True)


def test_expire_deletes_the_old_events_in_list_order() -> None:
    clock = VirtualClock(EPOCH)
    store = Store(clock)
    for ns in ("default", "b", "a"):
        store.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    events = EventRecorder(store, ttl_seconds=60)
    pods = [store.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
                          "spec": {"containers": []}}) for ns, name in (("b", "p"), ("a", "q"), ("a", "p"))]
    for pod in pods:
        events.record(pod, "Normal", "Old", "old", "kubelet")
    clock.advance(30)
    events.record(pods[0], "Normal", "Old", "old", "kubelet")  # aggregated: seen again, kept
    events.record(pods[1], "Normal", "New", "new", "kubelet")
    clock.advance(30.5)
    deleted: list[tuple[str, str]] = []
    store.listeners.append(lambda type_, obj: deleted.append((obj["metadata"]["namespace"], obj["metadata"]["name"]))
                           if type_ == "DELETED" else None)
    before = [(e["metadata"]["namespace"], e["metadata"]["name"]) for e in store.list("Event")]
    events.expire()
    assert deleted == sorted(deleted) and len(deleted) == 2
    assert [k for k in before if k not in deleted] == [(e["metadata"]["namespace"], e["metadata"]["name"])
                                                        for e in store.list("Event")]
    events.record(pods[2], "Normal", "Old", "old", "kubelet")  # its old event went: a new one
    fresh = [e for e in store.list("Event") if e["involvedObject"]["uid"] == pods[2]["metadata"]["uid"]]
    assert len(fresh) == 1 and fresh[0]["count"] == 1


def test_images_are_the_ones_made_from_the_reference_and_its_artifact() -> None:
    from pytest_sremarathon.runtime.code import Artifact, ArtifactStore
    from pytest_sremarathon.twin import images
    from pytest_sremarathon.twin.containers import Runtime

    runtime = Runtime.__new__(Runtime)
    runtime.artifacts, runtime._images = ArtifactStore(), {}
    artifact = Artifact("shop", "cart", "sha256:" + "c" * 64, "services/cart.py", {"services/cart.py": "X = 1\n"})
    ref = artifact.image
    assert runtime.image_of(None, ref) == images.datastore_image(ref)  # not built (yet)
    runtime.artifacts.put(artifact)
    assert runtime.image_of(None, ref) == images.runtime_image(artifact)
    assert runtime.image_of(None, ref) is runtime.image_of(None, ref)
    for other in ("busybox:1.36", "redis:7.2-alpine"):
        made = images.utility_image(other) or images.datastore_image(other)
        assert runtime.image_of(None, other) == made


def test_a_script_parses_the_same_every_time() -> None:
    import pytest

    from pytest_sremarathon.exec.parse import ShSyntaxError, parse
    from pytest_sremarathon.exec.shell import _parse_script

    src = 'for i in 1 2; do echo "$i" > /tmp/x; done && date'
    assert _parse_script(src) == parse(src) and _parse_script(src) is _parse_script(src)
    for _ in range(2):
        with pytest.raises(ShSyntaxError):
            _parse_script("if true; then")
