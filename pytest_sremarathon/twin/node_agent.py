"""The node agent every twin node runs: a log shipper DaemonSet in ``kube-system`` (as a
kind or managed cluster runs kube-proxy, a CNI agent and a log or metrics agent per node). It
is part of the cluster, not of an app: the policy protects its namespace, no alert rule reads
its pods, and it takes no traffic. Its container is busybox running the shipper's loop, so
``kubectl logs``/``exec`` on it work as on any utility container."""

from __future__ import annotations

from typing import Any

NAME = "node-log-shipper"
NAMESPACE = "kube-system"


def node_agent_daemonset() -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "logging"}
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],  # every node, control plane and tainted ones too
                    "containers": [{
                        "name": "shipper", "image": "busybox:1.36",
                        "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "command": ["sh", "-c", 'echo "node-log-shipper: tailing /var/log/containers on $NODE_NAME"; '
                                                "sleep infinity"],
                        # A real shipper's request (fluent-bit's chart: 100m/128Mi): the same on
                        # every node, so it changes no node's rank for the scheduler.
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                                      "limits": {"memory": "128Mi"}}}]}}}}
