"""Incidents from hypotheses: which to open, which alerts belong to which, and the watch
groups for firing alerts nothing explains yet."""

from __future__ import annotations

from datetime import timedelta

from pytest_sremarathon.agent.protocol import Alert

from ..alerts import alert_service, by_start
from ..times import utc, whole_seconds
from .cluster import View
from .context import StepContext
from .hypothesis import Hypothesis
from .incident import Incident, ServiceKey, WatchGroup

#: How specific a hypothesis is: a more specific one's claim on a service's alerts wins.
_SPECIFICITY = {"change": 0, "credential": 0, "datastore": 0, "external": 1, "surge": 2, "node": 3, "zone": 4,
                "zone-watch": 4}


def alerting(ctx: StepContext, h: Hypothesis, latest: dict[str, Alert], view: View) -> bool:
    """Is some alert firing on what the hypothesis explains? (Incidents are alert-driven: a
    failure nobody was paged for is watched, not acted on.)"""
    services = set(h.services)
    if h.app and h.fix_service:
        services |= {(h.app, h.fix_service)} | {(h.app, c) for c in ctx.state.graph.transitive_callers(h.app, h.fix_service)}
    zones = {view.nodes[n].zone for n in h.nodes if n in view.nodes}
    for a in latest.values():
        if a.status != "firing":
            continue
        svc = alert_service(a)
        if svc is not None and svc in services:
            return True
        if svc is None and (a.labels.get("node") in h.nodes or (a.labels.get("zone") and a.labels["zone"] in zones
                                                                 and not a.labels.get("node"))):
            return True
    return False


def reconcile(ctx: StepContext, hyps: dict[str, Hypothesis], latest: dict[str, Alert], view: View) -> dict[str, str]:
    """Open an incident per new, alert-backed component; returns incident key -> component
    present now."""
    state, now = ctx.state, whole_seconds(ctx.obs.time)
    present: dict[str, str] = {}
    for comp in sorted(hyps):
        h = hyps[comp]
        old = state.open_incident(comp)
        if old is not None and old.kind != h.kind and "zone" not in (h.kind + old.kind):
            # Same component, a different failure (a surge after a bad config, say): a new incident.
            old.close(now)
            del state.open[comp]
            old = None
        if old is None and not alerting(ctx, h, latest, view):
            continue
        inc = old
        if inc is None:
            n = state.generation.get(comp, 0) + 1
            state.generation[comp] = n
            key = comp if n == 1 else f"{comp}#{n}"
            state.open[comp] = key
            inc = state.incidents[key] = Incident(key=key, component=comp, kind=h.kind, app=h.app, opened=now,
                                                  why=h.why)
            ctx.notes.append(f"{key}: opened ({h.why})")
        inc.kind = h.kind
        inc.why = h.why
        inc.absent = 0
        inc.nodes = sorted(set(inc.nodes) | set(h.nodes))
        inc.services = sorted(set(inc.services) | h.services)
        if h.kind in ("node", "zone") and not inc.hosted:
            inc.hosted = sorted((app, svc) for app, svc in (c.split("/", 1) for c in h.clients))
        present[inc.key] = comp
    return present


def assign_alerts(ctx: StepContext, latest: dict[str, Alert], hyps: dict[str, Hypothesis], view: View) -> None:
    """Each alert belongs to the incident whose failure explains it: a service's alerts to
    the hypothesis covering that service (the most specific one), else to an open incident
    whose root it calls; a node's alerts to the machine incident of that node. Firing
    alerts follow a re-diagnosis; resolved ones stay where they are."""
    state, graph = ctx.state, ctx.state.graph
    owner = state.owner
    # Later layers win: open incidents that are not failing now, then the callers of what is
    # failing now, then the services and nodes the hypotheses explain.
    layers: list[tuple[dict[ServiceKey, str], dict[str, str]]] = [({}, {}), ({}, {}), ({}, {})]
    for comp, key in sorted(state.open.items()):
        if comp in hyps:
            continue
        inc = state.incidents[key]
        services, nodes = layers[0]
        root = comp.split("/", 1)[1] if comp.startswith("service:") and "/" in comp else None
        for explained in inc.services:
            services.setdefault(explained, key)
        if inc.app and root:
            for c in sorted(graph.transitive_callers(inc.app, root) | {root}):
                services.setdefault((inc.app, c), key)
        for n in inc.nodes:
            nodes.setdefault(n, key)
    for comp in sorted(hyps, key=lambda c: (_SPECIFICITY.get(hyps[c].kind, 5), c), reverse=True):
        h = hyps[comp]
        key = state.open[comp]
        if h.app and h.fix_service:
            for c in sorted(graph.transitive_callers(h.app, h.fix_service)):
                layers[1][0][(h.app, c)] = key
        for explained in h.services:
            layers[2][0][explained] = key
        for n in h.nodes:
            layers[2][1][n] = key
    by_service: dict[ServiceKey, str] = {}
    by_node: dict[str, str] = {}
    for services, nodes in layers:
        by_service.update(services)
        by_node.update(nodes)
    for alert in by_start(latest):
        current = owner.get(alert.id)
        if current is not None and state.incidents[current].closed:
            if alert.status == "firing":
                del owner[alert.id]  # outlived its incident: up for grabs again
            current = None if alert.id not in owner else current
        if current is not None and alert.status != "firing":
            continue
        target = None
        svc = alert_service(alert)
        if svc is not None:
            target = by_service.get(svc)
        elif alert.labels.get("node"):
            target = by_node.get(alert.labels["node"])
        elif alert.labels.get("zone"):
            target = next((k for n, k in sorted(by_node.items())
                           if n in view.nodes and view.nodes[n].zone == alert.labels["zone"]), None)
        if target is None or target == current:
            continue
        inc = state.incidents[target]
        opened = inc.opened
        on_root = svc is not None and inc.component == f"service:{svc[0]}/{svc[1]}"
        if utc(alert.starts_at) < opened - timedelta(minutes=30) and not (on_root and alert.status == "firing"):
            continue  # older than the failure: another story (unless the root itself still fires)
        if alert.status != "firing" and current is None and utc(alert.starts_at) < opened - timedelta(minutes=10):
            continue
        if current is not None:
            old = state.incidents[current].alerts
            if alert.id in old:
                old.remove(alert.id)
        owner[alert.id] = target
        inc.alerts.append(alert.id)
        start = whole_seconds(alert.starts_at)
        if inc.onset is None or start < inc.onset:
            inc.onset = start


def watch(ctx: StepContext, latest: dict[str, Alert]) -> None:
    """Alerts on a service that no diagnosis explains (yet) are grouped per service, as a
    pager groups them, so that nothing firing goes unreported; these incidents are watched
    and reported, never acted on or claimed."""
    groups, owner = ctx.state.watch, ctx.state.owner
    for group in list(groups.values()):  # drop alerts a diagnosis has taken over
        group.alerts = [a for a in group.alerts if a not in owner]
        if group.open and group.alerts and all(latest[a].status != "firing" for a in group.alerts if a in latest):
            group.open = False
    for alert in by_start(latest):
        svc = alert_service(alert)
        if svc is None or alert.id in owner or alert.status != "firing":
            continue
        svc_key = f"{svc[0]}/{svc[1]}"
        w = groups.get(svc_key)
        if w is None or not w.open:
            n = (w.n if w is not None else 0) + 1
            w = groups[svc_key] = WatchGroup(key=f"watch:{svc_key}" if n == 1 else f"watch:{svc_key}#{n}", n=n)
        if alert.id not in w.alerts:
            w.alerts.append(alert.id)
