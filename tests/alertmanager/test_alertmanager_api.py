"""Alertmanager's API v2 handler: alerts and their filters, groups, status."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml
from am_world import NOW, PAGER_CONFIG, alert, make_world

from pytest_sremarathon.alertmanager import AlertmanagerConfig, AmAlert, Route, fingerprint, from_record


def names(alerts: list[dict]) -> list[tuple[str, str]]:
    return [(a["labels"]["alertname"], a["labels"].get("namespace", "")) for a in alerts]


def test_fingerprints_are_alertmanagers() -> None:
    # values a real Alertmanager served for these label sets (prometheus/alertmanager#3513, #2832)
    assert fingerprint({"foo": "bar"}) == "3fff2c2d7595e046"
    assert fingerprint({"alertname": "InstanceDown", "instance": "randomina.lan:9100", "job": "node",
                        "severity": "medium"}) == "0593f1c55738ce93"


def test_a_gettable_alert() -> None:
    w = make_world()
    status, alerts = w.get("/api/v2/alerts")
    assert status == 200
    assert len(alerts) == 4  # the resolved one is gone
    assert [a["fingerprint"] for a in alerts] == sorted(a["fingerprint"] for a in alerts)
    checkout = next(a for a in alerts if a["labels"].get("service") == "checkout")
    assert checkout == {
        "annotations": {"summary": "HighErrorRate is firing"},
        "endsAt": "2026-01-01T12:05:00.000Z",  # no end announced: now + resolve_timeout
        "fingerprint": fingerprint(checkout["labels"]),
        "receivers": [{"name": "default"}],
        "startsAt": "2026-01-01T11:55:00.000Z",
        "status": {"inhibitedBy": [], "mutedBy": [], "silencedBy": [], "state": "active"},
        "updatedAt": "2026-01-01T12:00:00.000Z",
        "generatorURL": "http://prometheus.monitoring:9090/graph?g0.expr=HighErrorRate",
        "labels": {"alertname": "HighErrorRate", "severity": "critical", "namespace": "shop", "service": "checkout"},
    }
    w.alerts.append(AmAlert(labels={"alertname": "Bare"}, starts_at=NOW))
    bare = next(a for a in w.get("/api/v2/alerts")[1] if a["labels"]["alertname"] == "Bare")
    assert "generatorURL" not in bare and bare["annotations"] == {}


def test_filter_by_matchers() -> None:
    w = make_world()
    assert names(w.get("/api/v2/alerts", filter='{alertname="HighErrorRate",namespace=~"sh.*"}')[1]) == [
        ("HighErrorRate", "shop")]
    assert sorted(names(w.get("/api/v2/alerts", filter=['severity="warning"', 'namespace!="social"'])[1])) == [
        ("KubePodCrashLooping", "shop")]
    assert names(w.get("/api/v2/alerts", filter='alertname=~"High"')[1]) == []  # anchored
    assert w.get("/api/v2/alerts", filter="alertname") == (400, "bad matcher format: alertname")


def test_filter_by_state_flags() -> None:
    w = make_world(alerts=[
        alert("Plain"),
        AmAlert(labels={"alertname": "Inhibited"}, starts_at=NOW, inhibited_by=("fp-of-the-inhibitor",)),
        AmAlert(labels={"alertname": "New"}, starts_at=NOW, state="unprocessed"),
    ])
    w.post_silence(matchers=[{"name": "alertname", "value": "Plain", "isRegex": False}])
    w.alerts.append(alert("Other"))
    everything = {a["labels"]["alertname"]: a["status"]["state"] for a in w.get("/api/v2/alerts")[1]}
    assert everything == {"Plain": "suppressed", "Inhibited": "suppressed", "New": "unprocessed", "Other": "active"}

    def shown(**flags: str) -> set[str]:
        return {a["labels"]["alertname"] for a in w.get("/api/v2/alerts", **flags)[1]}

    assert shown(silenced="false") == {"Inhibited", "New", "Other"}
    assert shown(inhibited="false") == {"Plain", "New", "Other"}
    assert shown(active="false") == {"Plain", "Inhibited", "New"}
    assert shown(unprocessed="false") == {"Plain", "Inhibited", "Other"}
    assert shown(active="false", silenced="false", inhibited="false", unprocessed="false") == set()
    assert shown(active="0") == shown(active="no") == shown(active="false")  # go-openapi's booleans
    assert shown(active="1", silenced="yes", inhibited="") == set(everything)  # "": the default


def test_filter_by_receiver_regex() -> None:
    w = make_world(PAGER_CONFIG)
    alerts = w.get("/api/v2/alerts")[1]
    receivers = {(a["labels"]["alertname"], a["labels"].get("namespace")): [r["name"] for r in a["receivers"]]
                 for a in alerts}
    assert receivers[("HighErrorRate", "shop")] == ["pager"]
    assert receivers[("KubePodCrashLooping", "shop")] == ["tickets"]
    assert sorted(names(w.get("/api/v2/alerts", receiver="tick.*")[1])) == [
        ("KubePodCrashLooping", "shop"), ("LatencySLOBurn", "social")]
    assert names(w.get("/api/v2/alerts", receiver="tick")[1]) == []  # anchored
    status, message = w.get("/api/v2/alerts", receiver="(")
    assert status == 400 and message.startswith("failed to parse receiver param: ")


def test_routing_follows_continue_and_inheritance() -> None:
    w = make_world(PAGER_CONFIG)
    high = next(a for a in w.get("/api/v2/alerts")[1] if a["labels"].get("namespace") == "shop"
                and a["labels"]["alertname"] == "HighErrorRate")
    # critical: the pager route matches (continue: true lets its siblings try; tickets does not
    # match), and once a child matched, the root's own receiver is not used
    assert [r["name"] for r in high["receivers"]] == ["pager"]


def test_groups_by_route_and_group_by() -> None:
    w = make_world(PAGER_CONFIG)
    status, groups = w.get("/api/v2/alerts/groups")
    assert status == 200
    summary = [(g["receiver"]["name"], g["labels"], sorted(a["labels"].get("namespace", "") for a in g["alerts"]))
               for g in groups]
    # Alertmanager's order: by label set (fewer labels first, then by values), then receiver
    assert summary == [
        ("tickets", {"alertname": "KubePodCrashLooping"}, ["shop"]),
        ("tickets", {"alertname": "LatencySLOBurn"}, ["social"]),
        ("pager", {"alertname": "HighErrorRate", "namespace": "hotel"}, ["hotel"]),
        ("pager", {"alertname": "HighErrorRate", "namespace": "shop"}, ["shop"]),
    ]
    assert set(groups[0]) == {"alerts", "labels", "receiver"}
    assert set(groups[0]["alerts"][0]) >= {"annotations", "endsAt", "fingerprint", "receivers", "startsAt", "status",
                                          "updatedAt", "labels"}
    assert [g["labels"] for g in w.get("/api/v2/alerts/groups", receiver="pager")[1]] == [
        {"alertname": "HighErrorRate", "namespace": "hotel"}, {"alertname": "HighErrorRate", "namespace": "shop"}]
    assert [g["labels"] for g in w.get("/api/v2/alerts/groups", filter='namespace="shop"')[1]] == [
        {"alertname": "KubePodCrashLooping"}, {"alertname": "HighErrorRate", "namespace": "shop"}]
    w.post_silence()  # silences both HighErrorRate alerts: their groups empty and go
    assert len(w.get("/api/v2/alerts/groups", silenced="false")[1]) == 2


def test_group_by_everything_and_default_grouping() -> None:
    w = make_world(AlertmanagerConfig(route=Route(receiver="all", group_by=("...",)), receivers=("all",)))
    groups = w.get("/api/v2/alerts/groups")[1]
    assert len(groups) == 4 and all(len(g["alerts"]) == 1 and g["labels"] == g["alerts"][0]["labels"]
                                    for g in groups)
    default = make_world().get("/api/v2/alerts/groups")[1]
    assert [(g["labels"], len(g["alerts"])) for g in default] == [
        ({"alertname": "HighErrorRate", "namespace": "hotel"}, 1), ({"alertname": "HighErrorRate", "namespace": "shop"}, 1),
        ({"alertname": "KubePodCrashLooping", "namespace": "shop"}, 1),
        ({"alertname": "LatencySLOBurn", "namespace": "social"}, 1)]


def test_group_members_are_ordered_as_alertmanager_orders_them() -> None:
    w = make_world(AlertmanagerConfig(route=Route(receiver="r", group_by=("alertname",)), receivers=("r",)),
                   alerts=[alert("Down", instance="b:9100", job="node"), alert("Down", instance="a:9100", job="node"),
                           alert("Down", instance="c:9100", job="api"), alert("Down", pod="x")])
    (group,) = w.get("/api/v2/alerts/groups")[1]
    assert [(a["labels"].get("job"), a["labels"].get("instance")) for a in group["alerts"]] == [
        ("api", "c:9100"), ("node", "a:9100"), ("node", "b:9100"), (None, None)]


def test_status() -> None:
    w = make_world(PAGER_CONFIG)
    status, body = w.get("/api/v2/status")
    assert status == 200 and set(body) == {"cluster", "config", "uptime", "versionInfo"}
    assert body["cluster"] == {"peers": [], "status": "disabled"}
    assert body["uptime"] == "2026-01-01T10:00:00.000Z"
    assert set(body["versionInfo"]) == {"branch", "buildDate", "buildUser", "goVersion", "revision", "version"}
    config = yaml.safe_load(body["config"]["original"])
    assert config["route"]["receiver"] == "default" and config["route"]["group_by"] == ["alertname"]
    assert config["route"]["routes"][0] == {"receiver": "pager", "matchers": ['severity="critical"'],
                                            "group_by": ["alertname", "namespace"], "continue": True}
    assert config["global"]["resolve_timeout"] == "5m"
    assert [r["name"] for r in config["receivers"]] == ["default", "pager", "tickets"]
    assert w.get("/api/v2/receivers") == (200, [{"name": "default"}, {"name": "pager"}, {"name": "tickets"}])
    text = "route:\n  receiver: x\nreceivers:\n- name: x\n"
    own = make_world(AlertmanagerConfig(route=Route(receiver="x"), receivers=("x",), original=text))
    assert own.get("/api/v2/status")[1]["config"]["original"] == text


def test_unknown_paths_and_methods() -> None:
    w = make_world()
    assert w.get("/api/v2/nope") == (404, {"code": 404, "message": "path /api/v2/nope was not found"})
    assert w.api.handle("POST", "/api/v2/alerts") == (405, {"code": 405,
                                                           "message": "method POST is not allowed, but [GET] are"})
    assert w.api.handle("PUT", "/api/v2/silence/0d0e6a6c-2b0a-4d4b-8d5e-1f0c2b3a4d5e")[0] == 405


def test_alerts_of_the_alert_engine_fit_as_they_are() -> None:
    from pytest_sremarathon.agent.protocol import Alert

    firing = Alert(id="alert-00001", name="HighErrorRate", status="firing", severity="critical",
                   labels={"alertname": "HighErrorRate", "severity": "critical", "namespace": "shop"},
                   annotations={"summary": "checkout is failing 75% of requests"}, starts_at=NOW - timedelta(minutes=3))
    resolved = firing.model_copy(update={"id": "alert-00002", "status": "resolved", "ends_at": NOW - timedelta(seconds=30)})
    w = make_world(alerts=[from_record(firing, "http://prometheus:9090/graph"), from_record(resolved)])
    (served,) = w.get("/api/v2/alerts")[1]
    assert served["labels"] == firing.labels and served["annotations"] == firing.annotations
    assert served["startsAt"] == "2026-01-01T11:57:00.000Z" and served["generatorURL"] == "http://prometheus:9090/graph"


@pytest.mark.parametrize("path", ["/api/v2/alerts", "/api/v2/alerts/groups", "/api/v2/silences"])
def test_empty_lists_are_lists(path: str) -> None:
    assert make_world(alerts=[]).get(path) == (200, [])
