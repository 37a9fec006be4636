"""The apps' persistent datastores run as their originals' charts run them: a StatefulSet per
store (redis with its append-only file, mongo), each pod with its own Bound claim that the
kubelet reports usage for, governed by a headless Service; the memcached caches, which keep
nothing, stay Deployments (as in DeathStarBench). What ``kubectl get sts,pvc`` shows after the
warm-up, and the ``kubelet_volume_stats_*`` series in the cluster's Prometheus."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest
from support.admission import RecordingAdmission
from support.kubectl import Kubectl, kubectl_for
from support.twins import DEFAULT_SCENARIO, BackendTwin

from pytest_sremarathon.scenario import load_scenario

TOKEN = "datastore-agent-token"
PERSISTENT = {"shop": ["cart-cache"],
              "hotel": ["mongodb-hotels", "mongodb-reservation", "mongodb-user"],
              "social": ["post-storage-db", "social-graph-db", "timeline-cache"]}
CACHES = {"hotel": ["memcached-profile", "memcached-rate", "memcached-reserve"], "social": ["post-storage-cache"]}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("datastores")
    s = BackendTwin(load_scenario(DEFAULT_SCENARIO), tmp, admission=RecordingAdmission(), tokens={TOKEN: "agent"})
    s.kubeconfig = s.backend.server.write_kubeconfig(tmp / "sim.kubeconfig", TOKEN)  # type: ignore[attr-defined]
    s.kc = kubectl_for(s.kubeconfig, tmp / "cache")  # type: ignore[attr-defined]
    s.run(300)  # the warm-up
    yield s
    s.close()


def test_each_apps_persistent_datastores_are_statefulsets_with_bound_claims(sim: Any) -> None:
    kc: Kubectl = sim.kc
    for ns, stores in PERSISTENT.items():
        rows = [r.split() for r in kc("get", "sts", "-n", ns).splitlines()]
        assert rows[0] == ["NAME", "READY", "AGE"]
        assert sorted((r[0], r[1]) for r in rows[1:]) == [(s, "1/1") for s in stores], ns
        claims = [r.split() for r in kc("get", "pvc", "-n", ns).splitlines()[1:]]
        # NAME STATUS VOLUME CAPACITY ACCESS-MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE
        assert sorted(c[0] for c in claims) == [f"data-{s}-0" for s in stores], ns
        for c in claims:
            assert c[1] == "Bound" and c[2].startswith("pvc-") and c[3] == "1Gi" and c[4] == "RWO", c
            assert c[5] == "standard-regional", c  # replicated in both zones: a lost zone strands nothing
        for store in stores:
            sts = kc.json("get", "sts", store, "-n", ns)
            assert sts["spec"]["serviceName"] == f"{store}-headless"
            headless = kc.json("get", "svc", f"{store}-headless", "-n", ns)
            assert headless["spec"]["clusterIP"] == "None"
            pod = kc.json("get", "pod", f"{store}-0", "-n", ns)
            assert [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                    if "persistentVolumeClaim" in v] == [f"data-{store}-0"]
            assert kc("get", "deploy", store, "-n", ns, "--ignore-not-found") == ""
    for ns, caches in CACHES.items():
        rows = [r.split() for r in kc("get", "deploy", *caches, "-n", ns).splitlines()[1:]]
        assert [(r[0], r[1]) for r in rows] == [(c, "1/1") for c in caches], ns


def test_the_kubelet_reports_every_datastore_claims_usage(sim: Any) -> None:
    kc: Kubectl = sim.kc

    def query(promql: str) -> dict[tuple[str, str], float]:
        raw = kc("get", "--raw", "/prometheus/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        return {(r["metric"]["namespace"], r["metric"]["persistentvolumeclaim"]): float(r["value"][1])
                for r in json.loads(raw)["data"]["result"]}

    want = {(ns, f"data-{s}-0") for ns, stores in PERSISTENT.items() for s in stores}
    capacity = query("kubelet_volume_stats_capacity_bytes")
    used = query("kubelet_volume_stats_used_bytes")
    available = query("kubelet_volume_stats_available_bytes")
    assert set(capacity) == set(used) == set(available) == want
    for key in want:
        assert capacity[key] == 2**30 and 0 < used[key] < capacity[key] / 4, key
        assert available[key] == capacity[key] - used[key], key
