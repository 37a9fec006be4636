"""pytest-sremarathon: benchmark and gate autonomous SRE agents on long multi-fault marathons."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent.protocol import (
        Agent,
        Alert,
        Change,
        Claim,
        Environment,
        Finding,
        Observation,
        Pipeline,
        Report,
        Telemetry,
    )

__all__ = ["Agent", "Alert", "Change", "Claim", "Environment", "Finding", "Observation", "Pipeline",
           "Report", "Telemetry"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """The public API, imported on first use (``from pytest_sremarathon import Report``), so that
    loading the pytest plugin costs a project without marathons nothing."""
    if name in __all__:
        from .agent import protocol

        value = getattr(protocol, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
