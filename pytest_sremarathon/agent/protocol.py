"""The public agent contract (README: Write an agent).

Everything here crosses the process boundary between the marathon and the agent, so the
records are pydantic models: they validate what an untrusted agent returns, and they are the
JSON wire format of ``--agent-cmd`` agents too.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Optional, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class Alert(_Record):
    id: str
    name: str
    status: Literal["firing", "resolved"]
    severity: str
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: datetime
    ends_at: Optional[datetime] = None


class Finding(_Record):
    incident: str = Field(min_length=1, max_length=200)
    alerts: list[str] = Field(default_factory=list, max_length=5000)
    component: Optional[str] = Field(default=None, max_length=300)
    cause: Optional[str] = Field(default=None, max_length=300)
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)


class Claim(_Record):
    incident: str = Field(min_length=1, max_length=200)
    status: Literal["resolved"] = "resolved"


class Report(_Record):
    findings: list[Finding] = Field(default_factory=list, max_length=2000)
    claims: list[Claim] = Field(default_factory=list, max_length=2000)
    notes: str = Field(default="", max_length=20000)


class Change(_Record):
    id: str
    app: str
    service: Optional[str] = None
    kind: Literal["code", "config", "manifest"]
    author: str
    message: str
    time: datetime
    diff: str = ""


class ServiceError(Exception):
    """A pipeline or telemetry call failed.

    ``message`` is the server's own message (e.g. the policy rule that denied a revert);
    ``status`` is the HTTP status, or ``None`` when the server could not be reached.
    """

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message, status)
        self.message = message
        self.status = status

    @property
    def denied(self) -> bool:
        """True when the policy layer refused the call (HTTP 403)."""
        return self.status == 403

    def __str__(self) -> str:
        return f"HTTP {self.status}: {self.message}" if self.status is not None else self.message


class PipelineError(ServiceError):
    """Raised by :class:`Pipeline` methods."""


class TelemetryError(ServiceError):
    """Raised by :class:`Telemetry` methods."""


@runtime_checkable
class Pipeline(Protocol):
    def changes(self, app: str) -> list[Change]: ...
    def revert(self, app: str, change_id: str) -> Change: ...
    def deploy(self, app: str, ref: str) -> dict[str, Any]: ...
    def status(self, app: str) -> dict[str, Any]: ...


@runtime_checkable
class Telemetry(Protocol):
    def metrics(self, app: str, service: str, name: str, since: datetime | None = None) -> list[tuple[datetime, float]]: ...


class ObservationWire(_Record):
    """What the host sends the agent process each step (the pipeline and telemetry handles
    are rebuilt on the agent's side from the environment)."""

    time: datetime
    step: int
    alerts: list[Alert]
    new_alerts: list[Alert]


class EnvironmentWire(_Record):
    workspace: str
    kubeconfig: str
    apps: list[str]
    cadence_seconds: float
    server: str
    token: str
    # The monitoring namespace's services at direct URLs on the agent's server (issue 16),
    # behind the same token; None on a backend without them.
    prometheus_url: Optional[str] = None
    alertmanager_url: Optional[str] = None
    jaeger_url: Optional[str] = None
    # The run's MCP server (streamable HTTP, same token; issue 17); None when the run has none.
    mcp_url: Optional[str] = None


class Environment:
    """Handed to ``Agent.setup`` once per run."""

    def __init__(self, workspace: Path, kubeconfig: Path, apps: list[str], cadence: timedelta,
                 pipeline: Pipeline, telemetry: Telemetry, prometheus_url: Optional[str] = None,
                 alertmanager_url: Optional[str] = None, jaeger_url: Optional[str] = None,
                 mcp_url: Optional[str] = None, token: Optional[str] = None) -> None:
        self.workspace = workspace
        self.kubeconfig = kubeconfig
        self.apps = apps
        self.cadence = cadence
        self.pipeline = pipeline
        self.telemetry = telemetry
        #: The Prometheus HTTP API (``{prometheus_url}/api/v1/query``), with the kubeconfig's
        #: bearer token; also ``PROMETHEUS_URL`` in the agent's environment.
        self.prometheus_url = prometheus_url
        #: Alertmanager's API v2 (``{alertmanager_url}/api/v2/alerts``; ``ALERTMANAGER_URL``):
        #: the alerts the observations carry, and silences (which the policy point judges).
        self.alertmanager_url = alertmanager_url
        #: The Jaeger query API (``{jaeger_url}/api/traces?service=checkout.shop``; ``JAEGER_URL``):
        #: traces of a head-sampled share of the requests. Times are virtual, as everywhere.
        self.jaeger_url = jaeger_url
        #: The run's MCP server (``{mcp_url}``, streamable HTTP): the tools every shipped agent
        #: uses, with ``Authorization: Bearer {token}`` (also ``SREMARATHON_MCP_URL``).
        self.mcp_url = mcp_url
        self.token = token

    def __repr__(self) -> str:  # never show the token
        return f"Environment(workspace={self.workspace}, apps={self.apps}, cadence={self.cadence})"


class Observation:
    """Handed to ``Agent.step`` every cadence tick."""

    def __init__(self, wire: ObservationWire, env: Environment) -> None:
        self.time = wire.time
        self.step = wire.step
        self.alerts = wire.alerts
        self.new_alerts = wire.new_alerts
        self.workspace = env.workspace
        self.kubeconfig = env.kubeconfig
        self.pipeline = env.pipeline
        self.telemetry = env.telemetry

    def __repr__(self) -> str:
        return f"Observation(step={self.step}, time={self.time.isoformat()}, alerts={len(self.alerts)}, new={len(self.new_alerts)})"


class Agent:
    """Base class for agents; subclassing is optional (duck typing works)."""

    def setup(self, env: Environment) -> None:  # pragma: no cover - default is a no-op
        return None

    def step(self, obs: Observation) -> Report:  # pragma: no cover - must be overridden
        raise NotImplementedError
