"""Localization: from the failing services to the upstream-most failing component.

Machines first (their symptoms mask everything else, :mod:`.machines`), then app-wide load (a
traffic surge), then for each failing service the end of its error chain (:meth:`Diagnosis.root`).
"""

from __future__ import annotations

from typing import Optional

from .cluster import View
from .context import StepContext
from .health import Health, metric
from .hypothesis import Hypothesis
from .incident import ServiceKey
from .logs import Evidence
from .machines import MachineDiagnosis
from .tokens import tokens


def _ratio(now: list[float], before: list[float]) -> float:
    return (sum(now) / len(now)) / max(sum(before) / len(before), 1e-6)


class Diagnosis:
    """One step's hypotheses, by component, each with the failing services it explains."""

    def __init__(self, ctx: StepContext, view: View, health: dict[ServiceKey, Health], sick: set[ServiceKey],
                 evidence: dict[ServiceKey, Evidence]) -> None:
        self.ctx = ctx
        self.graph = ctx.state.graph
        self.view = view
        self.health = health
        self.sick = sick
        self.evidence = evidence

    def hypotheses(self) -> dict[str, Hypothesis]:
        hyps: dict[str, Hypothesis] = {}
        explained: set[ServiceKey] = set()
        for h in MachineDiagnosis(self.ctx, self.view, self.sick, self.evidence).hypotheses():
            hyps[h.component] = h
            explained |= h.services
        for h in self.surges():
            if h.component not in hyps:
                hyps[h.component] = h
                explained |= h.services
        for key in sorted(self.sick - explained):
            root = self.root(key)
            if root is None:
                continue
            root.services.add(key)
            known = hyps.get(root.component)
            if known is not None:
                known.services |= root.services
                known.tokens |= root.tokens
                known.clients = sorted(set(known.clients) | set(root.clients))
            else:
                hyps[root.component] = root
        return hyps

    # -- load ---------------------------------------------------------------------------------
    def surges(self) -> list[Hypothesis]:
        """An app whose whole traffic jumped (entry rate several times what it was half an
        hour ago) while its deployments saturate their CPU."""
        obs, state = self.ctx.obs, self.ctx.state
        out = []
        for app in self.ctx.apps:
            saturated = sorted(s for (a, s), h in self.health.items()
                               if a == app and h.utilisation >= self.ctx.tuning.saturated)
            if not saturated:
                continue
            entry = self._entry(app)
            if entry is None:
                continue
            now = metric(obs, app, entry, "requests_per_second", 3)
            before = metric(obs, app, entry, "requests_per_second", 45)[:6]
            if not now or not before:
                continue
            ratio = _ratio(now, before)
            prior = state.open_incident(f"service:{app}/{entry}")
            ongoing = prior is not None and prior.kind == "surge"
            if ratio < 2.0 and not ongoing:
                continue
            h = Hypothesis(component=f"service:{app}/{entry}", kind="surge", app=app, fix_service=entry,
                           why=f"{app} traffic {ratio:.1f}x in 45 min; saturated: {', '.join(saturated)}")
            h.clients = saturated
            # What the surge explains: failing services of the app whose own traffic jumped too
            # and that do not fail on their own (a bad change can ship during a surge).
            h.services = {(a, s) for (a, s) in self.sick if a == app and not (self.evidence.get((a, s)) or Evidence()).own
                          and (s == entry or self._rate_ratio(a, s) >= 2.0)}
            out.append(h)
        return out

    def _rate_ratio(self, app: str, svc: str) -> float:
        """Request rate now against three quarters of an hour ago."""
        obs = self.ctx.obs
        now = metric(obs, app, svc, "requests_per_second", 3)
        before = metric(obs, app, svc, "requests_per_second", 45)[:6]
        if not now or not before:
            return 0.0
        return _ratio(now, before)

    def _entry(self, app: str) -> Optional[str]:
        """Where the app's traffic comes in: ``frontend``, else the one caller nobody calls."""
        names = self.view.services.get(app, [])
        if "frontend" in names:
            return "frontend"
        called = self.graph.called(app)
        roots = [s for s in names if s not in called and self.graph.callees(app, s)]
        return roots[0] if len(roots) == 1 else None

    # -- services -----------------------------------------------------------------------------
    def root(self, key: ServiceKey, seen: frozenset[ServiceKey] = frozenset()) -> Optional[Hypothesis]:
        """Follow a failing service's errors to where they start."""
        view, sick = self.view, self.sick
        app, svc = key
        seen = seen | {key}
        ev = self.evidence.get(key) or Evidence()
        known = set(view.services.get(app, []))
        chain_total = ev.chain_total
        own_pods = [p for p in view.pods_of(app, svc) if p.waiting or not p.ready]
        if ev.oom or (own_pods and not ev.chains):
            # Its own pods crash, run out of memory or never get ready: the trouble is here.
            h = Hypothesis(component=f"service:{app}/{svc}", kind="change", app=app, fix_service=svc,
                           why=f"{svc}'s own pods are failing ({len(own_pods)} unhealthy"
                               + (", out of memory" if ev.oom else "") + ")", slow_burn=True)
            h.tokens = tokens("\n".join(ev.text))
            return h
        if ev.own and ev.own >= chain_total:
            h = Hypothesis(component=f"service:{app}/{svc}", kind="change", app=app, fix_service=svc,
                           why=f"{svc} raises its own exceptions")
            h.tokens = tokens("\n".join(ev.text))
            h.slow_burn = bool(ev.oom) or any(p.waiting or p.restarts for p in view.pods_of(app, svc))
            if ev.oom:
                h.why += " and runs out of memory"
            return h
        if chain_total:
            names, reason = ev.main_chain()
            target = names[-1] if names else svc
            caller = names[-2] if len(names) >= 2 else svc
            text = tokens("\n".join(ev.text))
            if reason == "nohost":
                h = Hypothesis(component=f"service:{app}/{caller}", kind="change", app=app, fix_service=caller,
                               why=f"{caller} calls {target}, a name that does not resolve")
                h.tokens = text | {target.lower()}
                return h
            if reason == "external" and target not in known:
                return Hypothesis(component=f"external:{target}", kind="external", app=app, fix_service=caller,
                                  why=f"{caller}'s calls to the third-party API {target} fail")
            if reason == "auth" and target:
                clients = sorted({s for (a, s), e in self.evidence.items() if a == app
                                  and any(r == "auth" and n and n[-1] == target for (n, r) in e.chains)} | {caller})
                h = Hypothesis(component=f"service:{app}/{target}", kind="credential", app=app, fix_service=target,
                               why=f"{target} refuses the credentials of {', '.join(clients)}")
                h.clients = [c for c in clients if c != target]
                return h
            if reason == "dns":
                return None  # a zone-wide cause; the machine diagnosis decides
            nxt = (app, target)
            if target in known and nxt != key and nxt not in seen:
                if nxt in sick:
                    deeper = self.root(nxt, seen)
                    if deeper is not None:
                        deeper.services.add(nxt)
                        return deeper
                elif reason == "timeout":
                    h = Hypothesis(component=f"service:{app}/{caller}", kind="change", app=app, fix_service=caller,
                                   why=f"{caller} times out on {target} although {target} is healthy")
                    h.require = {str(v) for v in ev.timeout_ms.values()}
                    h.tokens = text | h.require
                    return h
                h = Hypothesis(component=f"service:{app}/{target}", kind="change", app=app, fix_service=target,
                               why=f"calls to {target} fail ({reason})")
                h.tokens = text
                return h
        # No error lines of its own: slow, saturated or short of pods.
        if ev.slow_io:
            return Hypothesis(component=f"service:{app}/{svc}", kind="datastore", app=app, fix_service=svc,
                              why=f"{svc} logs slow storage I/O")
        for callee in self.graph.callees(app, svc):
            nxt = (app, callee)
            if nxt in sick and nxt not in seen:
                deeper = self.root(nxt, seen)
                if deeper is not None:
                    deeper.services.add(nxt)
                    return deeper
        h = Hypothesis(component=f"service:{app}/{svc}", kind="change", app=app, fix_service=svc,
                       why=f"{svc} is failing ({self.health[key].why if key in self.health else 'pods'})")
        h.tokens = tokens("\n".join(ev.text))
        pods = view.pods_of(app, svc)
        h.slow_burn = bool(ev.oom) or any(p.waiting or p.restarts or not p.ready for p in pods)
        if ev.oom:
            h.why += ", out of memory"
        return h
