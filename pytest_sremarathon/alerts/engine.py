"""Evaluates the rules and the noise every tick and keeps the alert history the agent sees.

Each alert firing episode gets its own id. ``evaluate`` returns the alerts whose state changed
this tick (fired or resolved); the caller records them and attributes each newly fired alert
to the fault(s) behind it — an attribution only the ground truth ever sees.

The engine is also the Prometheus API's ``RuleSource`` (:meth:`AlertEngine.rule_groups`):
``/api/v1/rules`` and ``/api/v1/alerts`` show its rules, their state, and the alerts the
agent's observations carry (firing ones with the same labels and annotations; pending ones
too, as Prometheus shows them), the background alerts among them under the kube-prometheus
rules they stand for."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Optional

from ..agent.protocol import Alert
from ..prometheus import Alert as PromAlert
from ..prometheus import Rule as PromRule
from ..prometheus import RuleGroup
from .noise import RULES as NOISE_RULES
from .noise import TEMPLATES, NoiseEpisode, NoiseGenerator
from .rules import Rule, app_pods

if TYPE_CHECKING:
    from ..apps import AppSpec
    from ..cluster import Cluster

Key = tuple[str, tuple[tuple[str, str], ...]]


@dataclass
class Transition:
    alert: Alert
    noise: bool  # True when no rule produced it (background noise)


@dataclass
class AlertEngine:
    rules: tuple[Rule, ...]
    noise: NoiseGenerator
    alerts: dict[str, Alert] = field(default_factory=dict)
    _pending: dict[Key, datetime] = field(default_factory=dict)
    _firing: dict[Key, str] = field(default_factory=dict)
    _noise_firing: list[tuple[NoiseEpisode, str]] = field(default_factory=list)
    _noise_waiting: list[NoiseEpisode] = field(default_factory=list)
    _counter: int = 0
    _texts: dict[Key, tuple[str, str]] = field(default_factory=dict)  # pending alerts' (summary, description)
    _evaluated: Optional[datetime] = None
    # rule name -> (what its matches were computed from, the matches with their keys): see Rule.reads
    _matched: dict[str, tuple[tuple[Any, ...], list[tuple[Key, dict[str, str], str, str]]]] = \
        field(default_factory=dict)
    # rule name -> (namespace, pod name) -> (the pod's resourceVersion, its matches): see Rule.each_pod
    _per_pod: dict[str, dict[tuple[str, str], tuple[Optional[str], list[tuple[Key, dict[str, str], str, str]]]]] = \
        field(default_factory=dict)
    _pods: Optional[list[tuple[str, str, dict[str, Any]]]] = None  # the apps' pods, during one evaluate

    def _new_id(self) -> str:
        self._counter += 1
        return f"alert-{self._counter:05d}"

    def _fire(self, name: str, severity: str, labels: dict[str, str], summary: str, description: str,
              now: datetime) -> Alert:
        alert = Alert(id=self._new_id(), name=name, status="firing", severity=severity,
                      labels={"alertname": name, "severity": severity, **labels},
                      annotations={"summary": summary, "description": description}, starts_at=now)
        self.alerts[alert.id] = alert
        return alert

    def _resolve(self, alert_id: str, now: datetime) -> Alert:
        alert = self.alerts[alert_id].model_copy(update={"status": "resolved", "ends_at": now})
        self.alerts[alert_id] = alert
        return alert

    def evaluate(self, now: datetime, dt: float, cluster: Cluster, apps: dict[str, AppSpec]) -> list[Transition]:
        out: list[Transition] = []
        matching: set[Key] = set()
        self._pods = None
        for rule in self.rules:
            for key, labels, summary, description in self._matches(rule, cluster, apps):
                matching.add(key)
                self._texts[key] = (summary, description)
                since = self._pending.setdefault(key, now)
                if key not in self._firing and (now - since).total_seconds() >= rule.for_seconds:
                    alert = self._fire(rule.name, rule.severity, labels, summary, description, now)
                    self._firing[key] = alert.id
                    out.append(Transition(alert, noise=False))
        for key in list(self._pending):
            if key not in matching:
                del self._pending[key]
                self._texts.pop(key, None)
                alert_id = self._firing.pop(key, None)
                if alert_id is not None:
                    out.append(Transition(self._resolve(alert_id, now), noise=False))
        out.extend(self._noise_tick(now, dt))
        self._evaluated = now
        return out

    def _matches(self, rule: Rule, cluster: Cluster,
                 apps: dict[str, AppSpec]) -> list[tuple[Key, dict[str, str], str, str]]:
        """The rule's matches now, each with its key; the last ones while its inputs have not moved."""
        inputs: tuple[Any, ...] = ()
        if rule.reads:
            store = cluster.store
            inputs = (id(store), id(apps), store.kind_version(*rule.reads))
            last = self._matched.get(rule.name)
            if last is not None and last[0] == inputs:
                return last[1]
        if rule.each_pod is not None:
            found = self._pod_matches(rule, cluster, apps)
        else:
            found = [((rule.name, tuple(sorted(labels.items()))), labels, summary, description)
                     for labels, summary, description in rule.evaluate(cluster, apps)]
        if rule.reads:
            self._matched[rule.name] = (inputs, found)
        return found

    def _pod_matches(self, rule: Rule, cluster: Cluster,
                     apps: dict[str, AppSpec]) -> list[tuple[Key, dict[str, str], str, str]]:
        """A pod rule's matches: every pod's own, in list order (as ``rule.evaluate`` gives them).
        A pod's are its last ones while its resourceVersion has not moved: the rule reads the pod
        alone (its namespace and its service are its key and its labels), and every change to a
        stored object gives it a new resourceVersion (``Store.touch``/``replace``/``create``)."""
        assert rule.each_pod is not None
        if self._pods is None:
            self._pods = list(app_pods(cluster, apps))
        last = self._per_pod.get(rule.name, {})
        kept: dict[tuple[str, str], tuple[Optional[str], list[tuple[Key, dict[str, str], str, str]]]] = {}
        found: list[tuple[Key, dict[str, str], str, str]] = []
        for ns, svc, pod in self._pods:
            md = pod["metadata"]
            at = (ns, md["name"])
            rv = md.get("resourceVersion")
            entry = last.get(at)
            if entry is None or rv is None or entry[0] != rv:
                entry = (rv, [((rule.name, tuple(sorted(labels.items()))), labels, summary, description)
                              for labels, summary, description in rule.each_pod(ns, svc, pod)])
            kept[at] = entry
            found.extend(entry[1])
        self._per_pod[rule.name] = kept  # (pods gone since are dropped)
        return found

    # -- the Prometheus view -------------------------------------------------------------------
    def rule_groups(self) -> list[RuleGroup]:
        """The rules and their alerts as Prometheus's ``/api/v1/rules`` shows them."""
        last = self._evaluated.timestamp() if self._evaluated is not None else None
        rules: dict[str, PromRule] = {}
        groups: dict[str, RuleGroup] = {}

        def rule(name: str, group: str, query: str, duration: float, severity: str) -> PromRule:
            r = rules.get(name)
            if r is None:
                r = rules[name] = PromRule(name, query, duration, labels={"severity": severity},
                                           annotations={"summary": "{{ $labels.namespace }}/{{ $labels.service }}: "
                                                                   + name},
                                           last_evaluation=last)
                g = groups.get(group)
                if g is None:
                    g = groups[group] = RuleGroup(group, f"/etc/prometheus/rules/{group}.yaml", last_evaluation=last)
                g.rules.append(r)
            return r

        for rl in self.rules:
            rule(rl.name, rl.group, rl.query, rl.for_seconds, rl.severity)
        severities = {t[0]: t[1] for t in TEMPLATES}
        for name, (group, query, duration) in NOISE_RULES.items():
            rule(name, group, query, duration, severities.get(name, "warning"))
        for key, since in self._pending.items():
            name, labels = key
            alert_id = self._firing.get(key)
            r = rules[name]
            if alert_id is not None:
                a = self.alerts[alert_id]
                r.alerts.append(PromAlert(dict(a.labels), dict(a.annotations), "firing", since.timestamp()))
            else:
                severity = next((x.severity for x in self.rules if x.name == name), "warning")
                summary, description = self._texts.get(key, ("", ""))
                r.alerts.append(PromAlert({"alertname": name, "severity": severity, **dict(labels)},
                                          {"summary": summary, "description": description}, "pending",
                                          since.timestamp()))
        for _episode, alert_id in self._noise_firing:
            a = self.alerts[alert_id]
            r = rule(a.name, "general.rules", "vector(1)", 0, a.severity)
            r.alerts.append(PromAlert(dict(a.labels), dict(a.annotations), "firing", a.starts_at.timestamp()))
        for r in rules.values():
            states = {a.state for a in r.alerts}
            r.state = "firing" if "firing" in states else "pending" if states else "inactive"
            r.alerts.sort(key=lambda a: sorted(a.labels.items()))
        return sorted(groups.values(), key=lambda g: g.name)

    def _noise_tick(self, now: datetime, dt: float) -> list[Transition]:
        out: list[Transition] = []
        self._noise_waiting.extend(self.noise.tick(now, dt))
        still_firing = []
        for episode, alert_id in self._noise_firing:
            if now >= episode.resolve_at:
                out.append(Transition(self._resolve(alert_id, now), noise=True))
                again = self.noise.refire(episode, now)
                if again is not None:
                    self._noise_waiting.append(again)
            else:
                still_firing.append((episode, alert_id))
        self._noise_firing = still_firing
        waiting = []
        for episode in self._noise_waiting:
            if now >= episode.fire_at:
                alert = self._fire(episode.name, episode.severity, episode.labels, episode.summary,
                                   "Background condition; see the runbook.", now)
                self._noise_firing.append((episode, alert.id))
                out.append(Transition(alert, noise=True))
            else:
                waiting.append(episode)
        self._noise_waiting = waiting
        return out
