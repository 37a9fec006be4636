"""Agents for the monitoring tests (imported by name in the agent's own process)."""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from typing import Any

import yaml

from pytest_sremarathon import Finding, Report

# The services failing the largest share of their requests: where a failure starts reads
# worse than its callers, which mix it with requests that do not reach it.
WORST = ('topk(2, sum by (namespace, service) (rate(http_requests_total{code=~"5.."}[5m]))'
         ' / sum by (namespace, service) (rate(http_requests_total[5m])) > 0.05)')


class PromQLInvestigator:
    """Investigates as an agent built for production would: PromQL at ``PROMETHEUS_URL`` with
    the kubeconfig's bearer token, one finding per failing service it finds, grouping the
    firing alerts about it."""

    def setup(self, env: Any) -> None:
        self.url = os.environ["PROMETHEUS_URL"]
        assert env.prometheus_url == self.url, (env.prometheus_url, self.url)
        config = yaml.safe_load(open(env.kubeconfig))
        self.token = config["users"][0]["user"]["token"]
        self.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only

    def query(self, expr: str) -> list[dict[str, Any]]:
        req = urllib.request.Request(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}),
                                     headers={"Authorization": f"Bearer {self.token}"})
        with self.opener.open(req, timeout=30) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]["result"]

    def step(self, obs: Any) -> Report:
        worst = self.query(WORST)
        findings = []
        for r in worst:
            ns, svc = r["metric"]["namespace"], r["metric"]["service"]
            alerts = [a.id for a in obs.alerts if a.status == "firing" and a.labels.get("namespace") == ns
                      and a.labels.get("service") == svc]
            if alerts:
                findings.append(Finding(incident=f"{ns}/{svc}", alerts=alerts, component=f"service:{ns}/{svc}",
                                        cause="kind:code-exception"))
        notes = json.dumps({"worst": [(r["metric"]["service"], r["value"][1]) for r in worst]})
        return Report(findings=findings[:1], notes=notes)
