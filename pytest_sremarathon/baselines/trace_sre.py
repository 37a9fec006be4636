"""TraceSRE: investigates the way an agent built for production does, with PromQL and traces.

Every step, for the services with new firing alerts:

1. one PromQL query at ``PROMETHEUS_URL`` ranks the services by error ratio over the last five
   minutes (``sum by (namespace, service) (rate(http_requests_total{code=~"5.."}[5m])) / sum
   by (namespace, service) (rate(http_requests_total[5m]))``);
2. for a failing service (an error-rate alert, or a ratio above :data:`FAILING`), a Jaeger
   search at ``JAEGER_URL`` for its recent erroring traces; each votes for the component of its
   deepest erroring span (a client span votes for the service or third-party API it could not
   reach), and the majority is where the failure began. For a latency alert, its recent traces
   vote for the span with the most time of its own. Anything else, or no traces: the alerting
   service itself;
3. each alert joins the open incident of its root component (``root:<component>``): the
   symptoms upstream of one cause are one incident;
4. an incident rooted at a service reverts that service's latest change made before the
   incident began (once; a refusal is noted, not retried);
5. an incident is claimed resolved once all its alerts are resolved.

A node alert (no service) is its node's incident. At most :data:`MAX_SEARCHES` trace searches a
step, the most failing services first, as each request costs think time. Its state lives on
the instance and in ``trace-sre.json`` in the workspace.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from pytest_sremarathon.agent.protocol import (
    Alert,
    Change,
    Claim,
    Environment,
    Finding,
    Observation,
    PipelineError,
    Report,
)

from .alerts import alert_service, by_start, latest_alerts
from .journal import Journal
from .observability import Jaeger, ObservabilityError, Prometheus, deepest_error, from_environment, slowest_self
from .times import utc

ERROR_RATIO = ('sum by (namespace, service) (rate(http_requests_total{code=~"5.."}[5m]))'
               ' / sum by (namespace, service) (rate(http_requests_total[5m]))')
FAILING = 0.02  # an error ratio that is a failure, not noise
MAX_SEARCHES = 3  # trace searches a step
ERROR_ALERTS = ("ServiceHighErrorRate",)
LATENCY_ALERTS = ("ServiceLatencySLOBurn",)


@dataclass
class RootIncident:
    """The alerts whose failures began at one component, until the agent claims it resolved."""

    key: str
    component: str
    alerts: list[str] = field(default_factory=list)
    evidence: str = ""  # how the component was found
    change: Optional[str] = None  # the change reverted (or tried)
    revert_attempted: bool = False
    claimed_step: Optional[int] = None

    @property
    def service(self) -> Optional[tuple[str, str]]:
        """(app, service) of a component that is a service."""
        if not self.component.startswith("service:"):
            return None
        app, _, svc = self.component[len("service:"):].partition("/")
        return app, svc


class TraceSRE:
    """See the module docstring."""

    JOURNAL = "trace-sre.json"

    def __init__(self) -> None:
        self.prometheus: Optional[Prometheus] = None
        self.jaeger: Optional[Jaeger] = None
        self.incidents: dict[str, RootIncident] = {}
        self.open: dict[str, str] = {}  # component -> key of its open incident
        self.generation: dict[str, int] = {}  # component -> incidents opened
        self.reverted: list[str] = []
        self._journal = Journal(self.JOURNAL)

    def setup(self, env: Environment) -> None:
        self.prometheus, self.jaeger = from_environment(Path(env.kubeconfig))
        self._restore(Path(env.workspace))

    # -- one step -----------------------------------------------------------------------------
    def step(self, obs: Observation) -> Report:
        if not self._journal.bound:
            self._restore(Path(obs.workspace))
            self.prometheus, self.jaeger = from_environment(Path(obs.kubeconfig))
        notes: list[str] = []
        latest = latest_alerts(obs)
        self._assign(latest, notes)
        findings, claims = [], []
        for component, key in list(self.open.items()):
            inc = self.incidents[key]
            alerts = [latest[a] for a in inc.alerts if a in latest]
            self._repair(obs, inc, alerts, notes)
            findings.append(Finding(incident=key, alerts=list(inc.alerts), component=inc.component,
                                    cause=f"change:{inc.change}" if inc.change else None,
                                    confidence=0.8 if inc.evidence.startswith("traces") else 0.4))
            if alerts and all(a.status == "resolved" for a in alerts):
                claims.append(Claim(incident=key))
                inc.claimed_step = obs.step
                del self.open[component]
                notes.append(f"{key}: all {len(alerts)} alerts resolved, claiming resolved")
        self._save()
        return Report(findings=findings, claims=claims, notes="\n".join(notes)[:20000])

    # -- localization -------------------------------------------------------------------------
    def _assign(self, latest: dict[str, Alert], notes: list[str]) -> None:
        """Localize the new firing alerts and add each to its root component's incident."""
        known = {a for inc in self.incidents.values() for a in inc.alerts}
        new = [a for a in by_start(latest) if a.id not in known and a.status == "firing"]
        if not new:
            return
        wanted: dict[tuple[str, str], str] = {}  # (app, service) -> how to localize it
        for a in new:
            where = alert_service(a)
            if where is not None:
                how = "errors" if a.name in ERROR_ALERTS else "latency" if a.name in LATENCY_ALERTS else "own"
                if wanted.get(where) != "errors":
                    wanted[where] = how
        ratios = self._error_ratios(notes) if any(h != "own" for h in wanted.values()) else {}
        roots: dict[tuple[str, str], tuple[str, str]] = {}
        searches = 0
        for where in sorted(wanted, key=lambda w: (-ratios.get(w, 0.0), w)):  # the most failing first
            app, svc = where
            if wanted[where] == "own":
                roots[where] = (f"service:{app}/{svc}", "the alerting service")
            elif searches < MAX_SEARCHES:  # the others wait for the next step
                searches += 1
                failing = wanted[where] == "errors" or ratios.get(where, 0.0) >= FAILING
                roots[where] = self._from_traces(app, svc, failing, notes)
        for a in new:
            where = alert_service(a)
            if where is not None:
                if where not in roots:
                    continue
                component, evidence = roots[where]
            elif a.labels.get("node"):
                component, evidence = f"node:{a.labels['node']}", "the alerting node"
            else:
                continue
            self._incident_for(component, evidence).alerts.append(a.id)

    def _error_ratios(self, notes: list[str]) -> dict[tuple[str, str], float]:
        if self.prometheus is None:
            return {}
        try:
            result = self.prometheus.query(ERROR_RATIO)
        except ObservabilityError as exc:
            notes.append(f"promql: {exc}")
            return {}
        ratios = {}
        for r in result:
            try:
                ratios[(r["metric"]["namespace"], r["metric"]["service"])] = float(r["value"][1])
            except (KeyError, ValueError):
                continue
        worst = sorted(((v, f"{ns}/{s}") for (ns, s), v in ratios.items() if v >= FAILING), reverse=True)
        notes.append("promql error ratios: " + json.dumps([[name, round(v, 3)] for v, name in worst[:5]]))
        return ratios

    def _from_traces(self, app: str, svc: str, failing: bool, notes: list[str]) -> tuple[str, str]:
        """The component the service's recent traces blame, and how they did."""
        own = (f"service:{app}/{svc}", "the alerting service (no traces)")
        if self.jaeger is None:
            return own
        vote: Callable[[dict[str, Any]], Optional[str]]
        try:
            if failing:
                traces = self.jaeger.traces(f"{svc}.{app}", tags=json.dumps({"error": "true"}))
                vote = deepest_error
            else:
                traces = sorted(self.jaeger.traces(f"{svc}.{app}"),
                                key=lambda t: -max((s["duration"] for s in t["spans"]), default=0))[:5]
                vote = slowest_self
        except ObservabilityError as exc:
            notes.append(f"traces of {svc}.{app}: {exc}")
            return own
        votes = Counter(c for c in (vote(t) for t in traces) if c)
        if not votes:
            return own
        component, n = min(votes.items(), key=lambda kv: (-kv[1], kv[0]))
        evidence = f"traces: {n} of {len(traces)} {'erroring' if failing else 'slowest'} traces of {svc}.{app}"
        notes.append(f"{app}/{svc}: {component} ({evidence})")
        return component, evidence

    def _incident_for(self, component: str, evidence: str) -> RootIncident:
        key = self.open.get(component)
        if key is None:
            n = self.generation.get(component, 0) + 1
            self.generation[component] = n
            key = f"root:{component}" if n == 1 else f"root:{component}#{n}"
            self.open[component] = key
            self.incidents[key] = RootIncident(key=key, component=component, evidence=evidence)
        return self.incidents[key]

    # -- repair -------------------------------------------------------------------------------
    def _repair(self, obs: Observation, inc: RootIncident, alerts: list[Alert], notes: list[str]) -> None:
        """Revert the root service's latest change made before the incident began, once."""
        target = inc.service
        if inc.revert_attempted or target is None or not alerts:
            return
        inc.revert_attempted = True
        app, svc = target
        began = min(utc(a.starts_at) for a in alerts)
        try:
            changes: list[Change] = obs.pipeline.changes(app)
        except PipelineError as exc:
            notes.append(f"{inc.key}: changes({app}) failed: {exc}")
            return
        mine = [c for c in changes if c.service == svc and utc(c.time) <= began and c.id not in self.reverted]
        if not mine:
            notes.append(f"{inc.key}: no change of {app}/{svc} before {began.isoformat()} to revert")
            return
        change = max(mine, key=lambda c: utc(c.time))
        inc.change = change.id
        try:
            revert = obs.pipeline.revert(app, change.id)
        except PipelineError as exc:
            notes.append(f"{inc.key}: revert of {change.id} refused: {exc}")
            return
        self.reverted += [change.id, revert.id]
        notes.append(f"{inc.key}: reverted {change.id} as {revert.id}")

    # -- the journal ----------------------------------------------------------------------------
    def _restore(self, workspace: Path) -> None:
        state = self._journal.load(workspace)
        if state is None:
            return
        self.incidents = {k: RootIncident(**v) for k, v in (state.get("incidents") or {}).items()}
        self.open = dict(state.get("open") or {})
        self.generation = dict(state.get("generation") or {})
        self.reverted = list(state.get("reverted") or [])

    def _save(self) -> None:
        self._journal.save({"incidents": {k: asdict(v) for k, v in self.incidents.items()}, "open": self.open,
                            "generation": self.generation, "reverted": self.reverted})
