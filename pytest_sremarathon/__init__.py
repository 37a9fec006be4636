"""pytest-sremarathon: benchmark and gate autonomous SRE agents on long multi-fault marathons."""

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
