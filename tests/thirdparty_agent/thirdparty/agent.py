"""A tiny SRE agent: one incident per alerting service, localized to that service.

It uses nothing but the public contract (``from pytest_sremarathon import ...``): it groups the
firing alerts of each ``(namespace, service)`` into one finding that names the service as the
root cause, and never claims anything resolved (it repairs nothing).
"""

from __future__ import annotations

from pytest_sremarathon import Environment, Finding, Observation, Report


class Agent:
    def setup(self, env: Environment) -> None:
        self.apps = list(env.apps)
        self.steps = 0

    def step(self, obs: Observation) -> Report:
        self.steps += 1
        firing: dict[tuple[str, str], list[str]] = {}
        for alert in obs.alerts:
            service = alert.labels.get("service")
            namespace = alert.labels.get("namespace") or alert.labels.get("app")
            if alert.status == "firing" and service and namespace:
                firing.setdefault((namespace, service), []).append(alert.id)
        findings = [Finding(incident=f"svc:{ns}/{svc}", alerts=ids, component=f"service:{ns}/{svc}",
                            confidence=0.5)
                    for (ns, svc), ids in sorted(firing.items())]
        return Report(findings=findings, notes=f"thirdparty step {self.steps}: {len(findings)} incident(s)")
