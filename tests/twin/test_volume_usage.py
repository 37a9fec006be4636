"""A claim's volume fills with its datastore's writes, as the kubelet reports it
(``kubelet_volume_stats_*`` in the cluster's Prometheus), and a full volume fails the writes:
the datastore's callers see errors; restarting the pod frees nothing; expanding the claim does.
The datastore here is the shop's cart-cache, a StatefulSet with a claim per pod (for a full
volume, recreated by the operator with a small claim)."""

from __future__ import annotations

import copy
import json
import urllib.parse
from typing import Any

import pytest
from support.admission import RecordingAdmission
from support.kubectl import Kubectl, kubectl_for
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.scenario import load_scenario

TOKEN = "volume-agent-token"
NS = "shop"


@pytest.fixture
def sim(tmp_path: Any) -> Any:
    s = BackendTwin(load_scenario(DEFAULT_SCENARIO), tmp_path, admission=RecordingAdmission(), tokens={TOKEN: "agent"})
    s.kubeconfig = s.backend.server.write_kubeconfig(tmp_path / "sim.kubeconfig", TOKEN)  # type: ignore[attr-defined]
    s.kc = kubectl_for(s.kubeconfig, tmp_path / "cache")  # type: ignore[attr-defined]
    s.run(60)
    yield s
    s.close()


def _resize_cart_cache_claim(sim: Any, kc: Kubectl, size: str) -> None:
    """The operator recreates the shop's cart-cache (a StatefulSet with a 1Gi claim per pod) with
    claims of ``size``: a claim cannot shrink, so the set and its claim go and come back."""
    sts = kc.json("get", "sts", "cart-cache", "-n", NS)
    sim.store.delete("StatefulSet", NS, "cart-cache")
    sim.run(30)
    sim.store.delete("PersistentVolumeClaim", NS, "data-cart-cache-0")
    sim.run(30)
    fresh = {"apiVersion": "apps/v1", "kind": "StatefulSet",
             "metadata": {"name": "cart-cache", "namespace": NS, "labels": sts["metadata"].get("labels") or {}},
             "spec": copy.deepcopy(sts["spec"])}
    fresh["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] = size
    for claim in fresh["spec"]["volumeClaimTemplates"]:
        claim.pop("status", None)
    kc("apply", "-f", "-", input=json.dumps(fresh))


def _query(kc: Kubectl, promql: str) -> dict[str, float]:
    raw = kc("get", "--raw", "/prometheus/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    result = json.loads(raw)["data"]["result"]
    return {r["metric"].get("persistentvolumeclaim", r["metric"].get("service", "")): float(r["value"][1])
            for r in result}


def test_used_bytes_grow_with_the_datastores_writes(sim: Any) -> None:
    kc: Kubectl = sim.kc
    sim.run(120)
    first = _query(kc, "kubelet_volume_stats_used_bytes")["data-cart-cache-0"]
    assert _query(kc, "kubelet_volume_stats_capacity_bytes")["data-cart-cache-0"] == 2**30
    sim.run(600)
    later = _query(kc, "kubelet_volume_stats_used_bytes")["data-cart-cache-0"]
    assert later > first
    available = _query(kc, "kubelet_volume_stats_available_bytes")["data-cart-cache-0"]
    assert available == 2**30 - later
    assert _query(kc, "kubelet_volume_stats_inodes_free")["data-cart-cache-0"] > 0
    assert "data-cart-cache-0" in _query(kc, "kubelet_volume_stats_used_bytes")


def test_a_full_volume_fails_writes_until_the_claim_grows(sim: Any) -> None:
    kc: Kubectl = sim.kc
    _resize_cart_cache_claim(sim, kc, "7Mi")  # the dataset takes 6 MiB: little room for the log
    sim.run(120)
    usage = sim.cluster.volume_usage
    for _ in range(120):
        if usage.full(NS, "data-cart-cache-0"):
            break
        sim.run(60)
    assert usage.full(NS, "data-cart-cache-0")
    sim.run(120)
    assert _query(kc, "kubelet_volume_stats_available_bytes")["data-cart-cache-0"] == 0
    errors = sim.cluster.metrics.latest(NS, "cart", "error_ratio")
    assert errors > 0.05  # the cart's writes to its cache fail
    kc("delete", "pod", "cart-cache-0", "-n", NS)
    sim.run(120)
    assert usage.full(NS, "data-cart-cache-0")  # a restart frees nothing: the log is on the volume
    kc("patch", "pvc", "data-cart-cache-0", "-n", NS, "-p", '{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}')
    sim.run(120)
    assert not usage.full(NS, "data-cart-cache-0")
    sim.run(180)
    assert sim.cluster.metrics.latest(NS, "cart", "error_ratio") < 0.01
