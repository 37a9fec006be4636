"""Alerts, a clock and a recording policy for the Alertmanager tests. A module of its own, not
conftest.py: test modules import it by name, and ``conftest`` is every test directory's name."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

from pytest_sremarathon.alertmanager import AlertmanagerAPI, AlertmanagerConfig, AmAlert, Route, SilenceRequest, Verdict
from pytest_sremarathon.alertmanager.api import Allow

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=timezone.utc)


@dataclass
class Clock:
    now: datetime = NOW

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


@dataclass
class Policy:
    """Allows unless ``deny`` is set; keeps what it was asked and what was recorded."""

    deny: Optional[str] = None
    asked: list[SilenceRequest] = field(default_factory=list)
    records: list[tuple[SilenceRequest, bool, int]] = field(default_factory=list)

    def decide(self, req: SilenceRequest) -> Verdict:
        self.asked.append(req)
        return Allow(False, self.deny) if self.deny else Allow()

    def record(self, req: SilenceRequest, verdict: Verdict, status: int) -> None:
        self.records.append((req, verdict.allowed, status))


def alert(name: str, severity: str = "critical", minutes_ago: float = 5, **labels: str) -> AmAlert:
    return AmAlert(labels={"alertname": name, "severity": severity, **labels},
                   annotations={"summary": f"{name} is firing"}, starts_at=NOW - timedelta(minutes=minutes_ago),
                   generator_url=f"http://prometheus.monitoring:9090/graph?g0.expr={name}")


def default_alerts() -> list[AmAlert]:
    return [
        alert("HighErrorRate", namespace="shop", service="checkout"),
        alert("HighErrorRate", namespace="hotel", service="search"),
        alert("KubePodCrashLooping", "warning", 30, namespace="shop", service="cart", pod="cart-7f6d-klmno"),
        alert("LatencySLOBurn", "warning", 2, namespace="social", service="text"),
        AmAlert(labels={"alertname": "NodeNotReady", "severity": "critical", "node": "node-b"},
                starts_at=NOW - timedelta(hours=1), ends_at=NOW - timedelta(minutes=1)),  # resolved
    ]


@dataclass
class AmWorld:
    alerts: list[AmAlert]
    clock: Clock
    policy: Policy
    api: AlertmanagerAPI

    def get(self, path: str, **params: Any) -> tuple[int, Any]:
        query = {k: v if isinstance(v, list) else [str(v)] for k, v in params.items()}
        return self.api.handle("GET", path, query)

    def post_silence(self, actor: str = "agent", **fields: Any) -> tuple[int, Any]:
        body = {"matchers": [{"name": "alertname", "value": "HighErrorRate", "isRegex": False}],
                "startsAt": "2026-01-01T11:00:00Z", "endsAt": "2026-01-01T14:00:00Z",
                "createdBy": "sre-agent", "comment": "investigating", **fields}
        return self.api.handle("POST", "/api/v2/silences", body=json.dumps(body).encode(), actor=actor)


def make_world(config: Optional[AlertmanagerConfig] = None, alerts: Optional[list[AmAlert]] = None) -> AmWorld:
    items = default_alerts() if alerts is None else alerts
    clock, policy = Clock(), Policy()
    api = AlertmanagerAPI(lambda: items, clock, random.Random(11), config=config or AlertmanagerConfig(),
                          decide=policy.decide, record=policy.record, started_at=NOW - timedelta(hours=2))
    return AmWorld(items, clock, policy, api)


PAGER_CONFIG = AlertmanagerConfig(
    route=Route(receiver="default", group_by=("alertname",), routes=(
        Route(receiver="pager", matchers=('severity="critical"',), group_by=("alertname", "namespace"),
              continue_=True),
        Route(receiver="tickets", matchers=('severity=~"warning|info"',)),
    )),
    receivers=("default", "pager", "tickets"))
