"""Agents for the think-time and build-time tests (tests/test_time.py), imported by name in the
agent's own process. Each reports what it did in its notes, as ``key=value`` pairs."""

from __future__ import annotations

import time

from pytest_sremarathon import Finding, Report


def _firing(obs) -> list:
    return [a for a in obs.alerts if a.status == "firing" and a.labels.get("app")]


class Reverter:
    """Once an app alerts, read ``READS`` times (each read is a request: charged per request),
    then revert the app's newest change that is not a revert; afterwards, report the pipeline's
    status every step (so a test can see the revert queued, building, deploying, deployed)."""

    READS = 0

    def __init__(self) -> None:
        self.reverted: dict[str, str] = {}
        self.alerts: dict[str, list[str]] = {}

    def step(self, obs) -> Report:
        notes = []
        for a in _firing(obs):
            self.alerts.setdefault(a.labels["app"], [])
            if a.id not in self.alerts[a.labels["app"]]:
                self.alerts[a.labels["app"]].append(a.id)
        for app in self.reverted:
            status = obs.pipeline.status(app)
            states = [f"{b['id']}:{b['state']}" for b in status.get("builds", []) if b.get("actor") == "agent"]
            notes.append(f"status={app}:{','.join(states)}")
        apps = sorted({a.labels["app"] for a in _firing(obs)} - set(self.reverted))
        for app in apps[:1]:
            for _ in range(self.READS):
                obs.pipeline.changes(app)
            changes = [c for c in obs.pipeline.changes(app) if not c.message.startswith("Revert")]
            if changes:
                newest = max(changes, key=lambda c: c.time)
                revert = obs.pipeline.revert(app, newest.id)
                self.reverted[app] = newest.id
                notes.append(f"reverted={app}:{newest.id}:{revert.id}")
        findings = [Finding(incident=app, alerts=self.alerts.get(app, []), cause=f"change:{change}")
                    for app, change in sorted(self.reverted.items())]
        return Report(findings=findings, notes="|".join(notes))


class QuickReverter(Reverter):
    READS = 0


class SlowReverter(Reverter):
    READS = 30  # 31 requests before the revert: 310 virtual seconds at per-request:10


class Busy:
    """Forty reads every step: 400 virtual seconds at per-request:10, more than a 5-minute cadence."""

    def step(self, obs) -> Report:
        for _ in range(40):
            obs.pipeline.status("shop")
        return Report(notes="busy")


class ScaleThenRead:
    """At its first step: scale shop/frontend up by one through the Kubernetes API, then read ten
    times, so that ticks run between the write and the end of the step."""

    def __init__(self) -> None:
        self.done = False

    def step(self, obs) -> Report:
        if self.done:
            return Report()
        self.done = True
        from kubernetes import client, config

        config.load_kube_config(str(obs.kubeconfig))
        apps = client.AppsV1Api()
        replicas = apps.read_namespaced_deployment_scale("frontend", "shop").spec.replicas
        apps.patch_namespaced_deployment_scale("frontend", "shop", {"spec": {"replicas": replicas + 1}})
        for _ in range(10):
            obs.pipeline.status("shop")
        return Report(notes=f"scaled={replicas + 1}")


class WallSleeper:
    """Sleeps two wall seconds every step, making no request."""

    def step(self, obs) -> Report:
        time.sleep(2.0)
        return Report(notes="slept")
