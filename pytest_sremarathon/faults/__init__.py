"""Fault kinds: one module per family, collected in a registry that plugins extend through
the ``pytest_sremarathon_fault_kinds`` hook."""

from __future__ import annotations

from .base import Fault, FaultKind, World
from .change import CHANGE_KINDS
from .dependency import CredentialRotated, DnsZone, ExternalOutage, SlowDatastore
from .infrastructure import (
    CpuNoisyNeighbour,
    DiskPressure,
    NetworkLatency,
    NodeFailure,
    TrafficSurge,
    ZoneOutage,
    ZonePartition,
)

BUILTIN_KINDS: tuple[type[FaultKind], ...] = (*CHANGE_KINDS,
                                              NodeFailure,
                                              SlowDatastore, ExternalOutage, DnsZone, CredentialRotated,
                                              ZoneOutage, ZonePartition, NetworkLatency, CpuNoisyNeighbour, DiskPressure,
                                              TrafficSurge)


def builtin_registry() -> dict[str, FaultKind]:
    return {k.name: k() for k in BUILTIN_KINDS}


__all__ = ["BUILTIN_KINDS", "Fault", "FaultKind", "World", "builtin_registry"]
