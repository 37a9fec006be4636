"""Persistent storage: the PersistentVolume controller (binding claims to volumes, the default
StorageClass assigned to claims that name none, reclaiming released volumes), a dynamic
provisioner for the cluster's StorageClasses, claim expansion, and the scheduler's volume
binding checks (a pod whose claim cannot bind stays Pending with the real message; a pod
whose claim is bound to a zonal volume only fits nodes of that zone), and storage object in-use
protection: every claim and volume carries its protection finalizer (:func:`protect`, what the
admission plugin adds), so a claim deleted while a scheduled pod still uses it stays
Terminating until that pod is gone, and a volume deleted while bound until it is released.

Provisioning is synchronous: the real provisioner answers within seconds, well inside a tick.
"""

from __future__ import annotations

from typing import Any, Optional

from ..k8s.objects import EventRecorder
from ..k8s.quantity import memory_bytes
from ..k8s.store import Store

DEFAULT_CLASS = "standard"
#: The class the apps' datastores claim: regional disks, replicated synchronously in two zones
#: (GCE PD CSI's ``replication-type: regional-pd``), so a datastore's pod can start in either
#: zone and a lost zone does not strand its data (a zonal disk would keep the pod Pending).
REGIONAL_CLASS = "standard-regional"
REPLICATION = "replication-type"
PROVISIONER = "csi.twin.sremarathon.io"
IS_DEFAULT = "storageclass.kubernetes.io/is-default-class"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
ZONE = "topology.kubernetes.io/zone"
COMPONENT = "persistentvolume-controller"
INPUT_KINDS = ("PersistentVolumeClaim", "PersistentVolume", "StorageClass")
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
AFFINITY_CONFLICT = "node(s) had volume node affinity conflict"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
PV_PROTECTION = "kubernetes.io/pv-protection"
_PROTECTION = {"PersistentVolumeClaim": PVC_PROTECTION, "PersistentVolume": PV_PROTECTION}


def protect(obj: dict[str, Any]) -> None:
    """The StorageObjectInUseProtection admission plugin: a new claim or volume gets its
    protection finalizer (whoever creates it: a client, the StatefulSet controller, the
    provisioner); any other object is left alone."""
    finalizer = _PROTECTION.get(obj.get("kind", ""))
    if finalizer is not None:
        finalizers = obj.setdefault("metadata", {}).setdefault("finalizers", [])
        if finalizer not in finalizers:
            finalizers.append(finalizer)


def being_deleted(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def default_storage_class() -> dict[str, Any]:
    """The cluster's default class: zonal disks provisioned when the first pod using a claim
    is scheduled (so the disk is in that pod's zone), deleted with their claim, expandable."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": DEFAULT_CLASS, "annotations": {IS_DEFAULT: "true"}},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True, "parameters": {"type": "pd-balanced"}}


def regional_storage_class() -> dict[str, Any]:
    """A class of disks replicated in two zones (the first consumer's and the next one), as a
    cloud's regional persistent disks: what a production datastore on a multi-zone cluster uses."""
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": REGIONAL_CLASS},
            "provisioner": PROVISIONER, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer",
            "allowVolumeExpansion": True, "parameters": {"type": "pd-balanced", REPLICATION: "regional-pd"}}


def _claims_of(pod: dict[str, Any]) -> list[str]:
    return [v["persistentVolumeClaim"]["claimName"] for v in (pod.get("spec") or {}).get("volumes") or []
            if isinstance(v.get("persistentVolumeClaim"), dict) and v["persistentVolumeClaim"].get("claimName")]


def _request(claim: dict[str, Any]) -> str:
    return str((((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage", "1Gi"))


class VolumeController:
    def __init__(self, store: Store, events: EventRecorder) -> None:
        self.store = store
        self.events = events
        self._synced: tuple[int, ...] = ()  # the input kinds' versions after the last pass
        self._in_use_held = False  # did the last pass keep a deleted claim for a pod using it?

    # -- the PersistentVolume controller -------------------------------------------------------
    def _inputs(self) -> tuple[int, ...]:
        """What a pass reads: the storage kinds, and the pods while a deleted claim waits for
        the pods using it to go."""
        kinds = (*INPUT_KINDS, "Pod") if self._in_use_held else INPUT_KINDS
        return self.store.kind_version(*kinds)

    def reconcile(self) -> None:
        if self._inputs() == self._synced:
            return
        self._in_use_held = False
        for claim in list(self.store.list("PersistentVolumeClaim")):
            if being_deleted(claim):
                self._release_claim(claim)
            else:
                self.sync_claim(claim)
        for pv in list(self.store.list("PersistentVolume")):
            self._sync_volume(pv)
            if being_deleted(pv) and self.store.get("PersistentVolume", None, pv["metadata"]["name"]) is pv:
                self._release_volume(pv)
        self._synced = self._inputs()

    # -- in-use protection (the pvc-protection and pv-protection controllers) ------------------
    def _in_use(self, claim: dict[str, Any]) -> bool:
        """Does a scheduled pod that has not finished use the claim? (An unscheduled pod does
        not hold it: the kubelet never starts a pod on a claim being deleted.)"""
        name = claim["metadata"]["name"]
        return any(p["spec"].get("nodeName") and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                   and name in _claims_of(p) for p in self.store.list("Pod", claim["metadata"]["namespace"]))

    def _release_claim(self, claim: dict[str, Any]) -> None:
        if PVC_PROTECTION in (claim["metadata"].get("finalizers") or []):
            if self._in_use(claim):
                self._in_use_held = True
                return
            self._drop_finalizer(claim, PVC_PROTECTION)

    def _release_volume(self, pv: dict[str, Any]) -> None:
        if PV_PROTECTION in (pv["metadata"].get("finalizers") or []) and \
                (pv.get("status") or {}).get("phase") != "Bound":
            self._drop_finalizer(pv, PV_PROTECTION)

    def _drop_finalizer(self, obj: dict[str, Any], finalizer: str) -> None:
        """Remove one finalizer of an object being deleted: the last one gone, so is the object."""
        md = obj["metadata"]
        md["finalizers"] = [f for f in md.get("finalizers") or [] if f != finalizer]
        if md["finalizers"]:
            self.store.touch(obj)
        else:
            self.store.delete(obj["kind"], md.get("namespace"), md["name"])

    def default_class(self) -> Optional[dict[str, Any]]:
        for sc in self.store.list("StorageClass"):
            if (sc["metadata"].get("annotations") or {}).get(IS_DEFAULT) == "true":
                return sc
        return None

    def sync_claim(self, claim: dict[str, Any]) -> None:
        spec = claim.setdefault("spec", {})
        md = claim["metadata"]
        if spec.get("storageClassName") is None and not spec.get("volumeName"):
            # Retroactive default class assignment (GA in 1.28): a claim that names no class gets
            # the default one, even if it was created before there was one.
            sc = self.default_class()
            if sc is None:
                return
            spec["storageClassName"] = sc["metadata"]["name"]
            self.store.touch(claim)
        status = claim.setdefault("status", {})
        if status.get("phase") == "Bound":
            self._expand(claim)
            return
        class_name = spec.get("storageClassName") or ""
        sc = self.store.get("StorageClass", None, class_name) if class_name else None
        available = self._matching_volume(claim)
        if available is not None:
            self._bind(claim, available)
            return
        if sc is None:
            self.events.record(claim, "Warning", "ProvisioningFailed",
                               f'storageclass.storage.k8s.io "{class_name}" not found', COMPONENT)
            self._set_phase(claim, "Pending")
            return
        if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not (md.get("annotations") or {}).get(SELECTED_NODE):
            self.events.record(claim, "Normal", "WaitForFirstConsumer",
                               "waiting for first consumer to be created before binding", COMPONENT)
            self._set_phase(claim, "Pending")
            return
        self._provision(claim, sc)

    def _set_phase(self, claim: dict[str, Any], phase: str) -> None:
        if claim["status"].get("phase") != phase:
            claim["status"]["phase"] = phase
            self.store.touch(claim)

    def _matching_volume(self, claim: dict[str, Any]) -> Optional[dict[str, Any]]:
        """A statically created volume the claim may bind: the one it names, or an Available one
        of its class, access modes and at least its size (the smallest such)."""
        spec = claim["spec"]
        if spec.get("volumeName"):
            pv = self.store.get("PersistentVolume", None, spec["volumeName"])
            return pv if pv is not None and not (pv.get("spec") or {}).get("claimRef") else None
        want = memory_bytes(_request(claim))
        fits = [pv for pv in self.store.list("PersistentVolume")
                if (pv.get("status") or {}).get("phase") == "Available" and not pv["spec"].get("claimRef")
                and pv["spec"].get("storageClassName", "") == (spec.get("storageClassName") or "")
                and set(spec.get("accessModes") or []) <= set(pv["spec"].get("accessModes") or [])
                and memory_bytes((pv["spec"].get("capacity") or {}).get("storage")) >= want]
        return min(fits, key=lambda pv: (memory_bytes(pv["spec"]["capacity"]["storage"]), pv["metadata"]["name"]),
                   default=None)

    def _provision(self, claim: dict[str, Any], sc: dict[str, Any]) -> None:
        md = claim["metadata"]
        annotations = md.setdefault("annotations", {})
        provisioner = sc.get("provisioner", PROVISIONER)
        annotations["volume.beta.kubernetes.io/storage-provisioner"] = provisioner
        annotations["volume.kubernetes.io/storage-provisioner"] = provisioner
        self.events.record(claim, "Normal", "ExternalProvisioning",
                           f"Waiting for a volume to be created either by the external provisioner '{provisioner}' "
                           "or manually by the system administrator. If volume creation is delayed, please verify "
                           "that the provisioner is running and correctly registered.", COMPONENT)
        pv_spec: dict[str, Any] = {
            "capacity": {"storage": _request(claim)}, "accessModes": list(claim["spec"].get("accessModes") or
                                                                           ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
            "storageClassName": sc["metadata"]["name"], "volumeMode": claim["spec"].get("volumeMode", "Filesystem"),
            "csi": {"driver": provisioner, "fsType": "ext4", "volumeHandle": f"twin-disk-{md['uid'][:13]}"}}
        node = self.store.get("Node", None, annotations.get(SELECTED_NODE, ""))
        zone = ((node or {}).get("metadata", {}).get("labels") or {}).get(ZONE)
        if zone:
            zones = [zone]
            if (sc.get("parameters") or {}).get(REPLICATION) == "regional-pd":  # and a replica in the next zone
                others = sorted({(n["metadata"].get("labels") or {}).get(ZONE, "") for n in self.store.list("Node")}
                                - {zone, ""})
                zones = sorted([zone] + others[:1])
            pv_spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE, "operator": "In", "values": zones}]}]}}
        name = f"pvc-{md['uid']}"
        volume: dict[str, Any] = {"apiVersion": "v1", "kind": "PersistentVolume",
                                  "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": provisioner}},
                                  "spec": pv_spec, "status": {"phase": "Available"}}
        protect(volume)
        pv = self.store.create(volume)
        self.events.record(claim, "Normal", "ProvisioningSucceeded",
                           f"Successfully provisioned volume {name}", f"{provisioner}_twin-provisioner")
        self._bind(claim, pv)

    def _bind(self, claim: dict[str, Any], pv: dict[str, Any]) -> None:
        md = claim["metadata"]
        pv["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "namespace": md["namespace"], "name": md["name"],
                                  "uid": md["uid"], "apiVersion": "v1",
                                  "resourceVersion": md["resourceVersion"]}
        pv["status"] = {"phase": "Bound"}
        pv["metadata"].setdefault("annotations", {})["pv.kubernetes.io/bound-by-controller"] = "yes"
        self.store.touch(pv)
        claim["spec"]["volumeName"] = pv["metadata"]["name"]
        annotations = md.setdefault("annotations", {})
        annotations["pv.kubernetes.io/bind-completed"] = "yes"
        annotations["pv.kubernetes.io/bound-by-controller"] = "yes"
        claim["status"] = {"phase": "Bound", "accessModes": list(pv["spec"].get("accessModes") or []),
                           "capacity": dict(pv["spec"].get("capacity") or {})}
        self.store.touch(claim)

    def _expand(self, claim: dict[str, Any]) -> None:
        """A bound claim asking for more than it has: the volume grows if its class allows it
        (online expansion: the file system follows at once)."""
        want = _request(claim)
        have = (claim["status"].get("capacity") or {}).get("storage", want)
        if memory_bytes(want) <= memory_bytes(have):
            return
        pv = self.store.get("PersistentVolume", None, claim["spec"].get("volumeName", ""))
        sc = self.store.get("StorageClass", None, claim["spec"].get("storageClassName") or "")
        if pv is None or sc is None or not sc.get("allowVolumeExpansion"):
            return
        pv["spec"]["capacity"] = {"storage": want}
        self.store.touch(pv)
        claim["status"]["capacity"] = {"storage": want}
        self.store.touch(claim)
        self.events.record(claim, "Normal", "FileSystemResizeSuccessful",
                           f"MountVolume.NodeExpandVolume succeeded for volume \"{pv['metadata']['name']}\"", "kubelet")

    def _sync_volume(self, pv: dict[str, Any]) -> None:
        ref = pv["spec"].get("claimRef")
        if not ref:
            if (pv.get("status") or {}).get("phase") != "Available":
                pv["status"] = {"phase": "Available"}
                self.store.touch(pv)
            return
        claim = self.store.get("PersistentVolumeClaim", ref.get("namespace"), ref.get("name", ""))
        if claim is not None and claim["metadata"]["uid"] == ref.get("uid"):
            return
        if pv["spec"].get("persistentVolumeReclaimPolicy", "Retain") == "Delete":
            self.store.delete("PersistentVolume", None, pv["metadata"]["name"])
        elif (pv.get("status") or {}).get("phase") != "Released":
            pv["status"] = {"phase": "Released"}
            self.store.touch(pv)

    # -- the scheduler's volume binding -------------------------------------------------------
    def unschedulable(self, pod: dict[str, Any]) -> Optional[str]:
        """Why no node can take this pod because of its claims (None: its claims allow some)."""
        ns = pod["metadata"]["namespace"]
        for name in _claims_of(pod):
            claim = self.store.get("PersistentVolumeClaim", ns, name)
            if claim is None:
                return f'persistentvolumeclaim "{name}" not found'
            if being_deleted(claim):
                return f'persistentvolumeclaim "{name}" is being deleted'
            if (claim.get("status") or {}).get("phase") == "Bound":
                continue
            sc = self.store.get("StorageClass", None, claim["spec"].get("storageClassName") or "")
            if sc is None or sc.get("volumeBindingMode") != "WaitForFirstConsumer":
                return UNBOUND_IMMEDIATE
        return None

    def fits(self, pod: dict[str, Any], node: dict[str, Any]) -> bool:
        """Every bound claim's volume may be attached on this node (its zone)."""
        ns = pod["metadata"]["namespace"]
        labels = node["metadata"].get("labels") or {}
        for name in _claims_of(pod):
            claim = self.store.get("PersistentVolumeClaim", ns, name)
            pv = self.store.get("PersistentVolume", None, ((claim or {}).get("spec") or {}).get("volumeName", ""))
            terms = ((((pv or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}) \
                .get("nodeSelectorTerms") or []
            if terms and not any(all(labels.get(e["key"]) in e.get("values", []) for e in t.get("matchExpressions") or [])
                                 for t in terms):
                return False
        return True

    def scheduled(self, pod: dict[str, Any], node: str) -> None:
        """The pod was bound to ``node``: its claims waiting for a first consumer are provisioned
        there (the scheduler's PreBind waits for that)."""
        ns = pod["metadata"]["namespace"]
        for name in _claims_of(pod):
            claim = self.store.get("PersistentVolumeClaim", ns, name)
            if claim is None or (claim.get("status") or {}).get("phase") == "Bound":
                continue
            claim["metadata"].setdefault("annotations", {})[SELECTED_NODE] = node
            self.store.touch(claim)
            self.sync_claim(claim)
