"""The Alertmanager handler served over HTTP on loopback and called as HolmesGPT, Grafana and
amtool call Alertmanager: alerts with filters, groups, status, and a silence's round trip,
including the policy point's 403."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from am_world import AmWorld, make_world
from loopback_handler import HandlerServer, request


@pytest.fixture
def am() -> Iterator[tuple[str, AmWorld]]:
    w = make_world()
    with HandlerServer(lambda method, path, query, body: w.api.handle(method, path, query, body)) as server:
        yield server.url, w


def test_alerts_as_holmesgpt_reads_them(am: tuple[str, AmWorld]) -> None:
    url, _ = am
    status, alerts = request(f"{url}/api/v2/alerts", params=[
        ("active", "true"), ("silenced", "false"), ("inhibited", "false"), ("unprocessed", "true"),
        ("filter", 'alertname="HighErrorRate"'), ("filter", 'severity=~"crit.*"')])
    assert status == 200
    assert sorted(a["labels"]["namespace"] for a in alerts) == ["hotel", "shop"]
    assert all(a["status"] == {"inhibitedBy": [], "mutedBy": [], "silencedBy": [], "state": "active"} for a in alerts)
    status, braces = request(f"{url}/api/v2/alerts", params=[("filter", '{alertname="HighErrorRate",namespace="shop"}')])
    assert status == 200 and [a["labels"]["service"] for a in braces] == ["checkout"]
    status, message = request(f"{url}/api/v2/alerts", params=[("filter", "alertname")])
    assert (status, message) == (400, "bad matcher format: alertname")


def test_groups_and_status_as_grafana_reads_them(am: tuple[str, AmWorld]) -> None:
    url, _ = am
    status, groups = request(f"{url}/api/v2/alerts/groups", params=[("silenced", "false"), ("inhibited", "false")])
    assert status == 200 and len(groups) == 4 and all(g["receiver"] == {"name": "default"} for g in groups)
    status, body = request(f"{url}/api/v2/status")
    assert status == 200 and body["versionInfo"]["version"] == "0.28.1"
    assert yaml.safe_load(body["config"]["original"])["route"]["receiver"] == "default"


def test_a_silence_round_trip_as_amtool_makes_it(am: tuple[str, AmWorld]) -> None:
    url, w = am
    silence = {"matchers": [{"name": "alertname", "value": "HighErrorRate", "isRegex": False, "isEqual": True},
                            {"name": "namespace", "value": "shop", "isRegex": False, "isEqual": True}],
               "startsAt": "2026-01-01T12:00:00.000Z", "endsAt": "2026-01-01T13:00:00.000Z",
               "createdBy": "operator", "comment": "maintenance"}
    status, created = request(f"{url}/api/v2/silences", "POST", body=silence)
    assert status == 200
    sid = created["silenceID"]
    status, alerts = request(f"{url}/api/v2/alerts", params=[("filter", 'namespace="shop"'),
                                                             ("filter", 'alertname="HighErrorRate"')])
    assert [a["status"]["silencedBy"] for a in alerts] == [[sid]] and alerts[0]["status"]["state"] == "suppressed"
    assert request(f"{url}/api/v2/alerts", params=[("silenced", "false"), ("filter", 'namespace="shop"')])[1][0][
        "labels"]["alertname"] == "KubePodCrashLooping"
    status, listed = request(f"{url}/api/v2/silences")
    assert status == 200 and [s["id"] for s in listed] == [sid]
    assert request(f"{url}/api/v2/silence/{sid}")[1]["comment"] == "maintenance"
    assert request(f"{url}/api/v2/silence/{sid}", "DELETE") == (200, None)
    assert request(f"{url}/api/v2/silence/{sid}")[1]["status"]["state"] == "expired"
    assert request(f"{url}/api/v2/silence/0d0e6a6c-2b0a-4d4b-8d5e-1f0c2b3a4d5e") == (404, None)
    assert [r[1:] for r in w.policy.records] == [(True, 200), (True, 200)]


def test_a_denied_silence_is_a_403(am: tuple[str, AmWorld]) -> None:
    url, w = am
    w.policy.deny = "denied by sremarathon policy rule 'no-silence-alerts': silencing alerts is not a repair"
    status, message = request(f"{url}/api/v2/silences", "POST", body={
        "matchers": [{"name": "alertname", "value": "HighErrorRate", "isRegex": False}],
        "startsAt": "2026-01-01T12:00:00Z", "endsAt": "2026-01-01T13:00:00Z", "createdBy": "agent", "comment": "x"})
    assert (status, message) == (403, w.policy.deny)
    assert request(f"{url}/api/v2/silences") == (200, [])
    assert [r[1:] for r in w.policy.records] == [(False, 403)]
