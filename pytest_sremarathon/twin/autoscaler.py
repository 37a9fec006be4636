"""The horizontal pod autoscaler (kube-controller-manager's ``horizontalpodautoscaler``
controller, ``pkg/controller/podautoscaler``), on the twin's own measurements.

Every sync period (15 s, ``--horizontal-pod-autoscaler-sync-period``) each
``autoscaling/v2`` HorizontalPodAutoscaler is reconciled as the real controller does it:

* the target's ``/scale`` (``scaleTargetRef``: a Deployment, ReplicaSet or
  ReplicationController) gives the current replicas and the pod selector;
* each metric gives a proposal ``ceil(ready pods × current / target)``, unchanged while the
  ratio is within the 10 % tolerance; pods without a measurement count as 100 % of the target
  when scaling down and 0 % when scaling up, not-ready pods as 0 % when scaling up (the
  controller's "missing pods" rebalancing). Metrics: ``Resource`` (cpu or memory, as
  ``Utilization`` of the pods' requests or ``AverageValue``), ``Pods`` and ``Object``
  (``http_requests_per_second``, what a Prometheus adapter serves from
  ``rate(http_requests_total[2m])``: the pods' request rate of the last tick). ``External``
  metrics have no source here (``FailedGetExternalMetric``);
* the largest proposal is stabilised (scale-down: the highest recommendation of the last
  300 s, or ``behavior.scaleDown.stabilizationWindowSeconds``; scale-up: the lowest of its
  window), rate-limited (without ``behavior``: at most max(2 × current, 4); with it, the
  ``Pods``/``Percent`` policies over their periods and ``selectPolicy``) and clamped to
  ``minReplicas``/``maxReplicas``;
* a change is written to the target's ``spec.replicas`` (what PATCH ``/scale`` writes) with a
  ``SuccessfulRescale`` event; ``status`` carries ``currentReplicas``, ``desiredReplicas``,
  ``currentMetrics``, ``lastScaleTime`` and the conditions ``AbleToScale``, ``ScalingActive``
  and ``ScalingLimited`` with the real reasons and messages.

Measurements come from a :class:`MetricsSource` (the kubelet's containers and the traffic
engine's per-pod requests); the controller draws no random numbers, so a run stays a pure
function of its seed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Optional, Protocol

from ..k8s.objects import EventRecorder, pod_is_active, pod_is_ready, selector_matches, set_condition
from ..k8s.quantity import cpu_millicores, memory_bytes
from ..k8s.store import Store, iso
from .label_index import LabelIndex

SYNC_SECONDS = 15.0
TOLERANCE = 0.1
DOWNSCALE_STABILIZATION_SECONDS = 300.0
COMPONENT = "horizontal-pod-autoscaler"
#: The request-rate metric the twin serves to the Pods and Object metric types.
REQUEST_RATE = "http_requests_per_second"
SCALABLE = ("Deployment", "ReplicaSet", "ReplicationController")

DEFAULT_SCALE_UP: dict[str, Any] = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                                 {"type": "Percent", "value": 100, "periodSeconds": 15}]}
DEFAULT_SCALE_DOWN: dict[str, Any] = {"stabilizationWindowSeconds": 300, "selectPolicy": "Max",
                      "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


class MetricsSource(Protocol):
    """What the metrics pipeline (metrics-server, a Prometheus adapter) knows of a pod."""

    def pod_usage_by_uid(self, uid: str) -> Optional[tuple[float, int]]: ...  # (millicores, bytes); None: none
    def pod_request_rate(self, uid: str) -> Optional[float]: ...  # requests/s; None: no sample


class MetricError(Exception):
    """A metric could not be computed: the reason and message of ``ScalingActive=False``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def default_hpa(obj: dict[str, Any]) -> None:
    """``SetDefaults_HorizontalPodAutoscaler`` (autoscaling/v2): minReplicas 1, a cpu 80 %
    metric when none is given, and the behaviour's omitted rules filled in when it is given."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("minReplicas", 1)
    if not spec.get("metrics"):
        spec["metrics"] = [{"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": 80}}}]
    behavior = spec.get("behavior")
    if isinstance(behavior, dict):
        for key, default in (("scaleUp", DEFAULT_SCALE_UP), ("scaleDown", DEFAULT_SCALE_DOWN)):
            rules = behavior.get(key)
            if not isinstance(rules, dict):
                behavior[key] = {k: (list(v) if isinstance(v, list) else v) for k, v in default.items()}
                continue
            for k, v in default.items():
                rules.setdefault(k, list(v) if isinstance(v, list) else v)


def metric_description(metric: dict[str, Any]) -> str:
    """How the controller names a metric in its messages and events."""
    t = metric.get("type")
    if t == "Resource":
        res = metric.get("resource") or {}
        kind = "utilization (percentage of request)" if (res.get("target") or {}).get("type") == "Utilization" \
            else "utilization"
        return f"{res.get('name', '')} resource {kind}"
    if t == "Pods":
        return f"pods metric {((metric.get('pods') or {}).get('metric') or {}).get('name', '')}"
    if t == "Object":
        obj = metric.get("object") or {}
        ref = obj.get("describedObject") or {}
        return f"{(obj.get('metric') or {}).get('name', '')} metric on {ref.get('kind', '')}/{ref.get('name', '')}"
    if t == "External":
        return f"external metric {((metric.get('external') or {}).get('metric') or {}).get('name', '')}"
    return str(t)


@dataclass
class _Memory:
    """What the controller remembers of one HPA between syncs (the real one keeps the same)."""

    last_sync: Optional[datetime] = None
    recommendations: list[tuple[float, int]] = field(default_factory=list)  # (POSIX time, replicas)
    events: list[tuple[datetime, int]] = field(default_factory=list)  # (time, replica change)


class HorizontalPodAutoscalerController:
    def __init__(self, store: Store, events: EventRecorder, metrics: MetricsSource) -> None:
        self.store = store
        self.events = events
        self.metrics = metrics
        self._memory: dict[str, _Memory] = {}
        # The pods by (namespace, ``app`` label), kept from the store's changes: every Deployment
        # of the apps selects on that label alone, and 30 autoscalers each scanning a namespace's
        # pods would cost more than the rest of the controller.
        self._app_pods = LabelIndex(store, "Pod", "app")
        # The same, built once per pass, for a selector on a non-string ``app`` value.
        self._by_app: Optional[dict[tuple[str, str], list[dict[str, Any]]]] = None
        # (pod uid, resource) -> (the pod's resourceVersion, _pod_request then)
        self._requests: dict[tuple[str, str], tuple[str, int]] = {}

    def reconcile(self) -> None:
        hpas = self.store.list("HorizontalPodAutoscaler")
        if not hpas and not self._memory:
            return
        now = self.store.clock()
        live = set()
        self._by_app = None
        for hpa in hpas:
            uid = hpa["metadata"]["uid"]
            live.add(uid)
            mem = self._memory.setdefault(uid, _Memory())
            if mem.last_sync is not None and (now - mem.last_sync).total_seconds() < SYNC_SECONDS:
                continue
            mem.last_sync = now
            self.sync(hpa, mem, now)
        for uid in [u for u in self._memory if u not in live]:
            del self._memory[uid]

    # -- one HPA -------------------------------------------------------------------------------
    def _selected(self, ns: str, selector: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
        match = (selector or {}).get("matchLabels") or {}
        if selector and list(selector) == ["matchLabels"] and list(match) == ["app"]:
            if isinstance(match["app"], str):  # (the index files string values, all a str can equal)
                return [p for p in self._app_pods.members(ns, match["app"]) if pod_is_active(p)]
            if self._by_app is None:
                self._by_app = {}
                for p in self.store.list("Pod"):
                    app = (p["metadata"].get("labels") or {}).get("app")
                    if app is not None and pod_is_active(p):
                        self._by_app.setdefault((p["metadata"]["namespace"], app), []).append(p)
            return self._by_app.get((ns, match["app"]), [])
        return [p for p in self.store.list("Pod", ns)
                if pod_is_active(p) and selector_matches(selector, p["metadata"].get("labels") or {})]

    def sync(self, hpa: dict[str, Any], mem: _Memory, now: datetime) -> None:
        before = hpa.get("status") or {}
        # Work on a copy (conditions too, which set_condition edits in place): what changed is
        # then one dict comparison, and only a change is published.
        status = dict(before, conditions=[dict(c) for c in before.get("conditions") or []])
        hpa["status"] = status
        spec = hpa.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        ns = hpa["metadata"]["namespace"]
        target = self.store.get(ref.get("kind", ""), ns, ref.get("name", "")) if ref.get("kind") in SCALABLE else None
        status["observedGeneration"] = hpa["metadata"].get("generation", 1)
        if target is None:
            kind = ref.get("kind", "")
            message = (f"the HPA controller was unable to get the target's current scale: "
                       f"{_plural(kind)}.apps \"{ref.get('name', '')}\" not found" if kind in SCALABLE else
                       f"the HPA controller was unable to get the target's current scale: no matches for kind "
                       f"\"{kind}\" in group \"{ref.get('apiVersion', '').split('/')[0]}\"")
            set_condition(hpa, "AbleToScale", "False", now, "FailedGetScale", message)
            self.events.record(hpa, "Warning", "FailedGetScale", message.split(": ", 1)[1], COMPONENT)
            status.setdefault("currentReplicas", 0)
            status.setdefault("desiredReplicas", 0)
            self._publish(hpa, before)
            return
        current = int((target.get("spec") or {}).get("replicas") or 0)
        status["currentReplicas"] = int((target.get("status") or {}).get("replicas") or current)
        lo, hi = int(spec.get("minReplicas") or 1), int(spec.get("maxReplicas") or 1)
        if current == 0 and lo != 0:
            set_condition(hpa, "ScalingActive", "False", now, "ScalingDisabled",
                          "scaling is disabled since the replica count of the target is zero")
            status["desiredReplicas"] = 0
            self._publish(hpa, before)
            return
        pods = self._selected(ns, (target.get("spec") or {}).get("selector"))
        proposal, reason_metric = 0, ""
        current_metrics: list[dict[str, Any]] = []
        failure: Optional[MetricError] = None
        for metric in spec.get("metrics") or []:
            try:
                replicas, measured = self._proposal(metric, pods, current, ns)
            except MetricError as e:
                failure = failure or e
                current_metrics.append({"type": metric.get("type", "")})
                continue
            current_metrics.append(measured)
            if replicas > proposal:
                proposal, reason_metric = replicas, metric_description(metric)
        status["currentMetrics"] = current_metrics or None
        if status["currentMetrics"] is None:
            status.pop("currentMetrics")
        if failure is not None and proposal == 0:
            set_condition(hpa, "AbleToScale", "True", now, "SucceededGetScale",
                          "the HPA controller was able to get the target's current scale")
            set_condition(hpa, "ScalingActive", "False", now, failure.reason,
                          f"the HPA was unable to compute the replica count: {failure}")
            self.events.record(hpa, "Warning", failure.reason, str(failure), COMPONENT)
            status["desiredReplicas"] = current
            self._publish(hpa, before)
            return
        set_condition(hpa, "ScalingActive", "True", now, "ValidMetricFound",
                      f"the HPA was able to successfully calculate a replica count from {reason_metric}")
        desired, able_reason, able_message = self._normalize(spec, mem, now, current, proposal, lo, hi, hpa)
        status["desiredReplicas"] = desired
        if desired != current:
            target["spec"]["replicas"] = desired
            self.store.touch(target, spec_changed=True)
            mem.events.append((now, desired - current))
            status["lastScaleTime"] = iso(now)
            direction = "above" if desired > current else "below"
            why = f"{reason_metric} {direction} target" if desired > current else "All metrics below target"
            self.events.record(hpa, "Normal", "SuccessfulRescale", f"New size: {desired}; reason: {why}", COMPONENT)
            set_condition(hpa, "AbleToScale", "True", now, "SucceededRescale",
                          f"the HPA controller was able to update the target scale to {desired}")
        else:
            set_condition(hpa, "AbleToScale", "True", now, able_reason, able_message)
        self._publish(hpa, before)

    def _publish(self, hpa: dict[str, Any], before: dict[str, Any]) -> None:
        if not hpa["status"].get("conditions"):
            hpa["status"].pop("conditions", None)
        if hpa["status"] != before:
            self.store.touch(hpa)

    # -- metrics ---------------------------------------------------------------------------------
    def _proposal(self, metric: dict[str, Any], pods: list[dict[str, Any]], current: int,
                  ns: str) -> tuple[int, dict[str, Any]]:
        t = metric.get("type")
        if t == "Resource":
            res = metric.get("resource") or {}
            name, target = res.get("name", ""), res.get("target") or {}
            if name not in ("cpu", "memory"):
                raise MetricError("FailedGetResourceMetric", f"failed to get {name} utilization: unable to get "
                                                             f"metrics for resource {name}: no metrics returned "
                                                             f"from resource metrics API")
            samples, requests = {}, 0
            for p in pods:
                usage = self.metrics.pod_usage_by_uid(p["metadata"]["uid"])
                req = self._pod_request(p, name)
                if req == 0 and target.get("type") == "Utilization":
                    raise MetricError("FailedGetResourceMetric",
                                      f"failed to get {name} utilization: missing request for {name} in container "
                                      f"{(p['spec'].get('containers') or [{}])[0].get('name', '')} of Pod "
                                      f"{p['metadata']['name']}")
                if usage is not None:
                    samples[p["metadata"]["uid"]] = usage[0] if name == "cpu" else float(usage[1])
                    requests += req
            if not samples:
                raise MetricError("FailedGetResourceMetric", f"failed to get {name} utilization: unable to get "
                                                             f"metrics for resource {name}: no metrics returned "
                                                             f"from resource metrics API")
            total = sum(samples.values())
            if target.get("type") == "Utilization":
                utilization = total / requests * 100 if requests else 0.0
                want = float(target.get("averageUtilization") or 80)
                replicas = self._replicas(pods, samples, current, utilization / want, want, utilization)
                average = total / len(samples)
                return replicas, {"type": "Resource", "resource": {"name": name, "current": {
                    "averageUtilization": int(utilization), "averageValue": _quantity(name, average)}}}
            want_value = _parse(name, target.get("averageValue"))
            average = total / len(samples)
            replicas = self._replicas(pods, samples, current, average / want_value if want_value else 0.0,
                                      want_value, average)
            return replicas, {"type": "Resource", "resource": {"name": name, "current": {
                "averageValue": _quantity(name, average)}}}
        if t == "Pods":
            body = metric.get("pods") or {}
            name = (body.get("metric") or {}).get("name", "")
            samples = self._rates(name, pods, "FailedGetPodsMetric")
            want_value = _parse("", (body.get("target") or {}).get("averageValue"))
            average = sum(samples.values()) / len(samples)
            replicas = self._replicas(pods, samples, current, average / want_value if want_value else 0.0,
                                      want_value, average)
            return replicas, {"type": "Pods", "pods": {"metric": {"name": name},
                                                       "current": {"averageValue": _quantity("", average)}}}
        if t == "Object":
            body = metric.get("object") or {}
            name = (body.get("metric") or {}).get("name", "")
            ref = body.get("describedObject") or {}
            described = self.store.get(ref.get("kind", ""), ns, ref.get("name", "")) if ref.get("kind") else None
            if described is None or ref.get("kind") != "Service":
                raise MetricError("FailedGetObjectMetric", f"failed to get object metric value: unable to get "
                                                           f"metric {name}: {ref.get('kind', '')} on {ns} "
                                                           f"{ref.get('name', '')}/unable to fetch metrics from "
                                                           f"custom metrics API: the server could not find the "
                                                           f"metric {name} for {_plural(ref.get('kind', ''))}")
            selected = [p for p in self.store.list("Pod", ns) if pod_is_active(p) and selector_matches(
                {"matchLabels": (described.get("spec") or {}).get("selector") or {}}, p["metadata"].get("labels") or {})]
            value = sum(self._rates(name, selected, "FailedGetObjectMetric").values()) if selected else 0.0
            target = body.get("target") or {}
            if target.get("type") == "AverageValue":
                want_value = _parse("", target.get("averageValue"))
                ratio = value / (want_value * current) if want_value and current else 0.0
                replicas = current if abs(1.0 - ratio) <= TOLERANCE else math.ceil(value / want_value)
                current_value = {"averageValue": _quantity("", value / current if current else 0.0)}
            else:
                want_value = _parse("", target.get("value"))
                ratio = value / want_value if want_value else 0.0
                ready = sum(1 for p in pods if pod_is_ready(p)) or current
                replicas = current if abs(1.0 - ratio) <= TOLERANCE else math.ceil(ratio * ready)
                current_value = {"value": _quantity("", value)}
            return replicas, {"type": "Object", "object": {"metric": {"name": name}, "describedObject": ref,
                                                           "current": current_value}}
        name = ((metric.get(str(t).lower() if t else "") or {}).get("metric") or {}).get("name", "")
        raise MetricError("FailedGetExternalMetric", f"failed to get external metric {name}: unable to get external "
                                                     f"metric {name}: no metrics returned from external metrics API")

    def _pod_request(self, pod: dict[str, Any], resource: str) -> int:
        """:func:`_pod_request`, kept per pod and resource while the pod's resourceVersion
        stands (it reads the pod's spec alone, which moves it)."""
        md = pod["metadata"]
        key = (md["uid"], resource)
        cached = self._requests.get(key)
        if cached is None or cached[0] != md["resourceVersion"]:
            if len(self._requests) > 4096:  # (bounded: more than any cluster's pods)
                self._requests.clear()
            cached = self._requests[key] = (md["resourceVersion"], _pod_request(pod, resource))
        return cached[1]

    def _rates(self, name: str, pods: list[dict[str, Any]], reason: str) -> dict[str, float]:
        if name != REQUEST_RATE:
            raise MetricError(reason, f"failed to get pods metric value: unable to get metric {name}: unable to "
                                      f"fetch metrics from custom metrics API: the server could not find the "
                                      f"metric {name} for pods")
        samples = {}
        for p in pods:
            rate = self.metrics.pod_request_rate(p["metadata"]["uid"])
            if rate is not None:
                samples[p["metadata"]["uid"]] = rate
        if not samples:
            raise MetricError(reason, f"failed to get pods metric value: unable to get metric {name}: no metrics "
                                      f"returned from custom metrics API")
        return samples

    @staticmethod
    def _replicas(pods: list[dict[str, Any]], samples: dict[str, float], current: int, ratio: float,
                  target: float, usage: float) -> int:
        """``GetResourceReplicas``/``GetMetricReplicas`` with the missing and not-ready pods'
        rebalancing (``replica_calculator.go``)."""
        del usage
        ready = {p["metadata"]["uid"] for p in pods if pod_is_ready(p)}
        counted = {uid: v for uid, v in samples.items() if uid in ready}
        missing = [p for p in pods if p["metadata"]["uid"] not in samples]
        unready = [uid for uid in samples if uid not in ready]
        if not counted:
            return current
        if not missing and not unready:
            if abs(1.0 - ratio) <= TOLERANCE:
                return current
            return max(1, math.ceil(ratio * len(counted)))
        # Re-run the ratio with the missing pods at the target when scaling down (never below
        # what they might use) and at zero when scaling up (never above what they could add).
        n = len(counted) + len(missing) + (len(unready) if ratio >= 1.0 else 0)
        if ratio < 1.0:
            new_ratio = ratio * len(counted) / n + len(missing) / n if n else ratio
        else:
            new_ratio = ratio * len(counted) / n if n else ratio
        if abs(1.0 - new_ratio) <= TOLERANCE or (ratio < 1.0) != (new_ratio < 1.0):
            return current
        proposal = math.ceil(new_ratio * n)
        if (ratio > 1.0 and proposal < current) or (ratio < 1.0 and proposal > current):
            return current
        return max(1, proposal)

    # -- normalisation -----------------------------------------------------------------------------
    def _normalize(self, spec: dict[str, Any], mem: _Memory, now: datetime, current: int, proposal: int,
                   lo: int, hi: int, hpa: dict[str, Any]) -> tuple[int, str, str]:
        behavior = spec.get("behavior")
        up = (behavior or {}).get("scaleUp") or DEFAULT_SCALE_UP
        down = (behavior or {}).get("scaleDown") or DEFAULT_SCALE_DOWN
        up_window = float(up.get("stabilizationWindowSeconds") or 0) if behavior else 0.0
        down_window = float(down.get("stabilizationWindowSeconds", DOWNSCALE_STABILIZATION_SECONDS)) \
            if behavior else DOWNSCALE_STABILIZATION_SECONDS
        longest = max(up_window, down_window)
        at = now.timestamp()
        mem.recommendations = [(t, r) for t, r in mem.recommendations if at - t < longest]
        mem.recommendations.append((at, proposal))
        stabilized = proposal
        up_floor = min((r for t, r in mem.recommendations if at - t <= up_window), default=proposal)
        down_ceiling = max((r for t, r in mem.recommendations if at - t <= down_window), default=proposal)
        reason, message = "ReadyForNewScale", "recommended size matches current size"
        if proposal > current:
            stabilized = max(current, min(proposal, up_floor))
        elif proposal < current:
            stabilized = min(current, max(proposal, down_ceiling))
            if stabilized != proposal:
                reason, message = ("ScaleDownStabilized",
                                   "recent recommendations were higher than current one, applying the highest "
                                   "recent recommendation")
        if behavior is None:
            up_limit = max(2 * current, 4)
            down_limit = 0
        else:
            up_limit = self._limit(mem, now, current, up, up_direction=True)
            down_limit = self._limit(mem, now, current, down, up_direction=False)
        desired = stabilized
        limited = ""
        if desired > hi:
            desired, limited = hi, "TooManyReplicas"
        if desired < lo:
            desired, limited = lo, "TooFewReplicas"
        if desired > current and desired > up_limit:
            desired = max(current, up_limit)
            if not limited:
                limited = "ScaleUpLimit"
        if desired < current and desired < down_limit:
            desired = min(current, down_limit)
            if not limited:
                limited = "ScaleDownLimit"
        now_t = self.store.clock()
        if limited == "TooManyReplicas":
            set_condition(hpa, "ScalingLimited", "True", now_t, limited,
                          "the desired replica count is more than the maximum replica count")
        elif limited == "TooFewReplicas":
            set_condition(hpa, "ScalingLimited", "True", now_t, limited,
                          "the desired replica count is less than the minimum replica count")
        elif limited == "ScaleUpLimit":
            set_condition(hpa, "ScalingLimited", "True", now_t, limited,
                          "the desired replica count is increasing faster than the maximum scale rate")
        elif limited == "ScaleDownLimit":
            set_condition(hpa, "ScalingLimited", "True", now_t, limited,
                          "the desired replica count is decreasing faster than the maximum scale rate")
        else:
            set_condition(hpa, "ScalingLimited", "False", now_t, "DesiredWithinRange",
                          "the desired count is within the acceptable range")
        return desired, reason, message

    @staticmethod
    def _limit(mem: _Memory, now: datetime, current: int, rules: dict[str, Any], *, up_direction: bool) -> int:
        """The replicas one direction's policies allow from the scale events of their periods."""
        if rules.get("selectPolicy") == "Disabled":
            return current
        limits = []
        for policy in rules.get("policies") or []:
            period = float(policy.get("periodSeconds") or 15)
            moved = sum(d for t, d in mem.events if (now - t).total_seconds() < period and (d > 0) == up_direction)
            start = current - moved
            value = int(policy.get("value") or 0)
            if policy.get("type") == "Pods":
                limits.append(start + value if up_direction else start - value)
            elif up_direction:
                limits.append(math.ceil(start * (1 + value / 100)))
            else:
                limits.append(math.floor(start * (1 - value / 100)))
        mem.events = [(t, d) for t, d in mem.events if (now - t).total_seconds() < 1800]
        if not limits:
            return current
        pick_most = rules.get("selectPolicy", "Max") == "Max"
        if up_direction:
            return max(limits) if pick_most else min(limits)
        return max(0, min(limits) if pick_most else max(limits))


def _plural(kind: str) -> str:
    return kind.lower() + "s" if kind else ""


def _pod_request(pod: dict[str, Any], resource: str) -> int:
    total = 0
    for c in pod["spec"].get("containers") or []:
        req = ((c.get("resources") or {}).get("requests") or {}).get(resource)
        if req is None:
            return 0
        total += cpu_millicores(req) if resource == "cpu" else memory_bytes(req)
    return total


_SUFFIXES = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
             "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(n|u|m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def _parse(resource: str, value: Any) -> float:
    """A target quantity: cpu in millicores, other metrics (memory in bytes) as plain numbers."""
    if value is None:
        return 0.0
    m = _QUANTITY.match(str(value).strip())
    if m is None:
        return 0.0
    number = float(m.group(1)) * _SUFFIXES[m.group(2) or ""]
    return number * 1000 if resource == "cpu" else number


def _quantity(resource: str, value: float) -> str:
    """A measured value as the metrics APIs write it (cpu in millicores, a rate in milli-units)."""
    if resource == "memory":
        return str(int(value))
    if resource == "cpu":
        return f"{int(round(value))}m"
    milli = int(round(value * 1000))
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
