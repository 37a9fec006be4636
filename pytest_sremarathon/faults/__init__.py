"""Fault kinds: one module per family, collected in a registry that plugins extend through
the ``sremarathon_fault_kinds`` hook."""

from __future__ import annotations

from .base import Fault, FaultKind, World
from .change import CHANGE_KINDS
from .infrastructure import NodeFailure

BUILTIN_KINDS: tuple[type[FaultKind], ...] = (*CHANGE_KINDS,
                                              NodeFailure)


def builtin_registry() -> dict[str, FaultKind]:
    return {k.name: k() for k in BUILTIN_KINDS}


__all__ = ["BUILTIN_KINDS", "Fault", "FaultKind", "World", "builtin_registry"]
