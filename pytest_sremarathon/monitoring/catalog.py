"""The metric families a cluster records, with the type and help text their exporters publish
(``/api/v1/metadata`` serves them), and the label conventions they share.

Label sets (kube-prometheus's, as a ServiceMonitor and the kubelet/kube-state-metrics scrape
configs attach them):

======================================================  ==========================================
``http_requests_total``                                 ``namespace service pod container job instance endpoint code``
``http_request_duration_seconds_{bucket,sum,count}``    ``namespace service pod container job instance endpoint`` (+ ``le``)
``container_*`` (cAdvisor, job ``kubelet``)             ``namespace pod container node job instance`` (+ ``image``)
``kube_*`` (job ``kube-state-metrics``)                 ``namespace pod container node deployment …`` as kube-state-metrics
``up``                                                  ``job instance`` (+ ``namespace pod service`` for pods)
datastore exporters (``redis_*``, ``memcached_*``,      ``namespace service pod job instance`` (+ ``cmd``)
``mongodb_*``)
======================================================  ==========================================

``endpoint`` is the handler the request ran (``place_order``), the way HTTP frameworks'
instrumentation labels it. Requests that failed before reaching a pod (no ready endpoint, a
broken port) are counted as the caller saw them, on series without ``pod``/``instance``, as a
mesh's client-side metrics report them.
"""

from __future__ import annotations

from ..prometheus import TSDB
from .batch_state import METADATA as BATCH_METADATA

#: Classic histogram buckets (seconds): the service runtime's (``runtime/metrics.py``).
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LE = tuple(format(b, "g") for b in BUCKETS) + ("+Inf",)

HTTP_REQUESTS = "http_requests_total"
SLO_P99 = "slo:http_request_duration_seconds:p99"
HTTP_DURATION = "http_request_duration_seconds"

#: Datastore exporters by image: (metric prefix, exporter port, the command label, the
#: command each twin datastore operation is).
DATASTORES: dict[str, tuple[str, int, str, dict[str, str]]] = {
    "redis": ("redis", 9121, "cmd", {"get": "get", "put": "set", "incr": "incrby"}),
    "memcached": ("memcached", 9150, "command", {"get": "get", "put": "set", "incr": "incr"}),
    "mongo": ("mongodb", 9216, "type", {"get": "query", "put": "update", "incr": "update"}),
}

METADATA: dict[str, tuple[str, str]] = {
    HTTP_REQUESTS: ("counter", "Total number of HTTP requests by endpoint and status code."),
    HTTP_DURATION: ("histogram", "Duration of HTTP requests in seconds."),
    "container_cpu_usage_seconds_total": ("counter", "Cumulative cpu time consumed in seconds."),
    "container_memory_working_set_bytes": ("gauge", "Current working set in bytes."),
    "kube_pod_container_resource_limits": ("gauge", "The number of requested limit resource by a container. "
                                                    "It is recommended to use the kube_pod_resource_limits metric "
                                                    "exposed by kube-scheduler instead, as it is more precise."),
    "kube_pod_status_phase": ("gauge", "The pods current phase."),
    "kube_pod_info": ("gauge", "Information about pod."),
    "kube_pod_container_status_restarts_total": ("counter", "The number of container restarts per container."),
    "kube_pod_container_status_ready": ("gauge", "Describes whether the containers readiness check succeeded."),
    "kube_pod_container_status_waiting_reason": ("gauge", "Describes the reason the container is currently in "
                                                          "waiting state."),
    "kube_pod_container_status_last_terminated_reason": ("gauge", "Describes the last reason the container was in "
                                                                  "terminated state."),
    "kube_deployment_status_replicas_available": ("gauge", "The number of available replicas per deployment."),
    "kube_deployment_spec_replicas": ("gauge", "Number of desired pods for a deployment."),
    "kube_node_status_condition": ("gauge", "The condition of a cluster node."),
    "kube_node_spec_unschedulable": ("gauge", "Whether a node can schedule new pods."),
    "kube_node_status_allocatable": ("gauge", "The allocatable for different resources of a node that are available "
                                              "for scheduling."),
    "kube_deployment_status_condition": ("gauge", "The current status conditions of a deployment."),
    **BATCH_METADATA,  # Jobs, CronJobs, DaemonSets
    SLO_P99: ("gauge", "The service's latency objective: its 99th percentile, in seconds (app.yaml slo_p99_ms)."),
    "up": ("gauge", "1 if the last scrape of the target succeeded, 0 if it failed."),
    "redis_up": ("gauge", "Information about the Redis instance"),
    "redis_connected_clients": ("gauge", "connected_clients metric"),
    "redis_commands_total": ("counter", "Total number of calls per command"),
    "redis_commands_duration_seconds_total": ("counter", "Total amount of time in seconds spent per command"),
    "memcached_up": ("gauge", "Could the memcached server be reached."),
    "memcached_current_connections": ("gauge", "Current number of open connections."),
    "memcached_commands_total": ("counter", "Total number of all requests broken down by command (get, set, etc.) "
                                            "and status."),
    "memcached_commands_duration_seconds_total": ("counter", "Total time in seconds spent serving requests, by "
                                                             "command."),
    "mongodb_up": ("gauge", "Whether MongoDB is up."),
    "mongodb_connections": ("gauge", "The number of incoming connections from clients to the database server"),
    "mongodb_op_counters_total": ("counter", "The total number of operations since the mongod instance last "
                                             "started, by type"),
    "mongodb_op_latencies_seconds_total": ("counter", "Total time in seconds spent on operations, by type"),
    # the kubelet's volume stats of mounted claims (twin/volume_usage.py)
    "kubelet_volume_stats_capacity_bytes": ("gauge", "[STABLE] Capacity in bytes of the volume"),
    "kubelet_volume_stats_used_bytes": ("gauge", "[STABLE] Number of used bytes in the volume"),
    "kubelet_volume_stats_available_bytes": ("gauge", "[STABLE] Number of available bytes in the volume"),
    "kubelet_volume_stats_inodes": ("gauge", "[STABLE] Maximum number of inodes in the volume"),
    "kubelet_volume_stats_inodes_used": ("gauge", "[STABLE] Number of used inodes in the volume"),
    "kubelet_volume_stats_inodes_free": ("gauge", "[STABLE] Number of free inodes in the volume"),
    "kube_statefulset_replicas": ("gauge", "Number of desired pods for a StatefulSet."),
    "kube_statefulset_status_replicas_ready": ("gauge", "The number of ready replicas per StatefulSet."),
    "kube_statefulset_status_replicas_updated": ("gauge", "The number of updated replicas per StatefulSet."),
    "kube_persistentvolumeclaim_status_phase": ("gauge", "The phase the persistent volume claim is currently in."),
}


def declare(db: TSDB) -> None:
    """Publish every family's type and help (once, when the store is made)."""
    for name, (kind, text) in METADATA.items():
        db.set_metadata(name, kind, text)


def datastore_names(prefix: str) -> tuple[str, str, str, dict[str, str]]:
    """A datastore exporter's names: commands counter, command-seconds counter, connections
    gauge and the labels that gauge carries."""
    if prefix == "mongodb":
        return "mongodb_op_counters_total", "mongodb_op_latencies_seconds_total", "mongodb_connections", \
            {"state": "current"}
    if prefix == "redis":
        return "redis_commands_total", "redis_commands_duration_seconds_total", "redis_connected_clients", {}
    return f"{prefix}_commands_total", f"{prefix}_commands_duration_seconds_total", \
        f"{prefix}_current_connections", {}


def datastore_flavour(image: str) -> str:
    """``redis``, ``memcached`` or ``mongo`` for a datastore's image (``redis:7.2-alpine``)."""
    base = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0].lower()
    for flavour in DATASTORES:
        if base.startswith(flavour):
            return flavour
    return "redis"
