"""The twin's controllers react to an API write in the same virtual moment, as a real cluster's
do within moments: real kubectl reads, right after its write and before any tick, the new
ReplicaSet and its revision, a deleted pod's scheduled replacement and the Endpoints without it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.kubectl import Kubectl, kubectl_for
from support.twins import AgentSimulation

TOKEN = "reactions-agent-token"
REVISION = "deployment.kubernetes.io/revision"



def _get(kc: Kubectl, *args: str) -> Any:
    return json.loads(kc("get", *args, "-o", "json"))


def test_rollout_history_and_undo_work_right_after_set_image(sim: AgentSimulation, kc: Kubectl) -> None:
    t0 = sim.clock.now
    kc("set", "image", "deployment/ad", "ad=registry.sremarathon.local/shop/ad:v2", "-n", "shop")
    # No tick has run: the new ReplicaSet, its revision and its scheduled pods are there already.
    assert sim.clock.now == t0
    assert _get(kc, "deployment/ad", "-n", "shop")["metadata"]["annotations"][REVISION] == "2"
    history = kc("rollout", "history", "deployment/ad", "-n", "shop")
    assert [line.split()[0] for line in history.splitlines()[2:] if line.strip()] == ["1", "2"]
    new = [p for p in sim.active("ad") if p["spec"]["containers"][0]["image"].endswith(":v2")]
    assert new and all(p["spec"].get("nodeName") for p in new)
    out = kc("rollout", "undo", "deployment/ad", "-n", "shop")
    assert "rolled back" in out
    d = _get(kc, "deployment/ad", "-n", "shop")
    assert d["metadata"]["annotations"][REVISION] == "3"
    assert not d["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v2")


def test_a_deleted_pod_is_replaced_scheduled_and_gone_from_the_endpoints_at_once(sim: AgentSimulation, kc: Kubectl) -> None:
    before = {p["metadata"]["name"] for p in sim.active("cart")}
    victim = sorted(before)[0]
    kc("delete", "pod", victim, "-n", "shop", "--wait=false")
    after = {p["metadata"]["name"]: p for p in sim.active("cart")}
    assert victim not in after and len(after) == len(before)
    (replacement,) = set(after) - before
    assert after[replacement]["spec"].get("nodeName")
    endpoints = _get(kc, "endpoints/cart", "-n", "shop")
    targets = {a["targetRef"]["name"] for s in endpoints.get("subsets") or []
               for a in (s.get("addresses") or []) + (s.get("notReadyAddresses") or [])}
    assert victim not in targets


def test_scaling_creates_scheduled_pods_at_once(sim: AgentSimulation, kc: Kubectl) -> None:
    kc("scale", "deployment/email", "--replicas=4", "-n", "shop")
    pods = sim.active("email")
    assert len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods)
    assert _get(kc, "replicaset", "-n", "shop", "-l", "app=email")["items"][0]["spec"]["replicas"] == 4


def test_the_reaction_is_deterministic(tmp_path: Path) -> None:
    """Same twin, same writes: the same pods on the same nodes."""
    seen = []
    for run in ("a", "b"):
        (tmp_path / run).mkdir()
        s = AgentSimulation(tmp_path / run, TOKEN)
        try:
            kc = kubectl_for(s.kubeconfig, tmp_path / run / "cache")
            kc("scale", "deployment/email", "--replicas=3", "-n", "shop")
            kc("set", "image", "deployment/ad", "ad=registry.sremarathon.local/shop/ad:v2", "-n", "shop")
            s.run(60)
            seen.append(sorted((p["metadata"]["name"], p["spec"].get("nodeName"), p["metadata"]["resourceVersion"])
                               for p in s.store.list("Pod", "shop")))
        finally:
            s.close()
    assert seen[0] == seen[1]
