"""What the baselines read off an observation's alerts."""

from __future__ import annotations

from typing import Optional

from pytest_sremarathon.agent.protocol import Alert, Observation

from .times import utc


def latest_alerts(obs: Observation) -> dict[str, Alert]:
    """Every alert of the observation by id, in its latest state (``new_alerts`` win)."""
    latest: dict[str, Alert] = {}
    for alert in [*obs.alerts, *obs.new_alerts]:
        latest[alert.id] = alert
    return latest


def by_start(alerts: dict[str, Alert]) -> list[Alert]:
    """The alerts in the order they fired (start, then id): the order every baseline groups in."""
    return sorted(alerts.values(), key=lambda a: (utc(a.starts_at), a.id))


def alert_service(alert: Alert) -> Optional[tuple[str, str]]:
    """``(app, service)`` an alert is about (``app`` falling back to ``namespace``), if any."""
    app = alert.labels.get("app") or alert.labels.get("namespace")
    service = alert.labels.get("service")
    return (app, service) if app and service else None
