"""The twin's watch history, as real kubectl meets it on the marathon's backend: a kind's changes
are kept from the first request about it, so a list then a watch from the list's
resourceVersion gets every change in between; an older resourceVersion gets 410 Expired (what
a real server's watch cache answers once it has moved on), and clients list again."""

from __future__ import annotations

import json
from typing import Any

from support.kubectl import Kubectl
from support.twins import AgentSimulation


def _listed(kc: Kubectl, path: str) -> int:
    """A list's resourceVersion (what an informer or ``kubectl get -w`` watches from)."""
    return int(json.loads(kc("get", "--raw", path))["metadata"]["resourceVersion"])


def _watch(kc: Kubectl, path: str, rv: int) -> list[dict[str, Any]]:
    out = kc("get", "--raw", f"{path}?watch=1&resourceVersion={rv}&timeoutSeconds=1")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _replace_a_cart_pod(sim: AgentSimulation) -> str:
    """Delete a cart pod (as the node's eviction or a fault would) and let the controllers create,
    schedule and start its replacement; the deleted pod's name."""
    victim = sorted(p["metadata"]["name"] for p in sim.active("cart"))[0]
    sim.store.delete("Pod", "shop", victim)
    sim.run(60)
    return victim


def test_a_watch_from_a_lists_resource_version_gets_every_change_since(sim: AgentSimulation, kc: Kubectl) -> None:
    rv = _listed(kc, "/api/v1/namespaces/shop/pods")
    victim = _replace_a_cart_pod(sim)
    events = _watch(kc, "/api/v1/namespaces/shop/pods", rv)
    assert events and all(int(e["object"]["metadata"]["resourceVersion"]) > rv for e in events)
    assert ("DELETED", victim) in {(e["type"], e["object"]["metadata"]["name"]) for e in events}
    assert any(e["type"] == "ADDED" and e["object"]["metadata"]["name"].startswith("cart-") for e in events)


def test_a_resource_version_from_before_the_first_request_about_a_kind_is_expired(
        sim: AgentSimulation, kc: Kubectl) -> None:
    # Nothing asked about Endpoints yet; their changes of the warm-up are not kept for watches.
    (expired,) = _watch(kc, "/api/v1/namespaces/shop/endpoints", 2)
    assert expired["type"] == "ERROR"
    assert expired["object"]["code"] == 410 and expired["object"]["reason"] == "Expired"
    # ... and the client lists again and watches from there, as kubectl and informers do.
    rv = _listed(kc, "/api/v1/namespaces/shop/endpoints")
    _replace_a_cart_pod(sim)
    events = _watch(kc, "/api/v1/namespaces/shop/endpoints", rv)
    assert ("MODIFIED", "cart") in {(e["type"], e["object"]["metadata"]["name"]) for e in events}
