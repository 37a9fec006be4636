"""Fault kinds: one module per family, collected in a registry that plugins extend through
the ``pytest_sremarathon_fault_kinds`` hook."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from .autoscaling import AUTOSCALING_KINDS
from .base import Fault, FaultKind, World
from .batch import BATCH_KINDS
from .change import CHANGE_KINDS
from .datastore import CacheStampede, DatastoreFailover
from .dependency import CredentialRotated, DnsDegraded, DnsZone, ExternalOutage, SlowDatastore
from .disruption import DISRUPTION_KINDS
from .infrastructure import (
    CpuNoisyNeighbour,
    DiskPressure,
    NetworkLatency,
    NodeFailure,
    TrafficSurge,
    ZoneOutage,
    ZonePartition,
)
from .network import NETWORK_KINDS
from .preemption import PREEMPTION_KINDS
from .runtime import InitContainerFailing, LivenessUnderLoad
from .storage import STORAGE_KINDS
from .validity import ClockSkew, SecretExpiry

BUILTIN_KINDS: tuple[type[FaultKind], ...] = (*CHANGE_KINDS,
                                              NodeFailure,
                                              SlowDatastore, ExternalOutage, DnsZone, CredentialRotated, DnsDegraded,
                                              ZoneOutage, ZonePartition, NetworkLatency, CpuNoisyNeighbour, DiskPressure,
                                              TrafficSurge,
                                              DatastoreFailover, CacheStampede,
                                              *AUTOSCALING_KINDS, *DISRUPTION_KINDS,
                                              *NETWORK_KINDS, *PREEMPTION_KINDS,
                                              InitContainerFailing, ClockSkew, SecretExpiry, LivenessUnderLoad,
                                              *BATCH_KINDS, *STORAGE_KINDS)


def builtin_registry(plugin_kinds: Iterable[Optional[Iterable[type[FaultKind]]]] = ()) -> dict[str, FaultKind]:
    """Every kind by name: the built-in ones, then what plugins add (the answers of the
    ``pytest_sremarathon_fault_kinds`` hook; a plugin kind of a built-in name replaces it)."""
    registry: dict[str, FaultKind] = {k.name: k() for k in BUILTIN_KINDS}
    for kinds in plugin_kinds:
        registry.update({k.name: k() for k in kinds or []})
    return registry


__all__ = ["BUILTIN_KINDS", "Fault", "FaultKind", "World", "builtin_registry"]
