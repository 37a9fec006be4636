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
Match = tuple[Key, dict[str, str], str, str]  # a rule's match: its key, labels, summary, description


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
    # rule name -> (the pod snapshot it was computed at, each pod's matches in list order, all
    # of them in that order): see Rule.each_pod and _pod_matches
    _per_pod: dict[str, tuple[int, list[list[Match]], list[Match]]] = field(default_factory=dict)
    _pods: Optional[list[tuple[str, str, dict[str, Any]]]] = None  # the apps' pods, during one evaluate
    # The last snapshot of the apps' pods (taken at the first pod rule of an evaluate): its number,
    # each pod's (namespace, name) in list order and resourceVersion, and, during the evaluate,
    # how it differs from the snapshot before: while the same pods list, the positions whose
    # resourceVersion moved (else None); once one came or went, for each position the one the
    # same pod at the same resourceVersion had then, or -1 (else None)
    _snapshot: int = 0
    _pod_keys: list[tuple[str, str]] = field(default_factory=list)
    _pod_rvs: list[Optional[str]] = field(default_factory=list)
    _moved: Optional[list[int]] = None
    _sources: Optional[list[int]] = None

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

    def _pod_matches(self, rule: Rule, cluster: Cluster, apps: dict[str, AppSpec]) -> list[Match]:
        """A pod rule's matches: every pod's own, in list order (as ``rule.evaluate`` gives them).
        The rule reads the pod alone (its namespace and its service are its key and its labels),
        and every change to a stored object gives it a new resourceVersion
        (``Store.touch``/``replace``/``create``): so while the same pods are listed in the same
        order, only those whose resourceVersion moved since the snapshot the rule's last matches
        were computed at are evaluated again — a few a tick, of about a hundred — and the
        matches stand as they were unless one of those had or has any. When pods came or went
        (a rollout, a rescheduled pod: about every other tick), a pod at the same
        resourceVersion keeps its last matches wherever it lists now."""
        assert rule.each_pod is not None
        if self._pods is None:
            self._take_snapshot(cluster, apps)
        assert self._pods is not None
        last = self._per_pod.get(rule.name)
        name, each_pod = rule.name, rule.each_pod
        if last is not None and last[0] == self._snapshot - 1 and self._moved is not None:
            _, per, found = last
            pods = self._pods
            dirty = False
            for i in self._moved:
                ns, svc, pod = pods[i]
                now = [((name, tuple(sorted(labels.items()))), labels, summary, description)
                       for labels, summary, description in each_pod(ns, svc, pod)]
                if now or per[i]:
                    dirty = True
                per[i] = now
            if dirty:
                found = [m for of_pod in per for m in of_pod]
        elif last is not None and last[0] == self._snapshot - 1 and self._sources is not None:
            before = last[1]
            per = [before[i] if i >= 0 else
                   [((name, tuple(sorted(labels.items()))), labels, summary, description)
                    for labels, summary, description in each_pod(ns, svc, pod)]
                   for i, (ns, svc, pod) in zip(self._sources, self._pods)]
            found = [m for of_pod in per for m in of_pod]
        else:
            per = [[((name, tuple(sorted(labels.items()))), labels, summary, description)
                    for labels, summary, description in each_pod(ns, svc, pod)]
                   for ns, svc, pod in self._pods]
            found = [m for of_pod in per for m in of_pod]
        self._per_pod[name] = (self._snapshot, per, found)
        return found

    def _take_snapshot(self, cluster: Cluster, apps: dict[str, AppSpec]) -> None:
        """List the apps' pods for this evaluate and note which moved since the last snapshot."""
        pods = self._pods = list(app_pods(cluster, apps))
        keys = [(ns, pod["metadata"]["name"]) for ns, _svc, pod in pods]
        rvs: list[Optional[str]] = [pod["metadata"].get("resourceVersion") for _ns, _svc, pod in pods]
        self._moved = self._sources = None
        if keys == self._pod_keys and None not in rvs:
            self._moved = [i for i, (rv, before) in enumerate(zip(rvs, self._pod_rvs)) if rv != before]
        elif self._snapshot:
            at = {key: i for i, key in enumerate(self._pod_keys)}
            rvs_before = self._pod_rvs
            sources = self._sources = []
            for key, rv in zip(keys, rvs):
                i = at.get(key, -1)
                sources.append(i if i >= 0 and rv is not None and rvs_before[i] == rv else -1)
        self._pod_keys, self._pod_rvs = keys, rvs
        self._snapshot += 1

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
