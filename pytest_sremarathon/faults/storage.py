"""Storage fault kinds: a change that fills a datastore's volume."""

from __future__ import annotations

from typing import Any, Optional

from ..k8s.objects import aof_rewrite_enabled, pod_is_active
from ..provenance import EvidenceRef
from .base import Fault, World, workload_evidence
from .change import CodeFault, _ready_pods


class VolumeFilling(CodeFault):
    """A change makes a redis datastore's volume fill within tens of minutes: the app starts
    keeping large values (the shop's cart keeps a support snapshot of every cart with its
    product picture inlined, ~256 KiB), and the same change turns the server's automatic AOF rewrite
    off (``--auto-aof-rewrite-percentage 0``, "keep the full history for replay"), so every
    write stays in the append-only file on the datastore's claim.

    Effects: ``kubelet_volume_stats_used_bytes`` of the datastore's claim climbs at megabytes a
    minute until ``available`` is 0; then every write is refused with ``MISCONF Errors writing to
    the AOF file: No space left on device`` — the callers' writes fail (ServiceHighErrorRate on
    the cart and the frontend), reads still work. Restarting the datastore's pod changes nothing
    (the claim keeps the file); scaling it out gives the new pod an empty claim of its own while
    the Service still sends writes to the full one. Reverting alone is not enough: the full log
    cannot be rewritten without room for the new file. Repair: revert the change AND expand the
    claim (``kubectl patch pvc data-<set>-0 -p '{"spec":{"resources":{"requests":{"storage":
    "4Gi"}}}}'``: the class allows expansion; the rewrite then runs) or free the volume."""

    name = "volume-filling"
    description = "a change fills a datastore's volume until its writes fail with ENOSPC"
    component_form = "service:<app>/<datastore>"
    arrives = ("a curated change (the app's code and the datastore's StatefulSet) committed and deployed "
               "through the pipeline")
    repair = ("revert the change through the pipeline AND expand the datastore's claim (allowVolumeExpansion) "
              "or free its volume; restarting or scaling the datastore is no repair")
    judge = ("no pod runs the change's code or a datastore template with the AOF rewrite off, no claim "
             "mounted by the datastore's pods is full, and the datastore and its callers have a ready pod")

    def _code_services(self, world: World, fault: Fault) -> list[str]:
        """The app's services whose code files the change edits (``services/<svc>.py``)."""
        app = world.apps[fault.app]
        out = []
        for f in self._files(world, fault):
            stem = f.rsplit("/", 1)[-1].removesuffix(".py")
            if f.startswith("services/") and stem in app.services:
                out.append(stem)
        return out

    def _datastore(self, world: World, fault: Fault) -> str:
        return self.tag(world, fault).service

    def live(self, world: World, fault: Fault) -> bool:
        signature, files = self.signature(world, fault), self._files(world, fault)
        artifacts = world.cluster.artifacts
        for svc in self._code_services(world, fault):
            for pod in _active(world, fault.app, svc):
                for container in pod["spec"].get("containers") or []:
                    artifact = artifacts.by_image(container.get("image", ""))
                    if artifact is not None and any(signature in artifact.files.get(f, "") for f in files):
                        return True
        return any(not aof_rewrite_enabled(p) for p in _active(world, fault.app, self._datastore(world, fault)))

    def full_claims(self, world: World, fault: Fault) -> list[str]:
        """The claims the datastore's pods mount that have no room left."""
        usage = getattr(world.cluster, "volume_usage", None)
        if usage is None:
            return []
        return sorted({name for p in _active(world, fault.app, self._datastore(world, fault))
                       for name in _claims(p) if usage.full(fault.app, name)})

    def mitigated(self, world: World, fault: Fault) -> bool:
        ds = self._datastore(world, fault)
        if self.live(world, fault) or self.full_claims(world, fault) or _ready_pods(world, fault.app, ds) < 1:
            return False
        return all(_ready_pods(world, fault.app, s) >= 1 for s in self._code_services(world, fault))

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The callers' and the datastore's templates and pods, and the datastore's claims (their size)."""
        ds = self._datastore(world, fault)
        out = [r for s in self._code_services(world, fault) for r in workload_evidence(world, fault.app, s, replicas=False)]
        out += workload_evidence(world, fault.app, ds, replicas=False)
        out += [EvidenceRef("PersistentVolumeClaim", fault.app, name, "size")
                for name in sorted({n for p in _active(world, fault.app, ds) for n in _claims(p)})]
        return out

    def cleanup(self, world: World, fault: Fault) -> None:
        """The on-call human reverts the change and doubles each full claim of the datastore."""
        super().cleanup(world, fault)
        store = world.cluster.store
        usage = getattr(world.cluster, "volume_usage", None)
        for name in self.full_claims(world, fault):
            claim = store.get("PersistentVolumeClaim", fault.app, name)
            if claim is None or usage is None:
                continue
            gib = max(1, -(-usage.capacity(fault.app, name) // 2**30))
            claim["spec"].setdefault("resources", {}).setdefault("requests", {})["storage"] = f"{2 * gib}Gi"
            store.touch(claim, spec_changed=True)


def _active(world: World, ns: str, service: str) -> list[dict[str, Any]]:
    return [p for p in world.cluster.store.list("Pod", ns)
            if (p["metadata"].get("labels") or {}).get("app") == service and pod_is_active(p)]


def _claims(pod: dict[str, Any]) -> list[str]:
    names: list[Optional[str]] = [(v.get("persistentVolumeClaim") or {}).get("claimName")
                                  for v in pod["spec"].get("volumes") or []]
    return [n for n in names if n]


STORAGE_KINDS = (VolumeFilling,)
