"""How full the persistent volumes are: the bytes a datastore's writes put on its claim, the
kubelet's ``kubelet_volume_stats_*`` series for every mounted claim, and a full volume making
the datastore's writes fail as ENOSPC does.

The model is redis's append-only file with its default rewrite policy (redis.conf:
``appendonly yes``, ``auto-aof-rewrite-percentage 100``, ``auto-aof-rewrite-min-size 64mb``):
every command served appends its RESP encoding to the log; once the log is at least 64 MiB and
twice its size after the last rewrite, it is rewritten down to the dataset. A healthy volume
therefore saws between the dataset and 64 MiB; a rewrite needs room for the new file, so a
full volume stays full until the claim grows (or the data goes). State is kept per claim, not
per pod: a restarted or recreated pod mounts the same bytes.

A tick with no claim mounted by a running container does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from ..k8s.objects import aof_rewrite_enabled
from ..k8s.quantity import memory_bytes
from ..k8s.store import Store
from ..monitoring.kube_state import kubelet_instance
from ..prometheus.tsdb import TSDB

if TYPE_CHECKING:
    from .kubelet import Kubelet
    from .scraper import ServiceTraffic

#: Bytes appended per command served: the RESP encoding of a SET of a ~20-byte key and a
#: ~100-byte value is about 150 bytes; reads append nothing, and the apps' datastore traffic is
#: mostly reads and increments, so the average is lower.
BYTES_PER_COMMAND = 90.0
REWRITE_MIN_BYTES = 64 * 2**20  # auto-aof-rewrite-min-size 64mb
REWRITE_GROWTH = 2.0  # auto-aof-rewrite-percentage 100: rewrite once the log doubled
DATASET_BYTES = 6 * 2**20  # what a rewrite leaves: the apps' few thousand keys, with the RDB preamble
FS_OVERHEAD_BYTES = 24 * 2**10  # a fresh ext4 file system's used blocks (lost+found, journal metadata)
BYTES_PER_INODE = 16384  # mke2fs's default inode ratio
INODES_USED = 12  # lost+found, the log, the dump, a temporary file

SERIES = ("kubelet_volume_stats_capacity_bytes", "kubelet_volume_stats_used_bytes",
          "kubelet_volume_stats_available_bytes", "kubelet_volume_stats_inodes",
          "kubelet_volume_stats_inodes_used", "kubelet_volume_stats_inodes_free")
ENOSPC = "MISCONF Errors writing to the AOF file: No space left on device"


@dataclass
class ClaimUsage:
    used: float = float(FS_OVERHEAD_BYTES + DATASET_BYTES)
    base: float = float(DATASET_BYTES)  # the log's size after its last rewrite
    #: bytes appended per command; a change to the datastore's logging or retention raises it
    bytes_per_command: float = BYTES_PER_COMMAND
    rewrite: bool = True  # auto-aof-rewrite on (a percentage of 0 turns it off)


@dataclass(frozen=True)
class _Mount:
    namespace: str
    claim: str
    pod: str
    node: str
    service: str
    pod_uid: str
    rewrite: bool = True  # the server's auto-aof-rewrite (``--auto-aof-rewrite-percentage 0`` turns it off)


#: Values up to this size are in :data:`BYTES_PER_COMMAND`; a larger value adds its own bytes.
LARGE_VALUE_BYTES = 1024




class VolumeUsage:
    def __init__(self, store: Store, kubelet: Kubelet, db: TSDB) -> None:
        self.store = store
        self.kubelet = kubelet
        self.db = db
        self.claims: dict[tuple[str, str], ClaimUsage] = {}  # (namespace, claim) -> its bytes
        self._mounts: list[_Mount] = []
        self._mounts_at: tuple[int, ...] = ()  # the Pod/claim versions the mounts were listed at
        self._refs: dict[_Mount, list[int]] = {}
        self._block = db.block()

    def usage(self, namespace: str, claim: str) -> ClaimUsage:
        key = (namespace, claim)
        got = self.claims.get(key)
        if got is None:
            got = self.claims[key] = ClaimUsage()
        return got

    def capacity(self, namespace: str, claim: str) -> int:
        pvc = self.store.get("PersistentVolumeClaim", namespace, claim)
        return memory_bytes(((pvc or {}).get("status") or {}).get("capacity", {}).get("storage", "0"))

    def _mounted(self) -> list[_Mount]:
        """The bound claims that running pods mount, listed again only when a pod or claim changed."""
        versions = self.store.kind_version("Pod", "PersistentVolumeClaim")
        if versions == self._mounts_at:
            return self._mounts
        self._mounts_at = versions
        mounts: list[_Mount] = []
        if self.store.list("PersistentVolumeClaim"):
            for pod in self.store.list("Pod"):
                node = pod["spec"].get("nodeName")
                if not node or pod.get("status", {}).get("phase") != "Running":
                    continue
                ns = pod["metadata"]["namespace"]
                for v in pod["spec"].get("volumes") or []:
                    name = (v.get("persistentVolumeClaim") or {}).get("claimName")
                    pvc = self.store.get("PersistentVolumeClaim", ns, name) if name else None
                    if name and pvc is not None and (pvc.get("status") or {}).get("phase") == "Bound":
                        mounts.append(_Mount(ns, name, pod["metadata"]["name"], node,
                                             (pod["metadata"].get("labels") or {}).get("app", ""),
                                             pod["metadata"]["uid"], aof_rewrite_enabled(pod)))
        self._mounts = mounts
        return mounts

    def advance(self, t: float, dt: float, traffic: dict[tuple[str, str], ServiceTraffic]) -> None:
        """The tick's writes onto the mounted claims, their series at ``t``, and ENOSPC for the
        processes whose volume is full."""
        mounts = self._mounted()
        if not mounts:
            return
        serving: dict[tuple[str, str], int] = {}
        for m in mounts:
            serving[(m.namespace, m.service)] = serving.get((m.namespace, m.service), 0) + 1
        values: list[float] = []
        refs: list[int] = []
        for m in mounts:
            u = self.usage(m.namespace, m.claim)
            capacity = float(self.capacity(m.namespace, m.claim))
            st = traffic.get((m.namespace, m.service))
            if st is not None and st.requests > 0:
                u.used += st.requests / serving[(m.namespace, m.service)] * u.bytes_per_command
            u.used += self._large_writes(m)
            u.rewrite = m.rewrite
            log = u.used - FS_OVERHEAD_BYTES
            if u.rewrite and log >= max(REWRITE_MIN_BYTES, REWRITE_GROWTH * u.base) and \
                    u.used + DATASET_BYTES <= capacity:  # the new file is written beside the old one
                u.used, u.base = float(FS_OVERHEAD_BYTES + DATASET_BYTES), float(DATASET_BYTES)
            u.used = min(u.used, capacity)
            self._set_full(m, u.used >= capacity)
            inodes = capacity // BYTES_PER_INODE
            values.extend((capacity, u.used, capacity - u.used, inodes, INODES_USED, inodes - INODES_USED))
            refs.extend(self._series(m))
        self._block.append(t, refs, values)

    def _large_writes(self, m: _Mount) -> float:
        """The bytes of the large values the pod's server took since the last tick (read and zeroed)."""
        c = self.kubelet.by_name.get((m.namespace, m.pod))
        stats = getattr(getattr(c, "module", None), "_STATS", None) if c is not None else None
        if not isinstance(stats, dict) or not stats.get("large_write_bytes"):
            return 0.0
        got = float(stats["large_write_bytes"])
        stats["large_write_bytes"] = 0.0
        return got

    def _set_full(self, m: _Mount, full: bool) -> None:
        c = self.kubelet.by_name.get((m.namespace, m.pod))
        if c is not None and c.ctx is not None and c.ctx.volume_full != full:
            c.ctx.volume_full = full

    def _series(self, m: _Mount) -> list[int]:
        refs = self._refs.get(m)
        if refs is None:
            base = {"namespace": m.namespace, "persistentvolumeclaim": m.claim, "job": "kubelet",
                    "instance": kubelet_instance(m.node), "node": m.node, "metrics_path": "/metrics"}
            refs = self._refs[m] = [self.db.ref({**base, "__name__": name}) for name in SERIES]
        return refs

    def filling(self, share: float) -> list[tuple[str, str, str, float]]:
        """The mounted claims with less than ``share`` of their capacity available:
        (namespace, claim, the mounting pod's service, the available share)."""
        out = []
        for m in self._mounts:
            u = self.claims.get((m.namespace, m.claim))
            capacity = float(self.capacity(m.namespace, m.claim))
            if u is not None and capacity > 0 and (capacity - u.used) / capacity < share:
                out.append((m.namespace, m.claim, m.service, (capacity - u.used) / capacity))
        return sorted(set(out))

    def full(self, namespace: str, claim: str) -> bool:
        got: Optional[ClaimUsage] = self.claims.get((namespace, claim))
        return got is not None and got.used >= self.capacity(namespace, claim) > 0

    def describe(self) -> dict[str, Any]:
        """Per claim, its used bytes (for tests and the fault judges)."""
        return {f"{ns}/{name}": u.used for (ns, name), u in sorted(self.claims.items())}
