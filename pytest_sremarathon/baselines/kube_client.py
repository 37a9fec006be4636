"""The Kubernetes API as the baselines use it: the official client, JSON in and out."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from .times import iso

#: The pod-template annotation ``kubectl rollout restart`` sets.
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
ZONE_LABEL = "topology.kubernetes.io/zone"
#: The pod label naming the service (the deployment) a pod belongs to.
APP_LABEL = "app"


class KubeError(Exception):
    """A Kubernetes API call failed: ``status`` (HTTP, 0 if unreachable) and the server's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message

    @property
    def denied(self) -> bool:
        return self.status == 403


class KubeClient:
    """The few Kubernetes operations the baselines need, through the official client.

    Reads return the API's JSON (``_preload_content=False``: no model objects), writes are the
    ones an SRE uses: rollout restart (the template annotation ``kubectl`` sets), scale, cordon,
    uncordon, evict, ``set env``, and metadata-only annotations and labels. Every failure is a
    :class:`KubeError`.
    """

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(str(kubeconfig), client_configuration=configuration)
        configuration.retries = 1
        api = client.ApiClient(configuration)
        self._client = client
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.timeout = 20

    def _call(self, fn: Callable[..., Any], *args: Any, raw: bool = True, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            if raw:
                resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
                data = resp.data
                return json.loads(data) if data else {}
            return fn(*args, _request_timeout=self.timeout, **kwargs)
        except ApiException as exc:
            message = exc.reason or ""
            try:
                message = json.loads(exc.body or "{}").get("message") or message
            except (ValueError, AttributeError):
                pass
            raise KubeError(int(exc.status or 0), str(message)) from None
        except Exception as exc:  # noqa: BLE001 - connection errors of every flavour
            raise KubeError(0, f"{type(exc).__name__}: {exc}") from None

    def _items(self, fn: Callable[..., Any], *args: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self._call(fn, *args).get("items", [])
        return items

    # -- reads --
    def nodes(self) -> list[dict[str, Any]]:
        return self._items(self.core.list_node)

    def pods(self, namespace: Optional[str] = None) -> list[dict[str, Any]]:
        if namespace:
            return self._items(self.core.list_namespaced_pod, namespace)
        return self._items(self.core.list_pod_for_all_namespaces)

    def deployments(self, namespace: str) -> list[dict[str, Any]]:
        return self._items(self.apps.list_namespaced_deployment, namespace)

    def configmaps(self, namespace: str) -> list[dict[str, Any]]:
        return self._items(self.core.list_namespaced_config_map, namespace)

    def node_metrics(self) -> list[dict[str, Any]]:
        return self._items(self.custom.list_cluster_custom_object, "metrics.k8s.io", "v1beta1", "nodes")

    def pod_metrics(self) -> list[dict[str, Any]]:
        return self._items(self.custom.list_cluster_custom_object, "metrics.k8s.io", "v1beta1", "pods")

    def log(self, namespace: str, pod: str, *, since_seconds: int = 600, tail: int = 400,
            previous: bool = False) -> str:
        """The pod's log, or ``""`` when it cannot be read (a log is evidence, never a failure)."""
        try:
            # Not preloaded, the answer is the HTTP response (the client's annotation says str).
            resp: Any = self.core.read_namespaced_pod_log(pod, namespace, since_seconds=since_seconds,
                                                          tail_lines=tail, previous=previous,
                                                          _preload_content=False, _request_timeout=self.timeout)
            return str(resp.data.decode("utf-8", "replace"))
        except Exception:  # noqa: BLE001 - ApiException and connection errors alike
            return ""

    # -- writes --
    def restart(self, namespace: str, deployment: str, when: datetime) -> None:
        body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: iso(when)}}}}}
        self._call(self.apps.patch_namespaced_deployment, deployment, namespace, body, raw=False)

    def scale(self, namespace: str, deployment: str, replicas: int) -> None:
        self._call(self.apps.patch_namespaced_deployment_scale, deployment, namespace,
                   {"spec": {"replicas": int(replicas)}}, raw=False)

    def cordon(self, node: str, on: bool = True) -> None:
        self._call(self.core.patch_node, node, {"spec": {"unschedulable": True if on else None}}, raw=False)

    def evict(self, namespace: str, pod: str) -> None:
        c = self._client
        body = c.V1Eviction(metadata=c.V1ObjectMeta(name=pod, namespace=namespace))
        self._call(self.core.create_namespaced_pod_eviction, pod, namespace, body, raw=False)

    def set_env(self, namespace: str, deployment: str, container: str, name: str, value: str) -> None:
        """``kubectl set env deployment/<d> NAME=value`` (a strategic merge on the container's env)."""
        body = {"spec": {"template": {"spec": {"containers": [
            {"name": container, "env": [{"name": name, "value": value}]}]}}}}
        self._call(self.apps.patch_namespaced_deployment, deployment, namespace, body, raw=False)

    def annotate_deployment(self, namespace: str, deployment: str, key: str, value: str) -> None:
        """``kubectl annotate deployment/<d> key=value``: metadata only, no rollout."""
        body = {"metadata": {"annotations": {key: value}}}
        self._call(self.apps.patch_namespaced_deployment, deployment, namespace, body, raw=False)

    def label_node(self, node: str, key: str, value: str) -> None:
        """``kubectl label node <n> key=value``: metadata only."""
        self._call(self.core.patch_node, node, {"metadata": {"labels": {key: value}}}, raw=False)
