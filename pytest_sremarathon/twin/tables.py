"""Server-side printing: ``meta.k8s.io/v1`` Tables, as ``kubectl get`` asks for them.

The columns and cell formatting follow the real server's printers (``pkg/printers/internalversion``):
the server always renders the wide (priority 1) cells and kubectl hides them unless ``-o wide``.
Ages are computed against the *virtual* clock passed in as ``now``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, Optional

from ..k8s.selectors import selector_string


def _cols(*specs: tuple) -> list[dict[str, Any]]:
    out = []
    for spec in specs:
        name, type_, priority = spec[0], spec[1] if len(spec) > 1 else "string", spec[2] if len(spec) > 2 else 0
        out.append({"name": name, "type": type_, "format": "name" if name == "Name" else "",
                    "description": _DESCRIPTIONS.get(name, name), "priority": priority})
    return out


_DESCRIPTIONS = {
    "Name": "Name must be unique within a namespace. Is required when creating resources, although some resources "
            "may allow a client to request the generation of an appropriate name automatically. Name is primarily "
            "intended for creation idempotence and configuration definition. Cannot be updated. More info: "
            "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names",
    "Age": "CreationTimestamp is a timestamp representing the server time when this object was created.",
}


def parse_time(value: Optional[str]) -> Optional[datetime]:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration``."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        m = minutes % 60
        return f"{hours}h" if m == 0 else f"{hours}h{m}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        h = hours % 24
        return f"{hours // 24}d" if h == 0 else f"{hours // 24}d{h}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if dy == 0 else f"{hours // 24 // 365}y{dy}d"
    return f"{hours // 24 // 365}y"


def since(value: Optional[str], now: datetime) -> str:
    t = parse_time(value)
    if t is None:
        return "<unknown>"
    return human_duration((now - t).total_seconds())


# -- per-kind printers --------------------------------------------------------------------------

def _pod(obj: dict[str, Any], now: datetime) -> tuple[list[Any], Optional[list[dict[str, Any]]]]:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    md = obj["metadata"]
    containers = spec.get("containers") or []
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or []}
    total = len(containers) + sum(1 for c in init_specs.values() if c.get("restartPolicy") == "Always")
    ready = 0
    restarts = 0
    last_restart: Optional[datetime] = None
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"
    conditions = None
    if phase == "Succeeded":
        conditions = [{"type": "Completed", "status": "True", "reason": "Succeeded",
                       "message": "The pod has completed successfully."}]
    elif phase == "Failed":
        conditions = [{"type": "Completed", "status": "True", "reason": "Failed",
                       "message": "The pod failed."}]

    def note_restart(cs: dict[str, Any]) -> None:
        nonlocal last_restart
        term = ((cs.get("lastState") or {}).get("terminated")) or None
        if term:
            t = parse_time(term.get("finishedAt"))
            if t and (last_restart is None or t > last_restart):
                last_restart = t

    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    for i, cs in enumerate(init_statuses):
        restarts += int(cs.get("restartCount") or 0)
        note_restart(cs)
        state = cs.get("state") or {}
        term, waiting = state.get("terminated"), state.get("waiting")
        restartable = (init_specs.get(cs.get("name")) or {}).get("restartPolicy") == "Always"
        if term and term.get("exitCode", 0) == 0:
            continue
        if restartable and cs.get("started"):
            if cs.get("ready"):
                ready += 1
            continue
        if term:
            if term.get("reason"):
                reason = "Init:" + term["reason"]
            elif term.get("signal"):
                reason = f"Init:Signal:{term['signal']}"
            else:
                reason = f"Init:ExitCode:{term.get('exitCode', 0)}"
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in status.get("conditions") or [])
    if not initializing or initialized:
        restarts = 0
        last_restart = None
        has_running = False
        for cs in reversed(status.get("containerStatuses") or []):
            restarts += int(cs.get("restartCount") or 0)
            note_restart(cs)
            state = cs.get("state") or {}
            waiting, term = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif term and term.get("reason"):
                reason = term["reason"]
            elif term:
                reason = f"Signal:{term['signal']}" if term.get("signal") else f"ExitCode:{term.get('exitCode', 0)}"
            elif cs.get("ready") and state.get("running") is not None:
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            pod_ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in status.get("conditions") or [])
            reason = "Running" if pod_ready else "NotReady"
    if md.get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    restarts_str = str(restarts)
    if restarts and last_restart is not None:
        restarts_str = f"{restarts} ({human_duration((now - last_restart).total_seconds())} ago)"
    ips = status.get("podIPs") or []
    pod_ip = ips[0].get("ip") if ips else status.get("podIP")
    gates = spec.get("readinessGates") or []
    gates_str = "<none>"
    if gates:
        true = 0
        for g in gates:
            for c in status.get("conditions") or []:
                if c.get("type") == g.get("conditionType"):
                    true += c.get("status") == "True"
                    break
        gates_str = f"{true}/{len(gates)}"
    cells = [md["name"], f"{ready}/{total}", reason, restarts_str, since(md.get("creationTimestamp"), now),
             pod_ip or "<none>", spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
             gates_str]
    return cells, conditions


def _containers(template: dict[str, Any]) -> tuple[str, str]:
    cs = (template.get("spec") or {}).get("containers") or []
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


def _deployment(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    names, images = _containers(spec.get("template") or {})
    return [md["name"], f"{int(status.get('readyReplicas') or 0)}/{int(spec.get('replicas') or 0)}",
            int(status.get("updatedReplicas") or 0), int(status.get("availableReplicas") or 0),
            since(md.get("creationTimestamp"), now), names, images, selector_string(spec.get("selector"))]


def _replicaset(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    names, images = _containers(spec.get("template") or {})
    return [md["name"], int(spec.get("replicas") or 0), int(status.get("replicas") or 0),
            int(status.get("readyReplicas") or 0), since(md.get("creationTimestamp"), now), names, images,
            selector_string(spec.get("selector"))]


def _format_labels(labels: Optional[dict[str, str]]) -> str:
    if not labels:
        return "<none>"
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _service(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    stype = spec.get("type") or "ClusterIP"
    ips = spec.get("clusterIPs") or ([spec["clusterIP"]] if spec.get("clusterIP") else [])
    internal = ips[0] if ips else "<none>"
    external = "<none>"
    ext_ips = spec.get("externalIPs") or []
    if stype in ("ClusterIP", "NodePort"):
        external = ",".join(ext_ips) if ext_ips else "<none>"
    elif stype == "LoadBalancer":
        ingress = [i.get("ip") or i.get("hostname") for i in (status.get("loadBalancer") or {}).get("ingress") or []]
        found = ingress + ext_ips
        external = ",".join(found) if found else "<pending>"
    elif stype == "ExternalName":
        external = spec.get("externalName") or "<none>"
    ports = []
    for p in spec.get("ports") or []:
        proto = p.get("protocol", "TCP")
        if p.get("nodePort"):
            ports.append(f"{p.get('port')}:{p['nodePort']}/{proto}")
        else:
            ports.append(f"{p.get('port')}/{proto}")
    return [md["name"], stype, internal, external, ",".join(ports) or "<none>", since(md.get("creationTimestamp"), now),
            _format_labels(spec.get("selector"))]


def _node(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    states = []
    for c in status.get("conditions") or []:
        if c.get("type") == "Ready":
            states = ["Ready" if c.get("status") == "True" else "NotReady"]
    if not states:
        states = ["Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for k, v in (md.get("labels") or {}).items():
        if k.startswith("node-role.kubernetes.io/"):
            roles.add(k[len("node-role.kubernetes.io/"):])
        elif k == "kubernetes.io/role":
            roles.add(v)
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        for a in status.get("addresses") or []:
            if a.get("type") == kind:
                return a.get("address", "")
        return "<none>"

    return [md["name"], ",".join(states), ",".join(sorted(r for r in roles if r)) or "<none>",
            since(md.get("creationTimestamp"), now), info.get("kubeletVersion", ""), address("InternalIP"),
            address("ExternalIP"), info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _namespace(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    return [md["name"], (obj.get("status") or {}).get("phase", ""), since(md.get("creationTimestamp"), now)]


def _configmap(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    return [md["name"], len(obj.get("data") or {}) + len(obj.get("binaryData") or {}),
            since(md.get("creationTimestamp"), now)]


def _secret(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    return [md["name"], obj.get("type", ""), len(obj.get("data") or {}), since(md.get("creationTimestamp"), now)]


def format_endpoints(obj: dict[str, Any]) -> str:
    subsets = obj.get("subsets") or []
    if not subsets:
        return "<none>"
    out: list[str] = []
    limit, more, count = 3, False, 0
    for ss in subsets:
        addrs = ss.get("addresses") or []
        ports = ss.get("ports") or []
        if not ports:
            count += len(addrs)
            for a in addrs:
                if len(out) == limit:
                    more = True
                    break
                out.append(a.get("ip", ""))
            continue
        for p in ports:
            count += len(addrs)
            for a in addrs:
                if len(out) == limit:
                    more = True
                    break
                ip = a.get("ip", "")
                out.append(f"[{ip}]:{p.get('port')}" if ":" in ip else f"{ip}:{p.get('port')}")
    s = ",".join(out)
    if more:
        return f"{s} + {count - limit} more..."
    return s or "<none>"


def _endpoints(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    return [md["name"], format_endpoints(obj), since(md.get("creationTimestamp"), now)]


def _event(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    first = since(obj.get("firstTimestamp"), now) if obj.get("firstTimestamp") else since(obj.get("eventTime"), now)
    last = since(obj.get("lastTimestamp"), now) if obj.get("lastTimestamp") else first
    count = obj.get("count") or 0
    series = obj.get("series")
    if series:
        last = since(series.get("lastObservedTime"), now)
        count = series.get("count") or 0
    elif count == 0:
        count = 1
    inv = obj.get("involvedObject") or {}
    target = f"{(inv.get('kind') or '').lower()}/{inv['name']}" if inv.get("name") else (inv.get("kind") or "").lower()
    src = obj.get("source") or {}
    component = src.get("component") or obj.get("reportingComponent") or ""
    instance = src.get("host") or obj.get("reportingInstance") or ""
    source = "<unknown>" if not component else (component if not instance else f"{component}, {instance}")
    return [last, obj.get("type", ""), obj.get("reason", ""), target, inv.get("fieldPath", ""), source,
            (obj.get("message") or "").strip(), first, int(count), md["name"]]


def _replication_controller(obj: dict[str, Any], now: datetime) -> list[Any]:
    md, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    names, images = _containers(spec.get("template") or {})
    selector = ",".join(f"{k}={v}" for k, v in sorted((spec.get("selector") or {}).items())) or "<none>"
    return [md["name"], int(spec.get("replicas", 1)), int(status.get("replicas", 0)),
            int(status.get("readyReplicas", 0)), since(md.get("creationTimestamp"), now), names, images, selector]


def _created_at(obj: dict[str, Any], now: datetime) -> list[Any]:
    """Roles and ClusterRoles: kubectl shows when, not how long ago."""
    md = obj["metadata"]
    return [md["name"], md.get("creationTimestamp", "")]


def _binding(obj: dict[str, Any], now: datetime) -> list[Any]:
    md, ref = obj["metadata"], obj.get("roleRef") or {}
    subjects = obj.get("subjects") or []

    def names(kind: str) -> str:
        return ", ".join((f"{s.get('namespace', '')}/{s.get('name', '')}" if kind == "ServiceAccount" else
                          s.get("name", "")) for s in subjects if s.get("kind") == kind)

    return [md["name"], f"{ref.get('kind', '')}/{ref.get('name', '')}", since(md.get("creationTimestamp"), now),
            names("User"), names("Group"), names("ServiceAccount")]


def _api_service(obj: dict[str, Any], now: datetime) -> list[Any]:
    md, spec = obj["metadata"], obj.get("spec") or {}
    svc = spec.get("service")
    service = f"{svc.get('namespace', '')}/{svc.get('name', '')}" if isinstance(svc, dict) else "Local"
    available = next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == "Available"),
                     None)
    shown = "Unknown" if available is None else available.get("status", "Unknown")
    if available is not None and shown != "True" and available.get("reason"):
        shown += f" ({available['reason']})"
    return [md["name"], service, shown, since(md.get("creationTimestamp"), now)]


def _default(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    return [md["name"], since(md.get("creationTimestamp"), now)]


def _hpa_targets(spec: dict[str, Any], status: dict[str, Any]) -> str:
    """``formatHPAMetrics``: the first two metrics as current/target, the rest counted."""
    metrics = spec.get("metrics") or []
    if not metrics:
        return "<none>"
    current = status.get("currentMetrics") or []
    shown = []
    for i, m in enumerate(metrics):
        t = m.get("type")
        now = current[i] if i < len(current) else {}
        body, seen = m.get(str(t).lower()) or {}, (now.get(str(t).lower()) or {}).get("current") or {}
        target = body.get("target") or {}
        if t == "Resource" and target.get("type") == "Utilization":
            cur = f"{seen['averageUtilization']}%" if "averageUtilization" in seen else "<unknown>"
            goal = f"{target['averageUtilization']}%" if "averageUtilization" in target else "<auto>"
            shown.append(f"{body.get('name', '')}: {cur}/{goal}")
        elif t == "Resource":
            shown.append(f"{body.get('name', '')}: {seen.get('averageValue', '<unknown>')}/{target.get('averageValue')}")
        elif t in ("Object", "External") and target.get("type") == "AverageValue":
            shown.append(f"{seen.get('averageValue', '<unknown>')}/{target.get('averageValue')} (avg)")
        elif t in ("Object", "External"):
            shown.append(f"{seen.get('value', '<unknown>')}/{target.get('value')}")
        else:
            shown.append(f"{seen.get('averageValue', '<unknown>')}/{target.get('averageValue')}")
    if len(shown) > 2:
        return ", ".join(shown[:2]) + f" + {len(shown) - 2} more..."
    return ", ".join(shown)


def _hpa(obj: dict[str, Any], now: datetime) -> list[Any]:
    md, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    lo = spec.get("minReplicas")
    return [md["name"], f"{ref.get('kind', '')}/{ref.get('name', '')}", _hpa_targets(spec, status),
            "<unset>" if lo is None else lo, spec.get("maxReplicas", 0), status.get("currentReplicas", 0),
            since(md.get("creationTimestamp"), now)]


def _pdb(obj: dict[str, Any], now: datetime) -> list[Any]:
    md, spec = obj["metadata"], obj.get("spec") or {}
    return [md["name"], str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
            str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
            (obj.get("status") or {}).get("disruptionsAllowed", 0), since(md.get("creationTimestamp"), now)]


def _priority_class(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    return [md["name"], obj.get("value", 0), bool(obj.get("globalDefault")), since(md.get("creationTimestamp"), now),
            obj.get("preemptionPolicy", "PreemptLowerPriority")]


Printer = Callable[[dict[str, Any], datetime], Any]

PRINTERS: dict[str, tuple[list[dict[str, Any]], Printer]] = {
    "Pod": (_cols(("Name",), ("Ready",), ("Status",), ("Restarts",), ("Age",), ("IP", "string", 1),
                  ("Node", "string", 1), ("Nominated Node", "string", 1), ("Readiness Gates", "string", 1)), _pod),
    "Deployment": (_cols(("Name",), ("Ready",), ("Up-to-date", "integer"), ("Available", "integer"), ("Age",),
                         ("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1)),
                   _deployment),
    "ReplicaSet": (_cols(("Name",), ("Desired", "integer"), ("Current", "integer"), ("Ready", "integer"), ("Age",),
                         ("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1)),
                   _replicaset),
    "Service": (_cols(("Name",), ("Type",), ("Cluster-IP",), ("External-IP",), ("Port(s)",), ("Age",),
                      ("Selector", "string", 1)), _service),
    "Node": (_cols(("Name",), ("Status",), ("Roles",), ("Age",), ("Version",), ("Internal-IP", "string", 1),
                   ("External-IP", "string", 1), ("OS-Image", "string", 1), ("Kernel-Version", "string", 1),
                   ("Container-Runtime", "string", 1)), _node),
    "Namespace": (_cols(("Name",), ("Status",), ("Age",)), _namespace),
    "ConfigMap": (_cols(("Name",), ("Data", "integer"), ("Age",)), _configmap),
    "Secret": (_cols(("Name",), ("Type",), ("Data", "integer"), ("Age",)), _secret),
    "Endpoints": (_cols(("Name",), ("Endpoints",), ("Age",)), _endpoints),
    "Event": (_cols(("Last Seen",), ("Type",), ("Reason",), ("Object",), ("Subobject", "string", 1),
                    ("Source", "string", 1), ("Message",), ("First Seen", "string", 1), ("Count", "integer", 1),
                    ("Name", "string", 1)), _event),
    "ReplicationController": (_cols(("Name",), ("Desired", "integer"), ("Current", "integer"), ("Ready", "integer"),
                                    ("Age",), ("Containers", "string", 1), ("Images", "string", 1),
                                    ("Selector", "string", 1)), _replication_controller),
    "Role": (_cols(("Name",), ("Created At", "date")), _created_at),
    "ClusterRole": (_cols(("Name",), ("Created At", "date")), _created_at),
    "RoleBinding": (_cols(("Name",), ("Role",), ("Age",), ("Users", "string", 1), ("Groups", "string", 1),
                          ("ServiceAccounts", "string", 1)), _binding),
    "ClusterRoleBinding": (_cols(("Name",), ("Role",), ("Age",), ("Users", "string", 1), ("Groups", "string", 1),
                                 ("ServiceAccounts", "string", 1)), _binding),
    "APIService": (_cols(("Name",), ("Service",), ("Available",), ("Age",)), _api_service),
    "HorizontalPodAutoscaler": (_cols(("Name",), ("Reference",), ("Targets",), ("MinPods", "string"),
                                      ("MaxPods", "integer"), ("Replicas", "integer"), ("Age",)), _hpa),
    "PodDisruptionBudget": (_cols(("Name",), ("Min Available",), ("Max Unavailable",),
                                  ("Allowed Disruptions", "integer"), ("Age",)), _pdb),
    "PriorityClass": (_cols(("Name",), ("Value", "integer"), ("Global-Default", "boolean"), ("Age",),
                            ("PreemptionPolicy", "string")), _priority_class),
}
_DEFAULT = (_cols(("Name",), ("Age",)), _default)


# -- stateful workloads and storage: the columns of the real printers (printers.go) ----------------

def _statefulset(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    names, images = _containers(spec.get("template") or {})
    return [md["name"], f"{int(status.get('readyReplicas') or 0)}/{int(spec.get('replicas') or 0)}",
            since(md.get("creationTimestamp"), now), names, images]


# -- DaemonSet, ControllerRevision, Job, CronJob (printDaemonSet, printControllerRevision,
# printJob, printCronJob) ---------------------------------------------------------------------

def _daemonset(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    template = spec.get("template") or {}
    names, images = _containers(template)
    node_selector = (template.get("spec") or {}).get("nodeSelector") or {}
    return [md["name"], int(status.get("desiredNumberScheduled") or 0), int(status.get("currentNumberScheduled") or 0),
            int(status.get("numberReady") or 0), int(status.get("updatedNumberScheduled") or 0),
            int(status.get("numberAvailable") or 0),
            ",".join(f"{k}={v}" for k, v in sorted(node_selector.items())) or "<none>",
            since(md.get("creationTimestamp"), now), names, images, selector_string(spec.get("selector"))]


def _controller_revision(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    ref = next((r for r in md.get("ownerReferences") or [] if r.get("controller")), None)
    owner = "<none>"
    if ref is not None:
        group = str(ref.get("apiVersion", "")).rpartition("/")[0]
        owner = f"{ref.get('kind', '').lower()}{'.' + group if group else ''}/{ref.get('name', '')}"
    return [md["name"], owner, int(obj.get("revision") or 0), since(md.get("creationTimestamp"), now)]


def _access_modes(modes: Optional[list[str]]) -> str:
    short = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}
    return ",".join(short.get(m, m) for m in modes or [])


def _pvc(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    bound = status.get("phase") == "Bound"
    capacity = (status.get("capacity") or {}).get("storage", "") if bound else ""
    return [md["name"], "Terminating" if md.get("deletionTimestamp") else status.get("phase", ""),
            spec.get("volumeName", ""), capacity,
            _access_modes(status.get("accessModes")) if bound else "", spec.get("storageClassName") or "",
            spec.get("volumeAttributesClassName") or "<unset>", since(md.get("creationTimestamp"), now),
            spec.get("volumeMode", "Filesystem")]


def _pv(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    ref = spec.get("claimRef") or {}
    claim = f"{ref.get('namespace', '')}/{ref.get('name', '')}" if ref else ""
    return [md["name"], (spec.get("capacity") or {}).get("storage", ""), _access_modes(spec.get("accessModes")),
            spec.get("persistentVolumeReclaimPolicy", ""),
            "Terminating" if md.get("deletionTimestamp") else status.get("phase", ""), claim,
            spec.get("storageClassName", ""), spec.get("volumeAttributesClassName") or "<unset>",
            status.get("reason", ""), since(md.get("creationTimestamp"), now), spec.get("volumeMode", "Filesystem")]


def _storage_class(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    name = md["name"]
    if (md.get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true":
        name += " (default)"
    return [name, obj.get("provisioner", ""), obj.get("reclaimPolicy", "Delete"),
            obj.get("volumeBindingMode", "Immediate"), bool(obj.get("allowVolumeExpansion")),
            since(md.get("creationTimestamp"), now)]


PRINTERS.update({
    "StatefulSet": (_cols(("Name",), ("Ready",), ("Age",), ("Containers", "string", 1), ("Images", "string", 1)),
                    _statefulset),
    "PersistentVolumeClaim": (_cols(("Name",), ("Status",), ("Volume",), ("Capacity",), ("Access Modes",),
                                    ("StorageClass",), ("VolumeAttributesClass",), ("Age",),
                                    ("VolumeMode", "string", 1)), _pvc),
    "PersistentVolume": (_cols(("Name",), ("Capacity",), ("Access Modes",), ("Reclaim Policy",), ("Status",),
                               ("Claim",), ("StorageClass",), ("VolumeAttributesClass",), ("Reason",), ("Age",),
                               ("VolumeMode", "string", 1)), _pv),
    "StorageClass": (_cols(("Name",), ("Provisioner",), ("ReclaimPolicy",), ("VolumeBindingMode",),
                           ("AllowVolumeExpansion", "boolean"), ("Age",)), _storage_class),
})


def _job_status(obj: dict[str, Any]) -> str:
    conditions = {c.get("type") for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in conditions:
        return "Complete"
    if "Failed" in conditions:
        return "Failed"
    if obj["metadata"].get("deletionTimestamp"):
        return "Terminating"
    for type_ in ("Suspended", "FailureTarget", "SuccessCriteriaMet"):
        if type_ in conditions:
            return type_
    return "Running"


def _job(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 1) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    start, end = parse_time(status.get("startTime")), parse_time(status.get("completionTime"))
    duration = "" if start is None else human_duration(((end or now) - start).total_seconds())
    names, images = _containers(spec.get("template") or {})
    return [md["name"], _job_status(obj), completions, duration, since(md.get("creationTimestamp"), now), names,
            images, selector_string(spec.get("selector"))]


def _cronjob(obj: dict[str, Any], now: datetime) -> list[Any]:
    spec, status, md = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
    job = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    names, images = _containers(job.get("template") or {})
    suspend = spec.get("suspend")
    last = status.get("lastScheduleTime")
    return [md["name"], spec.get("schedule", ""), spec.get("timeZone") or "<none>",
            "<unset>" if suspend is None else str(bool(suspend)), len(status.get("active") or []),
            since(last, now) if last else "<none>", since(md.get("creationTimestamp"), now), names, images,
            selector_string(job.get("selector"))]


_WORKLOAD_WIDE = (("Containers", "string", 1), ("Images", "string", 1), ("Selector", "string", 1))
PRINTERS.update({
    "DaemonSet": (_cols(("Name",), ("Desired", "integer"), ("Current", "integer"), ("Ready", "integer"),
                        ("Up-to-date", "integer"), ("Available", "integer"), ("Node Selector",), ("Age",),
                        *_WORKLOAD_WIDE), _daemonset),
    "ControllerRevision": (_cols(("Name",), ("Controller",), ("Revision", "integer"), ("Age",)), _controller_revision),
    "Job": (_cols(("Name",), ("Status",), ("Completions",), ("Duration",), ("Age",), *_WORKLOAD_WIDE), _job),
    "CronJob": (_cols(("Name",), ("Schedule",), ("Timezone",), ("Suspend", "boolean"), ("Active", "integer"),
                      ("Last Schedule",), ("Age",), *_WORKLOAD_WIDE), _cronjob),
})


def column_definitions(kind: str) -> list[dict[str, Any]]:
    return PRINTERS.get(kind, _DEFAULT)[0]


def row(obj: dict[str, Any], now: datetime, include_object: str = "Metadata") -> dict[str, Any]:
    printer = PRINTERS.get(obj.get("kind", ""), _DEFAULT)[1]
    result = printer(obj, now)
    conditions = None
    if isinstance(result, tuple):
        result, conditions = result
    r: dict[str, Any] = {"cells": result}
    if conditions:
        r["conditions"] = conditions
    if include_object == "Object":
        r["object"] = obj
    elif include_object != "None":
        r["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": obj.get("metadata", {})}
    return r


def table(kind: str, objects: list[dict[str, Any]], now: datetime, *, resource_version: str,
          continue_token: str = "", include_object: str = "Metadata", headers: bool = True) -> dict[str, Any]:
    md: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        md["continue"] = continue_token
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": md}
    if headers:
        out["columnDefinitions"] = column_definitions(kind)
    out["rows"] = [row(o, now, include_object) for o in objects]
    return out


# -- network and admission kinds (issue 18), as ``pkg/printers/internalversion`` prints them ------
def _network_policy(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    return [md["name"], selector_string((obj.get("spec") or {}).get("podSelector") or {}),
            since(md.get("creationTimestamp"), now)]


def _first_three(items: list[str]) -> str:
    """``formatDiscoveryPorts``/``formatDiscoveryEndpoints``: three, then how many more."""
    if not items:
        return "<unset>"
    shown = ",".join(items[:3])
    return shown + (f" + {len(items) - 3} more..." if len(items) > 3 else "")


def _endpoint_slice(obj: dict[str, Any], now: datetime) -> list[Any]:
    md = obj["metadata"]
    ports = [str(p["port"]) for p in obj.get("ports") or [] if p.get("port") is not None]
    addresses = [a for e in obj.get("endpoints") or [] for a in e.get("addresses") or []]
    return [md["name"], obj.get("addressType", ""), _first_three(ports), _first_three(addresses),
            since(md.get("creationTimestamp"), now)]


def _resource_quota(obj: dict[str, Any], now: datetime) -> list[Any]:
    md, status = obj["metadata"], obj.get("status") or {}
    hard, used = status.get("hard") or {}, status.get("used") or {}
    request: list[str] = []
    limit: list[str] = []
    for resource in sorted(hard):
        text = f"{resource}: {used.get(resource, '0')}/{hard[resource]}"
        (limit if resource.startswith("limits") else request).append(text)
    return [md["name"], since(md.get("creationTimestamp"), now), ", ".join(request), ", ".join(limit)]


def _ingress(obj: dict[str, Any], now: datetime) -> list[Any]:
    md, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    hosts = [r["host"] for r in spec.get("rules") or [] if r.get("host")]
    shown = ",".join(hosts[:3]) + (f" + {len(hosts) - 3} more..." if len(hosts) > 3 else "") if hosts else "*"
    lb = [i.get("ip") or i.get("hostname", "") for i in (status.get("loadBalancer") or {}).get("ingress") or []]
    return [md["name"], spec.get("ingressClassName") or "<none>", shown, ",".join(lb),
            "80, 443" if spec.get("tls") else "80", since(md.get("creationTimestamp"), now)]


def _ingress_class(obj: dict[str, Any], now: datetime) -> list[Any]:
    md, spec = obj["metadata"], obj.get("spec") or {}
    params = spec.get("parameters")
    shown = "<none>"
    if params:
        group = params.get("apiGroup") or ""
        shown = f"{params.get('kind', '')}.{group}/{params.get('name', '')}" if group else \
            f"{params.get('kind', '')}/{params.get('name', '')}"
    return [md["name"], spec.get("controller", ""), shown, since(md.get("creationTimestamp"), now)]


PRINTERS.update({
    "NetworkPolicy": (_cols(("Name",), ("Pod-Selector",), ("Age",)), _network_policy),
    "EndpointSlice": (_cols(("Name",), ("AddressType",), ("Ports",), ("Endpoints",), ("Age",)), _endpoint_slice),
    "ResourceQuota": (_cols(("Name",), ("Age",), ("Request",), ("Limit",)), _resource_quota),
    "LimitRange": (_cols(("Name",), ("Created At", "date")), _created_at),
    "Ingress": (_cols(("Name",), ("Class",), ("Hosts",), ("Address",), ("Ports",), ("Age",)), _ingress),
    "IngressClass": (_cols(("Name",), ("Controller",), ("Parameters",), ("Age",)), _ingress_class),
})


def _service_account(obj: dict[str, Any], now: datetime) -> list[Any]:
    """``printServiceAccount``: how many Secrets it lists (none since 1.24 makes them), its age."""
    md = obj["metadata"]
    return [md["name"], len(obj.get("secrets") or []), since(md.get("creationTimestamp"), now)]


PRINTERS["ServiceAccount"] = (_cols(("Name",), ("Secrets",), ("Age",)), _service_account)
