"""An agent for the Alertmanager and traces tests (imported by name in the agent's own process)."""

from __future__ import annotations

import json
import os
from typing import Any

from pytest_sremarathon import Report
from pytest_sremarathon.baselines.observability import HTTPJson, kubeconfig_token


class AlertmanagerReader:
    """Each step: compares Alertmanager's alerts at ALERTMANAGER_URL with the observation's
    firing ones, lists the traced services at JAEGER_URL, and tries to silence everything."""

    def setup(self, env: Any) -> None:
        assert env.alertmanager_url == os.environ["ALERTMANAGER_URL"]
        assert env.jaeger_url == os.environ["JAEGER_URL"]
        token = kubeconfig_token(env.kubeconfig)
        self.am = HTTPJson(env.alertmanager_url, token)
        self.jaeger = HTTPJson(env.jaeger_url, token)
        self.url = env.alertmanager_url

    def step(self, obs: Any) -> Report:
        import urllib.error
        import urllib.request

        latest = {a.id: a for a in [*obs.alerts, *obs.new_alerts]}
        firing = sorted(json.dumps(a.labels, sort_keys=True) for a in latest.values() if a.status == "firing")
        shown = sorted(json.dumps(a["labels"], sort_keys=True) for a in self.am.get("/api/v2/alerts"))
        services = self.jaeger.get("/api/services")["data"]
        body = {"matchers": [{"name": "alertname", "value": ".+", "isRegex": True}],
                "startsAt": obs.time.isoformat(), "endsAt": obs.time.replace(year=obs.time.year + 1).isoformat(),
                "createdBy": "agent", "comment": "quiet, please"}
        req = urllib.request.Request(self.url + "/api/v2/silences", data=json.dumps(body).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {self.am.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30) as resp:
                status = resp.status
        except urllib.error.HTTPError as exc:
            status = exc.code
        return Report(notes=json.dumps({"same": firing == shown, "firing": len(firing), "silence": status,
                                        "services": services}))
