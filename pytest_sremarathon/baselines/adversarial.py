"""Adversarial baselines: agents that try to raise the Marathon-Score without diagnosing or
repairing anything (issue 12).

Run any of them with ``--agent=pytest_sremarathon.baselines:<Name>``:

======================  ====================================================================
``SprayComponents``     names every candidate component (each deployment of the app, each
                        node, each zone) for every alerting service, one finding each
``SprayChanges``        blames every pipeline change of the app from the last 3 virtual hours
``RotateCandidates``    one answer per step, but a different candidate component each step
``TouchWithoutFixing``  the component spray, plus metadata-only patches on every Deployment and
                        Node every step: activity that repairs nothing
``SprayAlerts``         correlation gaming: one finding holding every alert ever seen, plus
                        one finding per firing alert padded with 5 random other alert ids
``RestartEverything``   the touch-everything repairer: ``rollout restart`` of every Deployment
                        in every alerting namespace, every step, and every incident claimed
======================  ====================================================================

Like the honest baselines they use nothing but the public contract
(:mod:`pytest_sremarathon.agent.protocol`) and the Kubernetes API through the run's
kubeconfig (the official client, via :class:`~pytest_sremarathon.baselines.kube_client.KubeClient`): what any
third-party agent could do. They exist so the test suite can bound what each strategy earns.

All are deterministic (everything is sorted; the only randomness is seeded by ``obs.step``),
cheap (the candidate list — deployments per namespace, nodes and zones — is listed once per
namespace and cached for the run; a failed list is retried at the next step) and robust: an
API error is noted in the report, never raised out of ``step``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Optional

from pytest_sremarathon.agent.protocol import (
    Alert,
    Claim,
    Environment,
    Finding,
    Observation,
    Report,
    ServiceError,
)

from .alerts import alert_service, by_start, latest_alerts
from .kube_client import ZONE_LABEL, KubeClient, KubeError
from .times import utc

__all__ = ["SprayComponents", "SprayChanges", "RotateCandidates", "TouchWithoutFixing", "SprayAlerts",
           "RestartEverything"]

#: The annotation (on Deployments) and label (on Nodes) :class:`TouchWithoutFixing` sets.
TOUCHED = "sremarathon.test/touched"
#: How far back :class:`SprayChanges` looks for changes to blame.
CHANGE_WINDOW = timedelta(hours=3)
MAX_FINDINGS = 2000  # Report.findings' limit
MAX_ALERTS = 5000    # Finding.alerts' limit


class _Group:
    """The firing alerts of one ``(app, service)``."""

    __slots__ = ("app", "namespace", "service", "alerts")

    def __init__(self, app: str, namespace: str, service: str) -> None:
        self.app = app
        self.namespace = namespace
        self.service = service
        self.alerts: list[str] = []

    @property
    def key(self) -> str:
        return f"{self.app}/{self.service}"

    @property
    def component(self) -> str:
        return f"service:{self.app}/{self.service}"


def _ordered(obs: Observation) -> list[Alert]:
    """Every alert of the observation, latest state, by (start, id)."""
    return by_start(latest_alerts(obs))


def _firing_groups(obs: Observation) -> list[_Group]:
    """Firing alerts grouped by their ``(app, service)`` labels, sorted by key. Alerts without a
    service (node alerts) belong to no group."""
    groups: dict[tuple[str, str], _Group] = {}
    for alert in _ordered(obs):
        if alert.status != "firing":
            continue
        svc = alert_service(alert)
        if svc is None:
            continue
        app, service = svc
        group = groups.get((app, service))
        if group is None:
            group = groups[(app, service)] = _Group(app, alert.labels.get("namespace") or app, service)
        group.alerts.append(alert.id)
    return [groups[k] for k in sorted(groups)]


class _Cluster:
    """What the cluster offers to blame or touch, listed once and cached for the run:
    deployment names per namespace, node names and each node's zone."""

    def __init__(self) -> None:
        self.deployments: dict[str, list[str]] = {}
        self.nodes: Optional[dict[str, str]] = None  # node -> zone ("" when unlabelled)
        self._kube: Optional[KubeClient] = None

    def kube(self, kubeconfig: Path) -> KubeClient:
        if self._kube is None:
            try:
                self._kube = KubeClient(Path(kubeconfig))
            except Exception as exc:  # noqa: BLE001 - a missing or broken kubeconfig
                raise KubeError(0, f"cannot load the kubeconfig: {type(exc).__name__}: {exc}") from None
        return self._kube

    def ensure(self, kubeconfig: Path, namespaces: list[str], notes: list[str]) -> None:
        """List what is not cached yet: at most one call per namespace, and one for the nodes."""
        try:
            kube = self.kube(kubeconfig)
        except KubeError as exc:
            notes.append(str(exc))
            return
        for ns in sorted(set(namespaces)):
            if ns in self.deployments:
                continue
            try:
                self.deployments[ns] = sorted(d["metadata"]["name"] for d in kube.deployments(ns))
            except KubeError as exc:
                notes.append(f"list deployments in {ns} failed: {exc}")
        if self.nodes is None:
            try:
                self.nodes = {n["metadata"]["name"]: ((n["metadata"].get("labels") or {}).get(ZONE_LABEL) or "")
                              for n in kube.nodes()}
            except KubeError as exc:
                notes.append(f"list nodes failed: {exc}")

    def candidates(self, group: _Group) -> list[str]:
        """The alert's own service first, then every other deployment of its namespace, every
        node and every zone, each in name order."""
        out = [group.component]
        out += [f"service:{group.app}/{d}" for d in self.deployments.get(group.namespace, []) if d != group.service]
        nodes = self.nodes or {}
        out += [f"node:{n}" for n in sorted(nodes)]
        out += [f"zone:{z}" for z in sorted({z for z in nodes.values() if z})]
        return out


class _Adversary:
    """Shared plumbing: setup, the cached cluster view, and a step that never raises."""

    def __init__(self) -> None:
        self.apps: list[str] = []
        self.cluster = _Cluster()

    def setup(self, env: Environment) -> None:
        self.apps = list(env.apps)

    def step(self, obs: Observation) -> Report:
        notes: list[str] = []
        try:
            findings, claims = self._step(obs, notes)
        except Exception as exc:  # noqa: BLE001 - never raise out of step
            return Report(notes=f"step failed: {type(exc).__name__}: {exc}"[:20000])
        return Report(findings=findings[:MAX_FINDINGS], claims=claims[:MAX_FINDINGS],
                      notes="\n".join(notes)[:20000])

    def _step(self, obs: Observation, notes: list[str]) -> tuple[list[Finding], list[Claim]]:
        raise NotImplementedError

    def _namespaces(self, groups: list[_Group]) -> list[str]:
        return sorted({g.namespace for g in groups})

    @staticmethod
    def _patch_each(targets: list[tuple[str, Callable[[], Any]]], notes: list[str]) -> int:
        done = 0
        for what, call in targets:
            try:
                call()
                done += 1
            except KubeError as exc:
                notes.append(f"{what} failed: {exc}")
        return done


# =============================================================================================


class SprayComponents(_Adversary):
    """**Gaming strategy: over-listing localization answers** ("name everything, one must be
    right").

    Every step it groups the firing alerts by ``(app, service)`` and, for each group, emits one
    finding per *candidate component*: every deployment of the app's namespace as
    ``service:<app>/<deployment>``, every node as ``node:<name>``, and every zone as
    ``zone:<zone>`` (from the nodes' ``topology.kubernetes.io/zone`` labels). Each finding
    carries the same alert ids (so correlation is as good as an honest per-service grouping)
    and its own incident key, ``spray:<app>/<service>|<component>``. It names no cause, makes
    no change and claims nothing. Under a scorer without localization precision it earns L for
    nearly every correlated fault without diagnosing any.
    """

    def _step(self, obs: Observation, notes: list[str]) -> tuple[list[Finding], list[Claim]]:
        groups = _firing_groups(obs)
        if groups:
            self.cluster.ensure(obs.kubeconfig, self._namespaces(groups), notes)
        return self._spray(groups), []

    def _spray(self, groups: list[_Group]) -> list[Finding]:
        findings = []
        for g in groups:
            for component in self.cluster.candidates(g):
                findings.append(Finding(incident=f"spray:{g.key}|{component}", alerts=list(g.alerts),
                                        component=component, confidence=0.1))
        return findings


class SprayChanges(_Adversary):
    """**Gaming strategy: over-listing causes** ("blame every recent change").

    For each ``(app, service)`` group of firing alerts, one finding per pipeline change of that
    app made in the last 3 virtual hours (``obs.pipeline.changes(app)``, at most one call per
    app per step): ``cause="change:<id>"``, component the alert's own service, incident key
    ``changes:<app>/<service>|<id>``, the group's alert ids. No actions, no claims. With several
    benign deploys per faulty one, one of the recent changes is usually the culprit.
    """

    def _step(self, obs: Observation, notes: list[str]) -> tuple[list[Finding], list[Claim]]:
        since = utc(obs.time) - CHANGE_WINDOW
        until = utc(obs.time)
        changes: dict[str, list[str]] = {}
        findings: list[Finding] = []
        for g in _firing_groups(obs):
            if g.app not in changes:
                try:
                    recent = [c for c in obs.pipeline.changes(g.app) if since <= utc(c.time) <= until]
                    changes[g.app] = [c.id for c in sorted(recent, key=lambda c: (utc(c.time), c.id))]
                except ServiceError as exc:
                    notes.append(f"changes({g.app}) failed: {exc}")
                    changes[g.app] = []
            for cid in changes[g.app]:
                findings.append(Finding(incident=f"changes:{g.key}|{cid}", alerts=list(g.alerts),
                                        component=g.component, cause=f"change:{cid}", confidence=0.1))
        return findings, []


class RotateCandidates(_Adversary):
    """**Gaming strategy: spreading the spray over time** ("one answer at a time, a new one every
    step").

    For each ``(app, service)`` group of firing alerts it reports exactly ONE finding per step,
    under one incident key per group (``rotate:<app>/<service>``), with the group's alert ids.
    The component it names walks through the candidate list of :class:`SprayComponents` (the
    alert's own service first, then the app's other deployments, the nodes, the zones): the
    n-th step at which the group is firing names candidate ``n mod len(candidates)``, so two
    successive steps never name the same one. No actions, no claims. Each step looks like an
    honest single answer; over a fault's window it names as many candidates as there were
    steps.
    """

    def __init__(self) -> None:
        super().__init__()
        self.turns: dict[str, int] = {}  # group key -> steps reported so far

    def _step(self, obs: Observation, notes: list[str]) -> tuple[list[Finding], list[Claim]]:
        groups = _firing_groups(obs)
        if groups:
            self.cluster.ensure(obs.kubeconfig, self._namespaces(groups), notes)
        findings = []
        for g in groups:
            candidates = self.cluster.candidates(g)
            turn = self.turns.get(g.key, 0)
            self.turns[g.key] = turn + 1
            findings.append(Finding(incident=f"rotate:{g.key}", alerts=list(g.alerts),
                                    component=candidates[turn % len(candidates)], confidence=0.5))
        return findings, []


class TouchWithoutFixing(SprayComponents):
    """**Gaming strategy: activity without repair** ("make changes near every fault so that any
    mitigation looks like mine").

    The findings of :class:`SprayComponents`, plus, every step, a *metadata-only* patch on
    every Deployment of every app namespace (annotation ``sremarathon.test/touched=<step>``)
    and on every Node (label ``sremarathon.test/touched=<step>``). It never changes a spec: no
    rollout, no cordon, nothing a mitigation condition reads. A scorer that credits a repair to
    "the agent changed something in the fault's namespace" credits it with every fault that
    healed or was cleaned up while it was touching.
    """

    def _step(self, obs: Observation, notes: list[str]) -> tuple[list[Finding], list[Claim]]:
        groups = _firing_groups(obs)
        namespaces = sorted(set(self.apps) | set(self._namespaces(groups)))
        if namespaces:
            self.cluster.ensure(obs.kubeconfig, namespaces, notes)
        value = str(obs.step)
        targets: list[tuple[str, Callable[[], Any]]] = []
        try:
            kube = self.cluster.kube(obs.kubeconfig)
        except KubeError as exc:
            notes.append(str(exc))
        else:
            for ns in namespaces:
                for dep in self.cluster.deployments.get(ns, []):
                    targets.append((f"annotate deployment {ns}/{dep}",
                                    partial(kube.annotate_deployment, ns, dep, TOUCHED, value)))
            for node in sorted(self.cluster.nodes or {}):
                targets.append((f"label node {node}", partial(kube.label_node, node, TOUCHED, value)))
        done = self._patch_each(targets, notes)
        notes.append(f"touched {done} of {len(targets)} object(s) (metadata only)")
        return self._spray(groups), []


class SprayAlerts(_Adversary):
    """**Gaming strategy: spraying alert ids** (correlation gaming: "put every alert in some
    finding, and every finding's alerts everywhere").

    Every step: one finding (incident ``all-alerts``) holding every alert id seen since the run
    began, firing or resolved (the most recent 5000 if there are more); plus, for every firing
    alert, one finding (incident ``alert:<id>``) holding that alert and 5 other alert ids drawn
    at random from those seen — the draw is seeded by ``obs.step``, so the same step with the
    same alerts gives the same report. Each per-alert finding names the alert's own service
    (``service:<app>/<service>``; ``node:<node>`` for a node alert). The ``all-alerts`` finding
    names nothing. No actions, no claims.
    """

    PADDING = 5

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, None] = {}  # alert ids in the order first seen (by start, id)

    def _step(self, obs: Observation, notes: list[str]) -> tuple[list[Finding], list[Claim]]:
        alerts = _ordered(obs)
        for a in alerts:
            self.seen.setdefault(a.id, None)
        seen = list(self.seen)
        findings: list[Finding] = []
        if seen:
            findings.append(Finding(incident="all-alerts", alerts=seen[-MAX_ALERTS:], confidence=0.1))
        pool = sorted(seen)
        rng = random.Random(obs.step)
        for a in alerts:
            if a.status != "firing":
                continue
            drawn = rng.sample(pool, min(len(pool), self.PADDING + 1))
            others = [x for x in drawn if x != a.id][: self.PADDING]
            findings.append(Finding(incident=f"alert:{a.id}", alerts=[a.id, *others],
                                    component=_own_component(a), confidence=0.1))
        return findings, []


def _own_component(alert: Alert) -> Optional[str]:
    app = alert.labels.get("app") or alert.labels.get("namespace")
    if app and alert.labels.get("service"):
        return f"service:{app}/{alert.labels['service']}"
    if alert.labels.get("node"):
        return f"node:{alert.labels['node']}"
    return None


class RestartEverything(_Adversary):
    """**Gaming strategy: the touch-everything repairer** ("restart the world, claim victory").

    One finding per ``(app, service)`` group of firing alerts, naming the alert's own service
    (incident ``restart:<app>/<service>``), and, every step, ``kubectl rollout restart`` (the
    pod template annotation ``kubectl.kubernetes.io/restartedAt``, as ``KubeClient.restart``
    sets it) of *every* Deployment in every namespace that has a firing alert — healthy ones
    included — and a claim that every incident it reports is resolved. It legitimately fixes
    what a restart fixes (a stale credential, a wedged process); everything else it touches is
    collateral the report must show, and its claims open a wide declared-done gap.
    """

    def _step(self, obs: Observation, notes: list[str]) -> tuple[list[Finding], list[Claim]]:
        groups = _firing_groups(obs)
        namespaces = self._namespaces(groups)
        targets: list[tuple[str, Callable[[], Any]]] = []
        if namespaces:
            self.cluster.ensure(obs.kubeconfig, namespaces, notes)
            try:
                kube = self.cluster.kube(obs.kubeconfig)
            except KubeError as exc:
                notes.append(str(exc))
            else:
                for ns in namespaces:
                    for dep in self.cluster.deployments.get(ns, []):
                        targets.append((f"restart deployment {ns}/{dep}", partial(kube.restart, ns, dep, obs.time)))
        done = self._patch_each(targets, notes)
        if targets:
            notes.append(f"restarted {done} of {len(targets)} deployment(s) in {', '.join(namespaces)}")
        findings = [Finding(incident=f"restart:{g.key}", alerts=list(g.alerts), component=g.component,
                            confidence=0.3) for g in groups]
        claims = [Claim(incident=f.incident) for f in findings]
        return findings, claims
