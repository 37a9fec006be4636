"""Machine faults: nodes NotReady, under disk pressure or robbed of CPU, and zones that are down,
cannot resolve names or time out."""

from __future__ import annotations

from ..kube_client import KubeError
from .cluster import View, cpu_millicores
from .context import StepContext
from .hypothesis import Hypothesis
from .incident import ServiceKey
from .logs import Evidence


class MachineDiagnosis:
    """The machine hypotheses of one step, and which failing services each explains."""

    def __init__(self, ctx: StepContext, view: View, sick: set[ServiceKey],
                 evidence: dict[ServiceKey, Evidence]) -> None:
        self.ctx = ctx
        self.view = view
        self.sick = sick
        self.evidence = evidence

    def hypotheses(self) -> list[Hypothesis]:
        view, evidence = self.view, self.evidence
        out: list[Hypothesis] = []
        down = sorted(n for n, d in view.nodes.items() if not d.ready)
        zones = sorted({d.zone for d in view.nodes.values() if d.zone})
        done: set[str] = set()
        for zone in zones:
            nodes = view.zone_nodes(zone)
            if len(nodes) > 1 and all(n in down for n in nodes):
                out.append(self._hypothesis(f"zone:{zone}", "zone", nodes, f"every node of {zone} is NotReady"))
                done |= set(nodes)
        for node in down:
            if node not in done:
                out.append(self._hypothesis(f"node:{node}", "node", [node], f"{node} is NotReady"))
                done.add(node)
        for node, d in sorted(view.nodes.items()):
            if node not in done and d.disk:
                out.append(self._hypothesis(f"node:{node}", "node", [node], f"{node} reports DiskPressure"))
                done.add(node)
        for node, why in self._robbed_nodes():
            if node not in done:
                out.append(self._hypothesis(f"node:{node}", "node", [node], why))
                done.add(node)
        # A zone whose pods cannot resolve names, or whose pods alone time out: judged per
        # service, comparing its pods in different zones (a zone that holds every pod because
        # the others are cordoned proves nothing).
        clean = not out and all(d.ready and not d.cordoned for d in view.nodes.values())
        for what in ("dns", "timeout"):
            if what == "timeout" and not clean:
                continue
            by_zone: dict[str, set[ServiceKey]] = {}
            lines: dict[str, int] = {}
            for key, ev in evidence.items():
                counts = ev.dns_zones if what == "dns" else ev.timeout_zones
                if len(ev.sampled_zones) < 2:
                    continue
                hit = [z for z in ev.sampled_zones if counts.get(z)]
                if len(hit) == 1:
                    by_zone.setdefault(hit[0], set()).add(key)
                    lines[hit[0]] = lines.get(hit[0], 0) + counts[hit[0]]
            if not by_zone:
                continue
            zone, services = max(sorted(by_zone.items()), key=lambda kv: len(kv[1]))
            if f"zone:{zone}" in {h.component for h in out} or any(view.nodes[x].zone == zone for x in done):
                continue
            enough = lines[zone] >= 2 if what == "dns" else len(services) >= 3 and lines[zone] >= 6
            if what == "timeout" and enough:  # timeouts only matter if the callees look healthy
                enough = not any(self._callee_failing(k) for k in services)
            if enough:
                label = "DNS lookups time out" if what == "dns" else "calls time out"
                h = self._hypothesis(f"zone:{zone}", "zone", view.zone_nodes(zone),
                                     f"in {zone} {label} for {len(services)} service(s) whose pods "
                                     f"elsewhere are fine")
                h.services = services & self.sick  # what the zone's evidence covers, not all it hosts
                if what == "timeout":
                    # Slow or cut-off networks show only as timeouts: localize, but do not move
                    # half the cluster on evidence this indirect.
                    h.kind = "zone-watch"
                out.append(h)
        return out

    def _callee_failing(self, key: ServiceKey) -> bool:
        """Do the service's timeouts point at a failing callee that raises its own exceptions?"""
        app, _ = key
        ev = self.evidence.get(key)
        if ev is None:
            return False
        for (names, reason), _n in ev.chains.items():
            if reason == "timeout" and names and (app, names[-1]) in self.sick and (app, names[-1]) != key:
                callee_ev = self.evidence.get((app, names[-1]))
                if callee_ev is not None and callee_ev.own:
                    return True
        return False

    def _robbed_nodes(self) -> list[tuple[str, str]]:
        """Nodes whose CPU is used up by something other than their pods (a noisy neighbour)."""
        kube = self.ctx.cluster
        try:
            nodes = kube.node_metrics()
            pods = kube.pod_metrics()
        except KubeError:
            return []
        where = {(p.ns, p.name): p.node for p in self.view.pods}
        pod_cpu: dict[str, float] = {}
        for pm in pods:
            node = where.get((pm["metadata"].get("namespace"), pm["metadata"].get("name")))
            if node:
                pod_cpu[node] = pod_cpu.get(node, 0.0) + sum(cpu_millicores((c.get("usage") or {}).get("cpu"))
                                                             for c in pm.get("containers") or [])
        out = []
        for nm in nodes:
            name = nm["metadata"]["name"]
            info = self.view.nodes.get(name)
            if not info or not info.ready or not info.cpu:
                continue
            used = cpu_millicores((nm.get("usage") or {}).get("cpu"))
            steal = used - pod_cpu.get(name, 0.0)
            if used >= 0.85 * info.cpu and steal >= 0.5 * info.cpu:
                out.append((name, f"{name} CPU at {used / info.cpu:.0%}, {steal:.0f}m of it outside its pods"))
        return out

    def _hypothesis(self, component: str, kind: str, nodes: list[str], why: str) -> Hypothesis:
        """What failing machines explain: the failing services they host (or hosted when the
        incident opened), and failing services whose errors are timeouts or unavailability of
        those — never a service that raises its own exceptions."""
        view = self.view
        h = Hypothesis(component=component, kind=kind, app=None, nodes=nodes, why=why)
        hosted = {(p.ns, p.service) for p in view.pods_on(nodes)}
        prior = self.ctx.state.open_incident(component)
        if prior is not None:  # what the machines hosted when the incident opened
            hosted |= set(prior.hosted)
        explained = set()
        for key in self.sick:
            ev = self.evidence.get(key) or Evidence()
            if ev.own and ev.own >= ev.chain_total:
                continue  # its own code fails
            app = key[0]
            if ev.chains:
                names, reason = ev.main_chain()
                if reason in ("timeout", "unavailable") and (key in hosted or (names and (app, names[-1]) in hosted)):
                    explained.add(key)
                continue  # errors that point somewhere else (a credential, a name, an API, a bug)
            if key in hosted:
                bad = [p for p in view.pods_of(*key) if not p.ready or p.waiting]
                if bad and not all(p.node in nodes for p in bad):
                    continue  # its unhealthy pods are elsewhere (or unscheduled): its own trouble
                explained.add(key)
        h.services = explained
        h.clients = sorted(f"{a}/{s}" for a, s in hosted)
        return h
