"""The twin's Alertmanager: API v2 over the alerts the agent's Observation carries, as
``alertmanager:9093`` of the monitoring namespace (through the API server's service proxy and
at /alertmanager/), behind the agent's token; silences pass the policy point."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from twin_prom import TOKEN, Shop

from pytest_sremarathon.agent.protocol import Alert
from pytest_sremarathon.alerts.engine import AlertEngine
from pytest_sremarathon.alerts.noise import NoiseConfig, NoiseGenerator
from pytest_sremarathon.alerts.rules import DEFAULT_RULES
from pytest_sremarathon.policy import DEFAULT_RULES as POLICY_RULES
from pytest_sremarathon.policy import Policy

AM = "/api/v1/namespaces/monitoring/services/alertmanager:9093/proxy"


class AlertingShop(Shop):
    """The shop with the alert engine evaluated every tick, its alerts fed to the Alertmanager
    as the marathon feeds them (the Observation's alert history)."""

    def __init__(self, tmp: Path) -> None:
        self.engine = AlertEngine(DEFAULT_RULES, NoiseGenerator(NoiseConfig(alerts_per_hour=0), random.Random(1), {}))
        self.seen: dict[str, Alert] = {}
        super().__init__(tmp)
        self.backend.alert_feed.source = self.seen.values

    def run(self, seconds: float) -> None:
        for _ in range(int(seconds / 30)):
            super().run(30)
            for t in self.engine.evaluate(self.clock.now, 30, self.cluster, {"shop": self.app}):
                self.seen[t.alert.id] = t.alert

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.url(path), data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[AlertingShop]:
    s = AlertingShop(tmp_path)
    s.break_checkout()
    s.run(600)
    yield s
    s.close()


def firing(shop: AlertingShop) -> list[Alert]:
    return [a for a in shop.seen.values() if a.status == "firing"]


def silence(shop: AlertingShop, service: str) -> dict[str, Any]:
    now = shop.clock.now
    return {"matchers": [{"name": "service", "value": service, "isRegex": False, "isEqual": True}],
            "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=1)).isoformat(),
            "createdBy": "agent", "comment": "while we look into it"}


def test_the_alerts_are_the_observations_as_alertmanager_shows_them(shop: AlertingShop) -> None:
    alerts = firing(shop)
    assert any(a.name == "ServiceHighErrorRate" and a.labels["service"] == "checkout" for a in alerts)
    status, body = shop.get(AM + "/api/v2/alerts")
    assert status == 200
    shown = {json.dumps(a["labels"], sort_keys=True): a for a in body}
    assert set(shown) == {json.dumps(a.labels, sort_keys=True) for a in alerts}
    for a in alerts:
        got = shown[json.dumps(a.labels, sort_keys=True)]
        assert got["annotations"] == a.annotations and got["status"]["state"] == "active"
        # virtual times, as Prometheus's: the alert's start, and now + the resolve timeout as its end
        assert got["startsAt"] == a.starts_at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
        assert got["endsAt"] == (shop.clock.now + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        assert got["receivers"] == [{"name": "sremarathon"}]
    assert shop.get("/alertmanager/api/v2/alerts") == (200, body)
    status, only = shop.get(AM + "/api/v2/alerts", {"filter": ['alertname="ServiceHighErrorRate"', "service=~check.*"]})
    assert [a["labels"]["service"] for a in only] == ["checkout"]
    status, groups = shop.get(AM + "/api/v2/alerts/groups")
    assert {(g["labels"]["alertname"], g["labels"]["namespace"]) for g in groups} == \
        {(a.name, a.labels["namespace"]) for a in alerts}
    status, st = shop.get(AM + "/api/v2/status")
    assert status == 200 and st["cluster"]["status"] == "disabled" and "receiver: sremarathon" in st["config"]["original"]
    # a resolved alert leaves Alertmanager, as the observation marks it resolved
    for a in alerts:
        shop.seen[a.id] = a.model_copy(update={"status": "resolved", "ends_at": shop.clock.now})
    assert shop.get(AM + "/api/v2/alerts") == (200, [])


def test_silencing_is_denied_by_the_policy_point_and_recorded(shop: AlertingShop) -> None:
    status, body = shop.post(AM + "/api/v2/silences", silence(shop, "checkout"))
    assert status == 403 and "no-silence-alerts" in body
    assert [(r.verb, r.target, d.rule, s) for r, d, s in shop.admission.records] == \
        [("create", "alertmanager/silences", "no-silence-alerts", 403)]
    assert shop.get(AM + "/api/v2/silences") == (200, [])
    status, body = shop.get(AM + "/api/v2/alerts", {"filter": "service=checkout"})
    assert body and all(a["status"]["state"] == "active" for a in body)


def test_where_the_policy_allows_it_a_silence_suppresses_what_it_matches(shop: AlertingShop) -> None:
    shop.admission.policy = Policy(tuple(r for r in POLICY_RULES if r != "no-silence-alerts"))
    status, body = shop.post("/alertmanager/api/v2/silences", silence(shop, "checkout"))
    assert status == 200, body
    sid = body["silenceID"]
    assert [(r.verb, d.allowed, s) for r, d, s in shop.admission.records] == [("create", True, 200)]
    status, body = shop.get(AM + "/api/v2/alerts", {"filter": "service=checkout"})
    assert body and all(a["status"] == {"inhibitedBy": [], "mutedBy": [], "silencedBy": [sid], "state": "suppressed"}
                        for a in body)
    assert shop.get(AM + "/api/v2/alerts", {"filter": "service=checkout", "silenced": "false"}) == (200, [])
    status, body = shop.get(AM + f"/api/v2/silence/{sid}")
    assert body["status"]["state"] == "active" and body["startsAt"].startswith(shop.clock.now.strftime("%Y-%m-%dT%H:%M"))
    # the alert engine keeps its behaviour: the Observation's alerts are not silenced
    assert any(a.labels.get("service") == "checkout" for a in firing(shop))


def test_reached_with_kubectl_and_the_official_client_behind_the_token(shop: AlertingShop, tmp_path: Path) -> None:
    assert shop.backend.urls["alertmanager"] == shop.url("/alertmanager")
    assert shop.get(AM + "/api/v2/alerts", token=None)[0] == 401
    assert shop.get("/alertmanager/api/v2/status", token="wrong")[0] == 401
    kubernetes = pytest.importorskip("kubernetes")
    kubeconfig = shop.backend.server.write_kubeconfig(tmp_path / "kubeconfig", TOKEN)
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(kubeconfig)))
    raw = core.connect_get_namespaced_service_proxy_with_path("alertmanager:9093", "monitoring", "api/v2/alerts",
                                                              _preload_content=False)
    assert {a["labels"]["alertname"] for a in json.loads(raw.data)} == {a.name for a in firing(shop)}
    if shutil.which("kubectl"):
        out = subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
                              "get", "--raw", AM + "/api/v2/status"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["versionInfo"]["version"] == "0.28.1"
    status, svc = shop.get("/api/v1/namespaces/monitoring/services/alertmanager")
    assert status == 200 and svc["spec"]["ports"][0]["port"] == 9093
    with pytest.raises(kubernetes.client.ApiException) as denied:
        core.delete_namespaced_service("alertmanager", "monitoring")
    assert denied.value.status == 403 and "protected-namespaces" in denied.value.body


def test_in_a_marathon_the_agent_reads_the_observations_alerts_and_its_silence_is_denied_and_recorded(
        tmp_path: Path, write_scenario: Any) -> None:
    from pytest_sremarathon.agent_host import AgentSpec
    from pytest_sremarathon.bundle import open_bundle
    from pytest_sremarathon.marathon import Marathon, MarathonOptions
    from pytest_sremarathon.scenario import load_scenario

    scenario = write_scenario(apps=["shop"], duration="40m", schedule={"faults": 2, "warmup": "5m", "quiet_tail": "5m"},
                              agent={"think_time": "frozen"})
    options = MarathonOptions(agent=AgentSpec.from_options("observability_agents:AlertmanagerReader"), seed=3,
                              out_dir=tmp_path / "runs")
    result = Marathon(load_scenario(scenario), options).run()
    events = open_bundle(result.bundle).events
    steps = [e.data for e in events if e.type == "agent.step"]
    assert steps and all(s["outcome"] == "ok" for s in steps), [s.get("error") for s in steps]
    notes = [json.loads(s["report"]["notes"]) for s in steps]
    assert all(n["same"] and n["silence"] == 403 for n in notes), notes
    assert any(n["firing"] for n in notes) and "frontend.shop" in notes[-1]["services"]
    denied = [e.data for e in events if e.type == "action" and e.data["target"] == "alertmanager/silences"]
    assert len(denied) == len(steps)
    assert all(d["rule"] == "no-silence-alerts" and d["status"] == 403 and not d["allowed"] and d["verb"] == "create"
               for d in denied)


def test_requests_over_tls_through_the_service_proxy_with_the_ca(shop: AlertingShop, tmp_path: Path) -> None:
    """As amtool or HolmesGPT's Alertmanager toolset would, over HTTPS to the API server."""
    requests = pytest.importorskip("requests")
    ca = tmp_path / "ca.pem"
    ca.write_bytes(shop.backend.server.ca_pem)
    session = requests.Session()
    session.trust_env = False  # loopback only
    session.verify = str(ca)
    session.headers["Authorization"] = f"Bearer {TOKEN}"
    base = shop.backend.server.https_url + AM
    r = session.get(base + "/api/v2/alerts", params={"active": "true", "filter": 'severity="critical"'})
    assert r.status_code == 200
    assert {a["labels"]["alertname"] for a in r.json()} == {a.name for a in firing(shop) if a.severity == "critical"}
    r = session.post(base + "/api/v2/silences", json=silence(shop, "checkout"))
    assert r.status_code == 403 and "no-silence-alerts" in r.json()
    assert session.get(base + "/api/v2/receivers").json() == [{"name": "sremarathon"}]
