"""HorizontalPodAutoscaler, PodDisruptionBudget and PriorityClass on the running twin, as a
user meets them with the real kubectl and the official Python client: the autoscaler acting
on the simulated CPU and request rates, eviction and ``kubectl drain`` held by a budget, and
the scheduler preempting lower-priority pods."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from kubernetes import client as k8s
from support.kubectl import Kubectl
from support.twins import AgentSimulation

from pytest_sremarathon.k8s.objects import condition, pod_is_active


def _hpa(name: str, metrics: list[dict[str, Any]], lo: int, hi: int, **spec: Any) -> str:
    return json.dumps({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                       "metadata": {"name": name, "namespace": "shop"},
                       "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                                "minReplicas": lo, "maxReplicas": hi, "metrics": metrics, **spec}})


def _cpu(percent: int) -> dict[str, Any]:
    return {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                       "averageUtilization": percent}}}


def _replicas(sim: AgentSimulation, name: str) -> int:
    d = sim.store.get("Deployment", "shop", name)
    assert d is not None
    return int(d["spec"]["replicas"])


def test_hpa_scales_up_on_cpu_utilisation_and_kubectl_shows_it(sim: AgentSimulation, kc: Kubectl) -> None:
    assert _replicas(sim, "ad") == 2
    kc("apply", "-f", "-", input=_hpa("ad", [_cpu(1)], 2, 4))  # the ad service runs well above 1 % of its request
    sim.run(120)
    assert _replicas(sim, "ad") == 4  # ceil(2 × usage/1 %) is above 4: clamped at maxReplicas
    rows = kc("get", "hpa", "-n", "shop").splitlines()
    assert rows[0].split() == ["NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"]
    assert re.match(r"ad\s+Deployment/ad\s+cpu: \d+%/1%\s+2\s+4\s+4\s", rows[1]), rows[1]
    described = kc("describe", "hpa", "ad", "-n", "shop")
    assert "SuccessfulRescale" in described and "New size: 4; reason: cpu resource utilization" in described
    assert re.search(r"ScalingLimited\s+True\s+TooManyReplicas", described), described
    hpa = k8s.AutoscalingV2Api(sim_client(sim)).read_namespaced_horizontal_pod_autoscaler("ad", "shop")
    assert hpa.status.desired_replicas == 4 and hpa.status.current_metrics[0].resource.current.average_utilization > 1
    assert {c.type for c in hpa.status.conditions} == {"AbleToScale", "ScalingActive", "ScalingLimited"}


def sim_client(sim: AgentSimulation) -> Any:
    from kubernetes import config
    return config.new_client_from_config(str(sim.kubeconfig))


def _rate(average: str) -> dict[str, Any]:
    return {"type": "Pods", "pods": {"metric": {"name": "http_requests_per_second"},
                                     "target": {"type": "AverageValue", "averageValue": average}}}


def test_hpa_undoes_a_manual_scale(sim: AgentSimulation, kc: Kubectl) -> None:
    kc("apply", "-f", "-", input=_hpa("ad", [_cpu(95)], 2, 5))  # ad's pods use far less than 95 % of a request
    sim.run(60)
    assert _replicas(sim, "ad") == 2  # the metrics ask for 1: held at minReplicas
    kc("scale", "deployment/ad", "--replicas=4", "-n", "shop")
    assert _replicas(sim, "ad") == 4
    sim.run(60)
    # The new pods have no measurement yet and count as at target on the way down, so the first
    # sync may only take one step, and that recommendation holds for the 300 s window; then the
    # size is back where the HPA wants it, as a real cluster's HPA undoes a manual scale.
    assert _replicas(sim, "ad") < 4
    sim.run(330)
    assert _replicas(sim, "ad") == 2
    assert "reason: All metrics below target" in kc("describe", "hpa", "ad", "-n", "shop")


def test_hpa_scale_down_waits_out_the_stabilization_window(sim: AgentSimulation, kc: Kubectl) -> None:
    kc("apply", "-f", "-", input=_hpa("currency", [_rate("100m")], 2, 5))
    sim.run(60)
    assert _replicas(sim, "currency") == 5
    kc("apply", "-f", "-", input=_hpa("currency", [_rate("1k")], 2, 5))  # now far above what is needed
    sim.run(120)
    assert _replicas(sim, "currency") == 5  # the last 300 s recommended 5: no scale-down yet
    assert re.search(r"AbleToScale\s+True\s+ScaleDownStabilized", kc("describe", "hpa", "currency", "-n", "shop"))
    sim.run(270)
    assert _replicas(sim, "currency") == 2


def test_hpa_scales_on_the_request_rate_of_its_pods(sim: AgentSimulation, kc: Kubectl) -> None:
    kc("apply", "-f", "-", input=_hpa("currency", [_rate("500m")], 2, 6))
    sim.run(90)
    assert _replicas(sim, "currency") == 6  # currency serves far more than half a request per second a pod
    row = kc("get", "hpa", "currency", "-n", "shop", "--no-headers")
    assert re.search(r"\d[\dm]*/500m", row), row
    # A metric no adapter serves: the HPA says so and leaves the size alone.
    unknown = {"type": "Pods", "pods": {"metric": {"name": "queue_depth"},
                                        "target": {"type": "AverageValue", "averageValue": "5"}}}
    kc("apply", "-f", "-", input=_hpa("email", [unknown], 2, 6))
    sim.run(60)
    hpa = sim.store.get("HorizontalPodAutoscaler", "shop", "email")
    assert hpa is not None and _replicas(sim, "email") == 2
    active = condition(hpa, "ScalingActive")
    assert active is not None and active["status"] == "False" and active["reason"] == "FailedGetPodsMetric"


def test_hpa_validation_matches_the_real_server(sim: AgentSimulation, kc: Kubectl) -> None:
    bad = kc.run("apply", "-f", "-", input=_hpa("ad", [_cpu(50)], 5, 2), check=False)
    assert bad.returncode != 0 and "spec.maxReplicas" in bad.stderr and "minReplicas" in bad.stderr


def test_a_budget_blocks_kubectl_drain_until_it_allows_a_disruption(sim: AgentSimulation, kc: Kubectl) -> None:
    kc("delete", "pdb", "cart", "-n", "shop")  # the shop's own budget (maxUnavailable 1)
    kc("create", "poddisruptionbudget", "cart", "--selector=app=cart", "--min-available=2", "-n", "shop")
    sim.run(30)
    rows = kc("get", "pdb", "-n", "shop").splitlines()
    assert rows[0].split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert next(r for r in rows if r.startswith("cart ")).split()[:4] == ["cart", "2", "N/A", "0"]
    assert next(r for r in rows if r.startswith("ad ")).split()[:4] == ["ad", "N/A", "1", "1"]
    node = next(p["spec"]["nodeName"] for p in sim.pods("cart") if pod_is_active(p))
    blocked = kc.run("drain", node, "--ignore-daemonsets", "--timeout=11s", check=False)
    assert blocked.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget." in blocked.stderr
    assert "will retry after 5s" in blocked.stderr and "global timeout reached" in blocked.stderr
    assert any(p["spec"].get("nodeName") == node for p in sim.pods("cart") if pod_is_active(p))
    # The official client sees the refusal as the real server words it.
    v1 = k8s.CoreV1Api(sim_client(sim))
    victim = next(p["metadata"]["name"] for p in sim.pods("cart") if p["spec"].get("nodeName") == node)
    with pytest.raises(k8s.ApiException) as err:
        v1.create_namespaced_pod_eviction(victim, "shop", {"metadata": {"name": victim, "namespace": "shop"}})
    assert err.value.status == 429 and json.loads(err.value.body)["reason"] == "TooManyRequests"
    assert "needs 2 healthy pods and has 2 currently" in err.value.body
    kc("patch", "pdb", "cart", "-n", "shop", "--type=merge", "-p",
       '{"spec":{"minAvailable":null,"maxUnavailable":1}}')
    sim.run(30)
    kc("drain", node, "--ignore-daemonsets", "--timeout=20s")
    assert not any(p["spec"].get("nodeName") == node for p in sim.pods("cart") if pod_is_active(p))
    pdb = k8s.PolicyV1Api(sim_client(sim)).read_namespaced_pod_disruption_budget("cart", "shop")
    assert pdb.status.expected_pods == 2 and pdb.status.desired_healthy == 1


def test_priority_classes_admission_and_preemption(sim: AgentSimulation, kc: Kubectl) -> None:
    rows = kc("get", "pc").splitlines()
    assert rows[0].split() == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    shown = [r.split()[:3] for r in rows[1:]]
    assert ["system-cluster-critical", "2000000000", "false"] in shown
    assert ["system-node-critical", "2000001000", "false"] in shown
    assert ["shop-storefront", "100000", "false"] in shown  # the shop's own, on its frontend
    scheduling = k8s.SchedulingV1Api(sim_client(sim))
    with pytest.raises(k8s.ApiException) as err:
        scheduling.create_priority_class({"metadata": {"name": "too-high"}, "value": 2000000001})
    assert err.value.status == 422 and "maximum allowed value of a user defined priority" in err.value.body
    kc("create", "priorityclass", "batch-critical", "--value=100000", "--description=batch")
    v1 = k8s.CoreV1Api(sim_client(sim))
    with pytest.raises(k8s.ApiException) as err:
        v1.create_namespaced_pod("shop", {"metadata": {"name": "nope"}, "spec": {
            "priorityClassName": "missing", "containers": [{"name": "c", "image": "busybox"}]}})
    assert err.value.status == 403 and "no PriorityClass with name missing was found" in err.value.body
    # A pod that fits only if lower-priority pods leave worker-a1.
    hog = {"metadata": {"name": "hog"}, "spec": {
        "priorityClassName": "batch-critical", "nodeSelector": {"kubernetes.io/hostname": "worker-a1"},
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                        "resources": {"requests": {"cpu": "3500m"}}}]}}
    before = {p["metadata"]["name"]: p["spec"].get("priority", 0) for p in sim.store.list("Pod")
              if p["spec"].get("nodeName") == "worker-a1" and pod_is_active(p)}
    created = v1.create_namespaced_pod("default", hog)  # the shop's quota has no room for it
    assert created.spec.priority == 100000
    sim.run(30)
    pod = v1.read_namespaced_pod("hog", "default")
    assert pod.spec.node_name == "worker-a1" and pod.status.nominated_node_name == "worker-a1"
    after = {p["metadata"]["name"] for p in sim.store.list("Pod") if p["spec"].get("nodeName") == "worker-a1"
             and pod_is_active(p)}
    preempted = set(before) - after
    assert preempted and all(before[name] < 100000 for name in preempted)  # only lower priorities go
    events = kc("get", "events", "-A", "--field-selector=reason=Preempted", "-o", "json")
    messages = [e["message"] for e in json.loads(events)["items"]]
    assert messages and all(m.startswith("Preempted by pod ") and m.endswith("on node worker-a1") for m in messages)
    # The replacements are of lower priority than the hog: they cannot preempt it back.
    sim.run(60)
    assert v1.read_namespaced_pod("hog", "default").spec.node_name == "worker-a1"


def test_kubectl_autoscale_creates_a_v1_hpa_served_from_the_v2_object(sim: AgentSimulation, kc: Kubectl) -> None:
    """kubectl 1.32's ``autoscale`` POSTs ``autoscaling/v1``; both versions show one object."""
    kc("delete", "hpa", "ad", "-n", "shop")  # the shop's own autoscaler
    kc("autoscale", "deployment/ad", "--cpu-percent=1", "--min=2", "--max=3", "-n", "shop")
    stored = sim.store.get("HorizontalPodAutoscaler", "shop", "ad")
    assert stored is not None and stored["apiVersion"] == "autoscaling/v2"
    assert stored["spec"]["metrics"][0]["resource"]["target"] == {"type": "Utilization", "averageUtilization": 1}
    sim.run(60)
    assert _replicas(sim, "ad") == 3
    v1 = kc.json("get", "horizontalpodautoscalers.v1.autoscaling", "ad", "-n", "shop")
    assert v1["apiVersion"] == "autoscaling/v1" and v1["spec"]["targetCPUUtilizationPercentage"] == 1
    assert v1["status"]["desiredReplicas"] == 3 and v1["status"]["currentCPUUtilizationPercentage"] >= 1
    kc("patch", "horizontalpodautoscalers.v1.autoscaling", "ad", "-n", "shop", "--type=merge", "-p", '{"spec":{"maxReplicas":4}}')
    api = k8s.AutoscalingV1Api(sim_client(sim))
    assert api.read_namespaced_horizontal_pod_autoscaler("ad", "shop").spec.max_replicas == 4
    assert "ad" in [h.metadata.name for h in api.list_namespaced_horizontal_pod_autoscaler("shop").items]
    v2 = k8s.AutoscalingV2Api(sim_client(sim)).read_namespaced_horizontal_pod_autoscaler("ad", "shop")
    assert v2.spec.max_replicas == 4 and v2.spec.metrics[0].resource.target.average_utilization == 1
    versions = json.loads(kc("get", "--raw", "/apis/autoscaling"))
    assert versions["preferredVersion"]["version"] == "v2"
    assert [v["version"] for v in versions["versions"]] == ["v2", "v1"]
    kc("delete", "hpa", "ad", "-n", "shop")
    assert sim.store.get("HorizontalPodAutoscaler", "shop", "ad") is None
