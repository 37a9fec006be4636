"""HeuristicSRE: an on-call engineer's heuristics, automated (the step; the parts are the
sibling modules)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pytest_sremarathon.agent.protocol import Environment, Observation, Report

from ..alerts import latest_alerts
from ..journal import Journal
from ..kube_client import KubeClient, KubeError
from .cluster import View, look
from .context import StepContext
from .diagnosis import Diagnosis
from .health import assess
from .hypothesis import Hypothesis
from .logs import gather_evidence
from .repairs import Repairs
from .report import follow_up, report
from .state import HeuristicState
from .tracking import assign_alerts, reconcile, watch
from .tuning import Tuning

#: The order incidents are acted on: machines first (their symptoms mask everything else),
#: then load, then the dependencies, then the changes.
_ACT_ORDER = {"node": 0, "zone": 0, "zone-watch": 0, "surge": 1, "external": 2, "credential": 2, "datastore": 2,
              "change": 3}


class HeuristicSRE:
    """An on-call engineer's heuristics, automated.

    Every step it looks at the cluster (nodes, pods, deployments), the telemetry of every
    service that alerts, and the logs of the services that are really failing, then:

    1. **Verifies** alerts: a service counts as failing only if its telemetry or its pods say so
       (error ratio, p99 latency against its own baseline, CPU saturation, pods not ready or
       crash looping). Alerts on healthy services are noise and are grouped with nothing.
    2. **Infers the call graph** from the evidence the cluster offers: error log lines such as
       ``upstream call failed: payment: HTTP 503: …`` (an edge and a failing callee), the
       ``*_ADDR`` settings of the services' ConfigMaps, and ``ctx.call("…")`` in change diffs.
    3. **Localizes** the upstream-most failing component: machines first (nodes NotReady, under
       disk pressure or robbed of CPU by a co-tenant; a whole zone down, its DNS failing or its
       network slow), then for each failing service the end of its error chain — a callee that
       fails on its own, a name that does not resolve (the caller's configuration), an external
       API (``POST https://…: 503``), a datastore refusing credentials, a timeout shorter than a
       healthy callee needs — and finally app-wide load (a traffic surge).
    4. **Blames** a change for service faults: the app's pipeline changes before the symptoms
       began, ranked by the service they touched (the root, its callees, its callers), by how
       recent they are and by how much of their diff shows up in the error logs (a traceback's
       source line, a host name, a timeout value).
    5. **Repairs by symptom**: revert the suspect change; cordon and drain a failing node or zone;
       uncordon nodes when pods cannot be scheduled; scale out saturated deployments; restart a
       wedged datastore or the clients holding a stale credential; switch on a degraded-mode
       setting (``*_FALLBACK``) when a third-party API is down.
    6. **Checks** that the repair worked: a service fault still failing a while after a revert
       gets the next suspect change; a drain is repeated while pods remain on the node.
    7. **Claims** an incident resolved only after it acted on it and the failure has been gone for
       two consecutive steps with every alert of the incident resolved.

    One incident per localized component (``service:<app>/<svc>``, ``node:<n>``, ``zone:<z>``,
    ``external:<name>``); its finding lists the alerts of the services it explains. Firing
    alerts that no diagnosis explains are grouped per service (``watch:<app>/<svc>``) and
    reported, never acted on or claimed. Incidents are alert-driven: a failure nobody was paged
    for is watched, not touched.

    The thresholds are :attr:`TUNING` (a subclass may set its own). Its memory
    (:class:`~.state.HeuristicState`) lives on the instance and in ``heuristic-sre.json`` in
    the workspace, so a restarted process carries on where the last one stopped.
    """

    JOURNAL = "heuristic-sre.json"
    TUNING = Tuning()

    def __init__(self) -> None:
        self.state = HeuristicState()
        self._journal = Journal(self.JOURNAL)
        self._kube: Optional[KubeClient] = None
        self._apps: list[str] = []

    # -- contract ---------------------------------------------------------------------------
    def setup(self, env: Environment) -> None:
        self._apps = list(env.apps)
        self._restore(Path(env.workspace))

    def _restore(self, workspace: Path) -> None:
        state = self._journal.load(workspace)
        if state is not None:
            self.state = HeuristicState.from_json(state)

    def step(self, obs: Observation) -> Report:
        if not self._journal.bound:
            self._restore(Path(obs.workspace))
        if self._kube is None:
            self._kube = KubeClient(Path(obs.kubeconfig))
        ctx = StepContext(obs=obs, state=self.state, tuning=self.TUNING, apps=self._apps, kube=self._kube)
        latest = latest_alerts(obs)
        try:
            view = look(self._kube, self._apps)
        except KubeError as exc:
            ctx.notes.append(f"cannot read the cluster: {exc}")
            return report(ctx, latest)
        if not self._apps:
            self._apps = ctx.apps = sorted(view.services)
        self._learn_config_edges(view)
        health = assess(obs, view, latest, self.state, self.TUNING)
        sick = {k for k, h in health.items() if h.sick}
        evidence = {k: gather_evidence(self._kube, view, k, self.state.graph, self.TUNING.log_window)
                    for k in sorted(sick)}
        hypotheses = Diagnosis(ctx, view, health, sick, evidence).hypotheses()
        present = reconcile(ctx, hypotheses, latest, view)
        assign_alerts(ctx, latest, {present[k]: hypotheses[present[k]] for k in present}, view)
        watch(ctx, latest)
        repairs = Repairs(ctx, view, health)
        for key in self._act_order(present, hypotheses):
            repairs.act(self.state.incidents[key], hypotheses[present[key]])
        follow_up(ctx, health, present)
        result = report(ctx, latest)
        self._journal.save(self.state.to_json())
        return result

    # -- internals --------------------------------------------------------------------------
    def _learn_config_edges(self, view: View) -> None:
        """``*_ADDR: <service>`` settings in an app's ConfigMaps are call edges (read once per app)."""
        assert self._kube is not None
        done = self.state.config_edges_for
        for app in self._apps:
            if app in done:
                continue
            done.append(app)
            try:
                maps = self._kube.configmaps(app)
            except KubeError:
                continue
            self.state.graph.learn_config(app, maps, view.config_owners(app), set(view.services.get(app, [])))

    @staticmethod
    def _act_order(present: dict[str, str], hyps: dict[str, Hypothesis]) -> list[str]:
        return sorted(present, key=lambda k: (_ACT_ORDER.get(hyps[present[k]].kind, 4), k))
