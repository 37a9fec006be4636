"""The applications' manifests, as a real cluster runs them.

The pipeline renders the same objects for both backends (ConfigMaps from ``config/``, the
app's ``manifests/`` with each code container pinned to its artifact,
``registry.sremarathon.local/<app>/<svc>@sha256:<digest>``). :func:`for_cluster` adapts one of
them to a real cluster, changing only what must change:

* every container image becomes the built image's tag (``…/<app>/<svc>:<digest12>``), a
  datastore's stock image (``redis:7.2-alpine``) the runtime image serving the twin's built-in
  datastore for it; ``imagePullPolicy: IfNotPresent`` (images are loaded, not pulled);
* each runtime container learns where it runs and how to reach its peers through environment
  variables the runtime reads: ``POD_NAME``, ``POD_NAMESPACE``, ``NODE_NAME`` (downward API),
  ``PORT`` (its first container port), ``SREMARATHON_SERVICE_PORTS`` (the Service ports of
  its app) and ``SREMARATHON_EXTERNALS`` (the app's third-party APIs, answered in-process);
* the pod template carries the artifact digest (``sremarathon.dev/artifact-digest``), so
  evidence can name the code a pod runs exactly as the twin's image digest does.

Everything else — replicas, probes, resources, spread constraints, Services, ConfigMaps,
Secrets — is applied as the pipeline rendered it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any, Optional

from ..apps import AppSpec

ARTIFACT_ANNOTATION = "sremarathon.dev/artifact-digest"
PULL_POLICY = "IfNotPresent"


class ManifestError(ValueError):
    pass


def artifact_image(image: str, app: str) -> Optional[tuple[str, str]]:
    """(service, digest) of a pipeline-pinned image of ``app``; None for a stock image."""
    repo, sep, digest = image.partition("@")
    prefix = f"/{app}/"
    if not sep or prefix not in repo:
        return None
    return repo.rsplit("/", 1)[-1], digest


def service_ports(objects: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Service name → its first port, for every Service among ``objects``."""
    out: dict[str, int] = {}
    for obj in objects:
        if obj.get("kind") == "Service":
            ports = (obj.get("spec") or {}).get("ports") or []
            if ports and isinstance(ports[0].get("port"), int):
                out[obj["metadata"]["name"]] = ports[0]["port"]
    return dict(sorted(out.items()))


def externals_env(app: AppSpec) -> dict[str, dict[str, Any]]:
    return {name: {"host": e.host, "latency_ms": e.latency_ms} for name, e in sorted(app.externals.items())}


def _set_env(container: dict[str, Any], entries: list[dict[str, Any]]) -> None:
    env = container.setdefault("env", [])
    have = {e.get("name") for e in env}
    env.extend(e for e in entries if e["name"] not in have)


def _field(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}


def for_cluster(obj: dict[str, Any], images: dict[str, str], *, ports: dict[str, int],
                externals: Optional[dict[str, dict[str, Any]]] = None,
                digests: Optional[dict[str, str]] = None) -> dict[str, Any]:
    """The object to apply to a real cluster. ``images`` maps every container image the
    pipeline rendered to the tag built for it; ``digests`` maps those images to the artifact
    digest (for the pod-template annotation)."""
    out = copy.deepcopy(obj)
    if out.get("kind") not in ("Deployment", "StatefulSet"):
        return out
    template = out["spec"]["template"]
    pod_spec = template.setdefault("spec", {})
    digest = None
    for c in list(pod_spec.get("initContainers") or []) + list(pod_spec.get("containers") or []):
        image = c.get("image", "")
        if image not in images:
            raise ManifestError(f"{out['metadata'].get('namespace')}/{out['metadata']['name']}: no image was built "
                                f"for container {c.get('name')!r} ({image!r})")
        c["image"] = images[image]
        c["imagePullPolicy"] = PULL_POLICY
        digest = digest or (digests or {}).get(image)
        container_ports = [p["containerPort"] for p in c.get("ports") or [] if isinstance(p.get("containerPort"), int)]
        _set_env(c, [
            _field("POD_NAME", "metadata.name"), _field("POD_NAMESPACE", "metadata.namespace"),
            _field("NODE_NAME", "spec.nodeName"),
            {"name": "PORT", "value": str(container_ports[0] if container_ports else 8080)},
            {"name": "SREMARATHON_SERVICE_PORTS", "value": json.dumps(ports, sort_keys=True)},
            {"name": "SREMARATHON_EXTERNALS", "value": json.dumps(externals or {}, sort_keys=True)},
        ])
    if digest:
        template.setdefault("metadata", {}).setdefault("annotations", {})[ARTIFACT_ANNOTATION] = digest
    return out


def namespace_object(name: str, app: Optional[str] = None) -> dict[str, Any]:
    labels = {"kubernetes.io/metadata.name": name}
    if app:
        labels["app.kubernetes.io/part-of"] = app
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


IS_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def claimed_storage_classes(obj: dict[str, Any]) -> set[str]:
    """The StorageClasses a manifest's claims name (a StatefulSet's claim templates, a claim)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "StatefulSet":
        claims = [t.get("spec") or {} for t in spec.get("volumeClaimTemplates") or []]
    elif obj.get("kind") == "PersistentVolumeClaim":
        claims = [spec]
    else:
        return set()
    return {c["storageClassName"] for c in claims if c.get("storageClassName")}


def storage_class_like(default: dict[str, Any], name: str) -> dict[str, Any]:
    """A class named ``name`` that provisions as the cluster's default class does. The apps'
    datastores claim ``standard-regional`` (regional disks on the twin); a kind cluster ships
    only ``standard`` (node-local volumes), so there the regional class is the same provisioner
    under the name the manifests use: the claims bind instead of staying Pending."""
    keep = ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode", "allowVolumeExpansion", "mountOptions")
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "sremarathon"}},
            **{k: default[k] for k in keep if k in default}}


def check(objects: Iterable[dict[str, Any]]) -> list[str]:
    """Problems that would make a real cluster pull or misplace images (empty when none):
    ``:latest`` or untagged images, pull policies other than IfNotPresent/Never."""
    problems = []
    for obj in objects:
        if obj.get("kind") not in ("Deployment", "StatefulSet"):
            continue
        name = f"{obj['metadata'].get('namespace')}/{obj['metadata']['name']}"
        for c in obj["spec"]["template"]["spec"].get("containers") or []:
            image = c.get("image", "")
            last = image.rsplit("/", 1)[-1]
            if "@" not in image and (":" not in last or last.endswith(":latest")):
                problems.append(f"{name}: container {c.get('name')} uses an unpinned image {image!r}")
            if c.get("imagePullPolicy") not in ("IfNotPresent", "Never"):
                problems.append(f"{name}: container {c.get('name')} has imagePullPolicy "
                                f"{c.get('imagePullPolicy')!r} (loaded images need IfNotPresent)")
    return problems
