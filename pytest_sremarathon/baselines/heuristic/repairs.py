"""Repairs by symptom: revert, cordon and drain, uncordon, restart, scale out, switch on a fallback."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from pytest_sremarathon.agent.protocol import PipelineError

from ..kube_client import KubeError
from ..times import whole_seconds
from .cluster import View
from .context import StepContext
from .health import Health, utilisation
from .hypothesis import Hypothesis
from .incident import Incident, ServiceKey
from .suspects import suspects

#: Values tried, in order, for a configuration key that selects a degraded mode (``*FALLBACK*``
#: and similar) when a third-party dependency is down: the usual "degrade gracefully" modes.
FALLBACK_VALUES = ("queue", "cache", "static", "degraded", "on", "true", "enabled")
_FALLBACK_KEY = re.compile(r"FALLBACK|DEGRADED|FAILOVER", re.I)


class Repairs:
    """One step's repairs, each for an incident and the hypothesis it stands on."""

    def __init__(self, ctx: StepContext, view: View, health: dict[ServiceKey, Health]) -> None:
        self.ctx = ctx
        self.kube = ctx.cluster
        self.state = ctx.state
        self.view = view
        self.health = health
        self.time: datetime = ctx.obs.time
        """The step's time (what comparisons use)."""
        self.stamp: datetime = whole_seconds(ctx.obs.time)
        """The step's time as incidents record it."""

    def act(self, inc: Incident, h: Hypothesis) -> None:
        kind = h.kind
        if kind in ("node", "zone"):
            self._drain(inc, h.nodes)
        elif kind == "change":
            self._revert(inc, h)
        elif kind == "credential":
            self._restart_once(inc, h.app or "", h.clients or [], "restart the clients for the new credential")
        elif kind == "datastore":
            self._restart_once(inc, h.app or "", [h.fix_service or ""], "restart the slow datastore")
        elif kind == "surge":
            self._scale(inc, h)
        elif kind == "external":
            self._fallback(inc, h)
        self._uncordon_if_starved(inc)

    def _record(self, inc: Incident, what: str) -> None:
        inc.record(self.stamp, what)
        self.ctx.notes.append(f"{inc.key}: {what}")

    def _note(self, text: str) -> None:
        self.ctx.notes.append(text)

    # -- machines -------------------------------------------------------------------------------
    def _drain(self, inc: Incident, nodes: list[str]) -> None:
        view = self.view
        if not self._room_elsewhere(nodes):
            self._free_capacity(inc, nodes)
            if not self._room_elsewhere(nodes):
                if not inc.no_room_noted:
                    inc.no_room_noted = True
                    self._note(f"{inc.key}: not draining {', '.join(nodes)}: not enough healthy nodes elsewhere")
                return
        for node in nodes:
            info = view.nodes.get(node)
            if info is None:
                continue
            if not info.cordoned:
                try:
                    self.kube.cordon(node)
                    self.state.cordoned.append(node)
                    self._record(inc, f"cordoned {node}")
                except KubeError as exc:
                    self._note(f"cordon {node} failed: {exc}")
                    continue
            for pod in view.pods_on([node]):
                try:
                    self.kube.evict(pod.ns, pod.name)
                    self._record(inc, f"evicted {pod.ns}/{pod.name} from {node}")
                except KubeError as exc:
                    if exc.status != 404:
                        self._note(f"evict {pod.ns}/{pod.name} failed: {exc}")

    def _room_elsewhere(self, nodes: list[str]) -> bool:
        """Draining ``nodes`` leaves enough: a whole zone only if every other node is healthy and
        schedulable; one node only if two healthy schedulable nodes remain."""
        others = [n for n in self.view.nodes if n not in nodes]
        healthy = self.view.schedulable_ready(excluding=nodes)
        if len(nodes) > 1:
            return bool(others) and len(healthy) == len(others)
        return len(healthy) >= min(2, len(others))

    def _free_capacity(self, inc: Incident, keep: list[str]) -> None:
        """Uncordon healthy nodes we cordoned for incidents that are over."""
        active = {n for i in self.state.incidents.values() if not i.closed and i is not inc for n in i.nodes}
        for node, info in sorted(self.view.nodes.items()):
            if (info.cordoned and info.ready and not info.disk and node not in keep and node not in active
                    and node in self.state.cordoned):
                try:
                    self.kube.cordon(node, on=False)
                    info.cordoned = False
                    self._record(inc, f"uncordoned {node} (its incident is over) to make room")
                except KubeError as exc:
                    self._note(f"uncordon {node} failed: {exc}")

    def _uncordon_if_starved(self, inc: Incident) -> None:
        """Pods that cannot be scheduled while healthy nodes sit cordoned (not by us, or by us
        for an incident that is over): uncordon those nodes."""
        pending = [p for p in self.view.pods if p.active and not p.node]
        if not pending:
            return
        busy = set()
        for i in self.state.incidents.values():
            if i.kind in ("node", "zone"):
                closed = i.closed_at
                if not i.closed or closed is None or self.time - closed < timedelta(minutes=30):
                    busy |= set(i.nodes)
        for node, info in sorted(self.view.nodes.items()):
            if info.cordoned and info.ready and not info.disk and node not in busy:
                try:
                    self.kube.cordon(node, on=False)
                    info.cordoned = False
                    self._record(inc, f"uncordoned {node}: {len(pending)} pod(s) cannot be scheduled")
                except KubeError as exc:
                    self._note(f"uncordon {node} failed: {exc}")

    # -- deployments ----------------------------------------------------------------------------
    def _restart_once(self, inc: Incident, app: str, deployments: list[str], why: str) -> None:
        done = set(inc.restarted)
        for d in sorted(set(deployments) - done):
            if not d:
                continue
            try:
                self.kube.restart(app, d, self.time)
                inc.restarted.append(d)
                self._record(inc, f"{why}: rollout restart {app}/{d}")
            except KubeError as exc:
                self._note(f"restart {app}/{d} failed: {exc}")

    def _scale(self, inc: Incident, h: Hypothesis) -> None:
        """Scale out every deployment of the app that runs hot (CPU per ready pod over
        ``Tuning.saturated`` of its limit), to about 45% — at most doubling per step. A deploy
        that resets a scaled deployment (manifests carry replica counts) is scaled back at once."""
        assert h.app
        app = h.app
        targets = inc.scale_targets
        for svc, want in sorted(targets.items()):
            d = self.view.deployments.get((app, svc))
            if d and d.replicas < want:
                try:
                    self.kube.scale(app, svc, want)
                    self._record(inc, f"scaled {app}/{svc} back to {want} (a deploy reset it to {d.replicas})")
                    d.replicas = want
                except KubeError as exc:
                    self._note(f"scale {app}/{svc} failed: {exc}")
        last = inc.last_scaled
        if last is not None and self.time - last < timedelta(minutes=4):
            return  # let the new pods warm up before judging again
        for (a, svc), d in sorted(self.view.deployments.items()):
            if a != app:
                continue
            hl = self.health.get((a, svc))
            util = hl.utilisation if hl is not None else utilisation(self.ctx.obs, self.view, a, svc)
            if util < self.ctx.tuning.saturated * 0.85:
                continue
            current = max(d.replicas, 1)
            want = min(max(current + 1, math.ceil(current * util / 0.45)), current * 2, 20)
            if want <= d.replicas:
                continue
            try:
                self.kube.scale(app, svc, want)
                targets[svc] = want
                inc.last_scaled = self.stamp
                self._record(inc, f"scaled {app}/{svc} {d.replicas} -> {want} (CPU {util:.0%} of its limit per pod)")
            except KubeError as exc:
                self._note(f"scale {app}/{svc} failed: {exc}")

    def _fallback(self, inc: Incident, h: Hypothesis) -> None:
        """Switch the calling service to its degraded mode: a ``*FALLBACK*`` setting (in its
        ConfigMap or env) set to the next of :data:`FALLBACK_VALUES`, via ``set env``. A value
        that a deploy wiped is set again; the next value is tried only when the last one is
        live and the calls still fail."""
        app, svc = h.app or "", h.fix_service or ""
        d = self.view.deployments.get((app, svc))
        if d is None:
            return
        key, value = inc.fallback_key, inc.fallback_value
        if key and value and d.env.get(key) != value:
            try:
                self.kube.set_env(app, svc, d.container, key, value)
                self._record(inc, f"set {key}={value} on {app}/{svc} again (a deploy reset it)")
            except KubeError as exc:
                self._note(f"set env {key} on {app}/{svc} failed: {exc}")
            return
        last = inc.last_action
        if last is not None and (self.time - last < timedelta(minutes=10) or d.updated < d.replicas):
            return
        settings: dict[str, str] = {}
        try:
            for cm in self.kube.configmaps(app):
                if cm["metadata"]["name"] in d.config:
                    settings.update({k: str(v) for k, v in (cm.get("data") or {}).items()})
        except KubeError:
            pass
        settings.update({k: str(v) for k, v in d.env.items() if v is not None})
        keys = sorted(k for k in settings if _FALLBACK_KEY.search(k))
        if not keys:
            if not inc.no_fallback_noted:
                inc.no_fallback_noted = True
                self._note(f"{inc.key}: {svc} has no fallback setting to switch on")
            return
        key = keys[0]
        tried = inc.fallback_tried
        value = next((v for v in FALLBACK_VALUES if v not in tried and v != settings.get(key)), None)
        if value is None:
            return
        tried.append(value)
        inc.fallback_key, inc.fallback_value = key, value
        try:
            self.kube.set_env(app, svc, d.container, key, value)
            self._record(inc, f"set {key}={value} on {app}/{svc} (third-party API down)")
        except KubeError as exc:
            self._note(f"set env {key} on {app}/{svc} failed: {exc}")

    # -- changes --------------------------------------------------------------------------------
    def _revert(self, inc: Incident, h: Hypothesis) -> None:
        """Revert the best suspect change (through the pipeline, which deploys the result); with
        no suspect, restart unready pods or a slow leaf. A revert that has not helped after
        ``Tuning.verify_after`` makes way for the next suspect."""
        tuning, now = self.ctx.tuning, self.time
        last = inc.last_action
        if last is not None and now - last < tuning.verify_after:
            return  # give the last repair time to roll out
        recent = [t for t in inc.tried_at if now - t < timedelta(hours=1)]
        if len(recent) >= tuning.max_reverts or not inc.alerts:
            return  # (a long-lived incident gets a fresh budget for a new episode)
        ranked = suspects(self.ctx, inc, h, self.view.services)
        if not ranked:
            if inc.tried or not h.fix_service:
                return
            pods = self.view.pods_of(h.app or "", h.fix_service)
            leaf = not self.state.graph.callees(h.app or "", h.fix_service)
            if pods and all(p.waiting == "" for p in pods) and any(not p.ready for p in pods):
                self._restart_once(inc, h.app or "", [h.fix_service], "no suspect change; restart unready pods")
            elif leaf and now - inc.opened >= timedelta(minutes=10):
                # A slow dependency with no change behind it (a datastore whose storage stalls):
                # fresh pods are the cheapest thing to try.
                self._restart_once(inc, h.app or "", [h.fix_service], "no suspect change; restart the slow leaf")
            return
        _, change, why, strong = ranked[0]
        if not strong and "matches the errors" not in why:
            return  # nothing points at it but the calendar
        if not strong:
            # A weak suspect: let the failure settle (it may be a symptom of another incident
            # being repaired in the same app) before touching anything.
            busy = [i for i in self.state.incidents.values() if i is not inc and i.app == h.app
                    and i.last_action is not None and now - i.last_action < tuning.verify_after]
            if now - inc.opened < timedelta(minutes=10) or busy:
                return
        inc.tried.append(change.id)
        inc.tried_at.append(self.stamp)
        inc.cause = change.id
        try:
            revert = self.ctx.obs.pipeline.revert(h.app or "", change.id)
        except PipelineError as exc:
            self._note(f"{inc.key}: revert of {change.id} refused: {exc}")
            return
        self.state.reverted.append(change.id)
        self._record(inc, f"reverted {change.id} ({change.message!r}; {why}) as {revert.id}")
