"""``autoscaling/v1`` HorizontalPodAutoscalers, served by conversion from the stored
``autoscaling/v2`` objects, as the real server serves every version of a kind from one storage
version. ``kubectl autoscale`` (1.32) still creates v1 objects, and older clients read them.

v1 has one metric, ``targetCPUUtilizationPercentage``; the conversion maps it to and from the
v2 ``Resource`` cpu ``Utilization`` metric, and ``status.currentCPUUtilizationPercentage`` to
and from that metric's current utilisation. Other v2 metrics are kept across a v1 update (the
real server carries them in an annotation; here the stored object simply keeps them). A v1
PATCH is applied to the v1 view of the object and written back as a v2 update. Watching
through v1 answers 405: clients watch the preferred version (v2).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Optional

from ..k8s.store import BY_KIND, ResourceType
from .api_common import JSON, Ctx, bad_request, dumps, method_not_allowed, no_such_path, object_not_found

HPA_V1 = ResourceType("autoscaling", "v1", "horizontalpodautoscalers", "horizontalpodautoscaler",
                      "HorizontalPodAutoscaler", True, ("hpa",), categories=("all",))
KIND = "HorizontalPodAutoscaler"


def _cpu_metric(metrics: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    return next((m for m in metrics if m.get("type") == "Resource"
                 and (m.get("resource") or {}).get("name") == "cpu"
                 and ((m.get("resource") or {}).get("target") or {}).get("type") == "Utilization"), None)


def to_v1(obj: dict[str, Any]) -> dict[str, Any]:
    out = {"kind": KIND, "apiVersion": "autoscaling/v1", "metadata": copy.deepcopy(obj.get("metadata") or {})}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    v1spec: dict[str, Any] = {k: copy.deepcopy(spec[k]) for k in ("scaleTargetRef", "minReplicas", "maxReplicas")
                              if k in spec}
    cpu = _cpu_metric(spec.get("metrics") or [])
    if cpu is not None:
        v1spec["targetCPUUtilizationPercentage"] = cpu["resource"]["target"].get("averageUtilization")
    v1status: dict[str, Any] = {k: status[k] for k in ("observedGeneration", "lastScaleTime", "currentReplicas",
                                                       "desiredReplicas") if k in status}
    for m in status.get("currentMetrics") or []:
        current = ((m.get("resource") or {}).get("current") or {})
        if m.get("type") == "Resource" and (m.get("resource") or {}).get("name") == "cpu" \
                and "averageUtilization" in current:
            v1status["currentCPUUtilizationPercentage"] = current["averageUtilization"]
    out["spec"], out["status"] = v1spec, v1status
    return out


def to_v2(v1: dict[str, Any], stored: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in v1.items() if k not in ("spec", "status")}
    out["apiVersion"], out["kind"] = "autoscaling/v2", KIND
    spec = dict(v1.get("spec") or {})
    target = spec.pop("targetCPUUtilizationPercentage", None)
    others = [m for m in ((stored or {}).get("spec") or {}).get("metrics") or [] if _cpu_metric([m]) is None]
    metrics = list(others)
    if target is not None:
        metrics.insert(0, {"type": "Resource", "resource": {"name": "cpu", "target": {
            "type": "Utilization", "averageUtilization": target}}})
    if metrics:
        spec["metrics"] = metrics
    behavior = ((stored or {}).get("spec") or {}).get("behavior")
    if behavior is not None:
        spec["behavior"] = copy.deepcopy(behavior)
    out["spec"] = spec
    if stored is not None and "status" in stored:
        out["status"] = copy.deepcopy(stored["status"])
    return out


def _convert_payload(payload: bytes) -> bytes:
    try:
        body = json.loads(payload)
    except ValueError:
        return payload
    if isinstance(body, dict) and body.get("kind") == KIND:
        return dumps(to_v1(body))
    if isinstance(body, dict) and body.get("kind") == KIND + "List":
        body["apiVersion"] = "autoscaling/v1"
        body["items"] = [to_v1(i) for i in body.get("items") or []]
        return dumps(body)
    return payload


class HpaV1:
    """The v1 handlers of :class:`~.apiserver.ApiServer` (which provides the v2 handlers)."""

    def _hpa_v1(self, ctx: Ctx, ns: Optional[str], name: Optional[str], sub: Optional[str],
                watch: bool) -> tuple[int, str, bytes]:
        rt = BY_KIND[KIND]
        server: Any = self
        if watch or ctx.query.get("watch"):
            raise method_not_allowed()
        if sub not in (None, "status"):
            raise no_such_path()
        m = ctx.method
        if m == "GET":
            code, ctype, payload = server._list(ctx, rt, ns) if name is None else server._get(ctx, rt, ns, name)
            return code, ctype, _convert_payload(payload)
        if m == "DELETE":
            return server._delete(ctx, rt, ns, name) if name else server._delete_collection(ctx, rt, ns)
        if m in ("POST", "PUT", "PATCH"):
            stored = server.store.get(KIND, ns, name) if name else None
            if m == "PATCH":
                if stored is None:
                    raise object_not_found(rt, name or "")
                v1 = server._apply_patch_body(ctx, KIND, to_v1(stored), ctx.body())
            else:
                v1 = ctx.body()
            if not isinstance(v1, dict):
                raise bad_request("the body of the request was in an unknown format")
            converted = dataclasses.replace(ctx, method="PUT" if m == "PATCH" else m,
                                            raw_body=json.dumps(to_v2(v1, stored)).encode(),
                                            headers={**ctx.headers, "content-type": JSON})
            if m == "POST":
                code, ctype, payload = server._create(converted, rt, ns)
            else:
                code, ctype, payload = server._update(converted, rt, ns, name or "",
                                                      **({"subresource": "status"} if sub == "status" else {}))
            return code, ctype, _convert_payload(payload)
        raise method_not_allowed()
