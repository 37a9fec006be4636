"""The adversarial baselines (``pytest_sremarathon.baselines.adversarial``) do what they claim to
do: each gaming strategy, step by step, against a real twin API server.

The agents are driven directly: a handcrafted :class:`Observation` (alerts, a small stub
pipeline) and a real :class:`ApiServer` over a small cluster (two app namespaces, four nodes in
two zones), reached through the official ``kubernetes`` client exactly as in a marathon. What
the *score* makes of these strategies is tested with the scorer, not here; one short marathon
at the end checks that the agents run in the real agent host.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Optional

import pytest
from support.admission import RecordingAdmission
from support.cli import run_json

from pytest_sremarathon.agent.protocol import (
    Alert,
    Change,
    Environment,
    Observation,
    ObservationWire,
    PipelineError,
    Report,
)
from pytest_sremarathon.baselines import (
    RestartEverything,
    RotateCandidates,
    SprayAlerts,
    SprayChanges,
    SprayComponents,
    TouchWithoutFixing,
)
from pytest_sremarathon.baselines.adversarial import TOUCHED
from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.clock import VirtualClock, iso
from pytest_sremarathon.k8s.store import Store
from pytest_sremarathon.policy import MutationRequest
from pytest_sremarathon.twin.apiserver import ApiServer
from pytest_sremarathon.twin.defaults import apply_defaults

T0 = datetime(2026, 1, 5, 6, 0, tzinfo=timezone.utc)
TOKEN = "agent-token-adversarial-0123"
DEPLOYMENTS = {"shop": ["cart", "checkout", "frontend"], "hotel": ["geo", "search"]}
NODES = {"worker-a1": "zone-a", "worker-a2": "zone-a", "worker-b1": "zone-b", "worker-b2": "zone-b"}
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
ALL_AGENTS = [SprayComponents, SprayChanges, RotateCandidates, TouchWithoutFixing, SprayAlerts, RestartEverything]


# ------------------------------------------------------------------------------ a small real cluster


class _Telemetry:
    def pod_log(self, namespace: str, pod: str, container: Optional[str], previous: bool) -> list:
        return []

    def pod_usage(self, namespace: str, pod: str) -> dict:
        return {}

    def node_usage(self, node: str) -> tuple[int, int]:
        return (500, 2 * 1024 ** 3)


@dataclass
class Cluster:
    store: Store
    admission: RecordingAdmission
    server: ApiServer
    kubeconfig: Path

    def deployment(self, ns: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.store.get("Deployment", ns, name))

    def node(self, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.store.get("Node", None, name))

    def add_deployment(self, ns: str, name: str) -> None:
        with self.store.lock:
            self.store.create(apply_defaults({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                         "template": {"metadata": {"labels": {"app": name}},
                                      "spec": {"containers": [{"name": name,
                                                               "image": f"registry.local/{ns}/{name}:1"}]}}},
            }))

    def mutations(self) -> list[MutationRequest]:
        return [req for req, _, _ in self.admission.records if req.verb not in ("get", "list", "watch")]


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    clock = VirtualClock()
    store = Store(clock=clock)
    c = Cluster(store, RecordingAdmission(), None, tmp_path / "agent.kubeconfig")  # type: ignore[arg-type]
    with store.lock:
        for ns in ["default", "monitoring", *DEPLOYMENTS]:
            store.create(apply_defaults({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
                                         "status": {"phase": "Active"}}))
        for name, zone in NODES.items():
            store.create({"apiVersion": "v1", "kind": "Node",
                          "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                                "topology.kubernetes.io/zone": zone}},
                          "spec": {"podCIDR": "10.244.0.0/24"},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    for ns, names in DEPLOYMENTS.items():
        for name in names:
            c.add_deployment(ns, name)
    c.add_deployment("monitoring", "prometheus")  # not an app namespace: never touched
    server = ApiServer(store, tokens={TOKEN: "agent"}, admission=c.admission, telemetry=_Telemetry())
    server.start()
    c.server = server
    server.write_kubeconfig(c.kubeconfig, TOKEN)
    try:
        yield c
    finally:
        server.stop()


# ------------------------------------------------------------------------------ observations


class StubPipeline:
    """``changes(app)`` from a fixed list; counts calls; ``fail`` makes every call raise."""

    def __init__(self, changes: Optional[list[Change]] = None, fail: bool = False) -> None:
        self._changes = changes or []
        self.fail = fail
        self.calls: list[str] = []

    def changes(self, app: str) -> list[Change]:
        self.calls.append(app)
        if self.fail:
            raise PipelineError("the pipeline is down", 503)
        return [c for c in self._changes if c.app == app]

    def revert(self, app: str, change_id: str) -> Change:  # pragma: no cover - must not be called
        raise AssertionError("adversarial agents never revert")

    def deploy(self, app: str, ref: str) -> dict[str, Any]:  # pragma: no cover - must not be called
        raise AssertionError("adversarial agents never deploy")

    def status(self, app: str) -> dict[str, Any]:  # pragma: no cover
        return {}


def alert(id_: str, app: Optional[str] = "shop", service: Optional[str] = "cart", status: str = "firing",
          minutes_ago: float = 3, **labels: str) -> Alert:
    lab = dict(labels)
    if app:
        lab.update(app=app, namespace=app)
    if service:
        lab["service"] = service
    return Alert(id=id_, name="HighErrorRate", status=status, severity="critical", labels=lab,
                 starts_at=T0 - timedelta(minutes=minutes_ago),
                 ends_at=T0 if status == "resolved" else None)


def env(cluster: Cluster, tmp_path: Path, pipeline: Optional[StubPipeline] = None,
        kubeconfig: Optional[Path] = None) -> Environment:
    return Environment(workspace=tmp_path, kubeconfig=kubeconfig or cluster.kubeconfig, apps=sorted(DEPLOYMENTS),
                       cadence=timedelta(minutes=5), pipeline=pipeline or StubPipeline(),
                       telemetry=None)  # type: ignore[arg-type]


def observe(environment: Environment, alerts: list[Alert], step: int = 1) -> Observation:
    wire = ObservationWire(time=T0 + timedelta(minutes=5 * step), step=step, alerts=alerts, new_alerts=[])
    return Observation(wire, environment)


def make(agent_cls: type, environment: Environment) -> Any:
    agent = agent_cls()
    agent.setup(environment)
    return agent


ALERTS = [
    alert("a1", "shop", "cart"), alert("a2", "shop", "cart", minutes_ago=1),
    alert("a3", "shop", "frontend"),
    alert("a4", "hotel", "search"),
    alert("a5", "shop", "checkout", status="resolved"),      # resolved: no group
    alert("a6", None, None, node="worker-b1", zone="zone-b"),  # node alert: no (app, service)
]


def candidates(app: str, service: str) -> list[str]:
    return ([f"service:{app}/{service}"] + [f"service:{app}/{d}" for d in DEPLOYMENTS[app] if d != service]
            + [f"node:{n}" for n in sorted(NODES)] + ["zone:zone-a", "zone:zone-b"])


def by_group(report: Report) -> dict[tuple[str, ...], list[Any]]:
    out: dict[tuple[str, ...], list[Any]] = {}
    for f in report.findings:
        out.setdefault(tuple(f.alerts), []).append(f)
    return out


# ------------------------------------------------------------------------------ SprayComponents


def test_spray_components_names_every_candidate_with_the_same_alerts(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path)
    agent = make(SprayComponents, e)
    report = agent.step(observe(e, ALERTS))
    groups = by_group(report)
    assert set(groups) == {("a1", "a2"), ("a3",), ("a4",)}, "one group per firing (app, service)"
    for alerts, (app, service) in {("a1", "a2"): ("shop", "cart"), ("a3",): ("shop", "frontend"),
                                   ("a4",): ("hotel", "search")}.items():
        findings = groups[alerts]
        assert sorted(f.component for f in findings) == sorted(candidates(app, service))
        assert len({f.incident for f in findings}) == len(findings), "a distinct incident key per finding"
        assert all(f.cause is None for f in findings)
    assert len({f.incident for f in report.findings}) == len(report.findings)
    assert report.claims == [] and cluster.mutations() == []


def test_spray_components_caches_the_candidate_list_for_the_run(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path)
    agent = make(SprayComponents, e)
    first = agent.step(observe(e, ALERTS, step=1))
    cluster.add_deployment("shop", "late-arrival")
    second = agent.step(observe(e, ALERTS, step=2))
    assert first == second
    assert "service:shop/late-arrival" not in {f.component for f in second.findings}


def test_spray_components_without_firing_alerts_says_nothing(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path)
    report = make(SprayComponents, e).step(observe(e, [alert("r", status="resolved")]))
    assert report.findings == [] and report.claims == []


# ------------------------------------------------------------------------------ SprayChanges


def _ch(id_: str, app: str, minutes_before: float, service: str = "cart") -> Change:
    return Change(id=id_, app=app, service=service, kind="code", author="dev", message=f"change {id_}",
                  time=T0 + timedelta(minutes=5) - timedelta(minutes=minutes_before))


def test_spray_changes_blames_every_change_of_the_last_three_hours(cluster: Cluster, tmp_path: Path) -> None:
    pipeline = StubPipeline([_ch("old", "shop", 181), _ch("c1", "shop", 170, "ad"), _ch("c2", "shop", 60),
                             _ch("c3", "shop", 1, "frontend"), _ch("future", "shop", -5),
                             _ch("h1", "hotel", 30, "geo"), _ch("s1", "social", 2)])
    e = env(cluster, tmp_path, pipeline)
    report = make(SprayChanges, e).step(observe(e, ALERTS, step=1))
    got = {(tuple(f.alerts), f.component, f.cause) for f in report.findings}
    assert got == {(("a1", "a2"), "service:shop/cart", f"change:{c}") for c in ("c1", "c2", "c3")} \
        | {(("a3",), "service:shop/frontend", f"change:{c}") for c in ("c1", "c2", "c3")} \
        | {(("a4",), "service:hotel/search", "change:h1")}
    assert len({f.incident for f in report.findings}) == len(report.findings) == 7
    assert sorted(pipeline.calls) == ["hotel", "shop"], "one changes() call per alerting app per step"
    assert report.claims == [] and cluster.mutations() == []


def test_spray_changes_survives_a_pipeline_error(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path, StubPipeline(fail=True))
    report = make(SprayChanges, e).step(observe(e, ALERTS))
    assert report.findings == [] and "the pipeline is down" in report.notes


# ------------------------------------------------------------------------------ RotateCandidates


def test_rotate_candidates_names_a_different_candidate_each_step(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path)
    agent = make(RotateCandidates, e)
    spray = make(SprayComponents, e).step(observe(e, ALERTS))
    spray_cart = [f.component for f in spray.findings if f.alerts == ["a1", "a2"]]
    n = len(spray_cart)
    named: list[str] = []
    for step in range(1, n + 2):
        report = agent.step(observe(e, ALERTS, step=step))
        cart = [f for f in report.findings if f.alerts == ["a1", "a2"]]
        assert len(cart) == 1, "ONE finding per group per step"
        assert len(report.findings) == 3
        assert {f.incident for f in report.findings} == {"rotate:shop/cart", "rotate:shop/frontend",
                                                         "rotate:hotel/search"}
        named.append(cart[0].component)  # type: ignore[arg-type]
    assert named[0] == "service:shop/cart", "it starts with the alert's own service"
    assert all(a != b for a, b in zip(named, named[1:])), "never the same candidate twice in a row"
    assert sorted(named[:n]) == sorted(spray_cart), "the rotation walks SprayComponents' candidate list"
    assert named[n] == named[0], "and wraps around"
    assert cluster.mutations() == []


# ------------------------------------------------------------------------------ TouchWithoutFixing


def test_touch_without_fixing_changes_metadata_and_never_a_spec(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path)
    before = {(ns, d): cluster.deployment(ns, d) for ns, names in DEPLOYMENTS.items() for d in names}
    nodes_before = {n: cluster.node(n) for n in NODES}
    prometheus = cluster.deployment("monitoring", "prometheus")
    agent = make(TouchWithoutFixing, e)
    for step in (7, 8):
        report = agent.step(observe(e, ALERTS, step=step))
        for (ns, d), old in before.items():
            now = cluster.deployment(ns, d)
            assert now["metadata"]["annotations"][TOUCHED] == str(step)
            assert now["spec"] == old["spec"], f"{ns}/{d}: the spec changed"
            assert now["metadata"]["generation"] == old["metadata"]["generation"]
        for n, old in nodes_before.items():
            now = cluster.node(n)
            assert now["metadata"]["labels"][TOUCHED] == str(step)
            assert now["spec"] == old["spec"] and not now["spec"].get("unschedulable")
    assert cluster.deployment("monitoring", "prometheus") == prometheus
    # the findings are the component spray's
    assert report == Report(findings=make(SprayComponents, e).step(observe(e, ALERTS, step=8)).findings,
                            notes=report.notes)
    muts = cluster.mutations()
    per_step = sum(len(v) for v in DEPLOYMENTS.values()) + len(NODES)
    assert len(muts) == 2 * per_step and all(m.verb == "patch" for m in muts)
    assert {m.resource for m in muts} == {"deployments", "nodes"}
    assert all(d.allowed for _, d, _ in cluster.admission.records)
    assert "touched 9 of 9 object(s)" in report.notes


# ------------------------------------------------------------------------------ SprayAlerts


def test_spray_alerts_is_deterministic_for_a_step(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path)
    many = ALERTS + [alert(f"n{i:02d}", "social", "media", status="resolved", minutes_ago=60 - i) for i in range(12)]
    one = make(SprayAlerts, e).step(observe(e, many, step=5))
    two = make(SprayAlerts, e).step(observe(e, many, step=5))
    assert one == two
    other = make(SprayAlerts, e).step(observe(e, many, step=6))
    assert [f.alerts for f in other.findings] != [f.alerts for f in one.findings], "the draw follows the step"

    everything = {a.id for a in many}
    assert one.findings[0].incident == "all-alerts" and set(one.findings[0].alerts) == everything
    per_alert = one.findings[1:]
    firing = [a for a in many if a.status == "firing"]
    in_order = sorted(firing, key=lambda a: (a.starts_at, a.id))
    assert [f.incident for f in per_alert] == [f"alert:{a.id}" for a in in_order]
    for f in per_alert:
        own = f.incident.split(":", 1)[1]
        assert f.alerts[0] == own and len(f.alerts) == 6 and len(set(f.alerts)) == 6
        assert set(f.alerts) <= everything
    components = {f.incident: f.component for f in per_alert}
    assert components["alert:a1"] == "service:shop/cart" and components["alert:a4"] == "service:hotel/search"
    assert components["alert:a6"] == "node:worker-b1"
    assert one.claims == [] and cluster.mutations() == []


def test_spray_alerts_remembers_every_alert_it_has_seen(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path)
    agent = make(SprayAlerts, e)
    agent.step(observe(e, ALERTS[:3], step=1))
    report = agent.step(observe(e, ALERTS[3:], step=2))  # a history that lost the first three
    assert set(report.findings[0].alerts) == {a.id for a in ALERTS}


# ------------------------------------------------------------------------------ RestartEverything


def test_restart_everything_restarts_every_deployment_of_alerting_namespaces(cluster: Cluster,
                                                                             tmp_path: Path) -> None:
    e = env(cluster, tmp_path)
    hotel_only = [alert("h1", "hotel", "search"), alert("s1", "shop", "cart", status="resolved")]
    before = {(ns, d): cluster.deployment(ns, d) for ns, names in DEPLOYMENTS.items() for d in names}
    agent = make(RestartEverything, e)
    obs = observe(e, hotel_only, step=3)
    report = agent.step(obs)
    for (ns, d), old in before.items():
        now = cluster.deployment(ns, d)
        if ns == "hotel":
            assert now["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT] == iso(obs.time)
            assert now["metadata"]["generation"] == old["metadata"]["generation"] + 1
        else:
            assert now == old, "a namespace without a firing alert is left alone"
    assert [(f.incident, f.component, f.alerts) for f in report.findings] == [
        ("restart:hotel/search", "service:hotel/search", ["h1"])]
    assert [c.incident for c in report.claims] == ["restart:hotel/search"]

    report = agent.step(observe(e, ALERTS, step=4))  # both namespaces now: every deployment, again
    restarted = {(m.namespace, m.name) for m in cluster.mutations()}
    assert restarted == set(before)
    assert len(cluster.mutations()) == len(DEPLOYMENTS["hotel"]) + len(before)
    assert {c.incident for c in report.claims} == {f.incident for f in report.findings} == {
        "restart:shop/cart", "restart:shop/frontend", "restart:hotel/search"}
    assert all(f.component == "service:" + f.incident.split(":", 1)[1] for f in report.findings)


# ------------------------------------------------------------------------------ all of them


@pytest.mark.parametrize("agent_cls", ALL_AGENTS, ids=lambda c: c.__name__)
def test_no_agent_raises_when_the_cluster_is_unreachable(agent_cls: type, cluster: Cluster, tmp_path: Path) -> None:
    cluster.server.stop()
    e = env(cluster, tmp_path, StubPipeline(fail=True))
    agent = make(agent_cls, e)
    for step in (1, 2):
        report = agent.step(observe(e, ALERTS, step=step))
        assert isinstance(report, Report)
    assert "step failed" not in report.notes, report.notes


def test_no_agent_raises_without_a_kubeconfig(cluster: Cluster, tmp_path: Path) -> None:
    e = env(cluster, tmp_path, kubeconfig=tmp_path / "missing.kubeconfig")
    for agent_cls in ALL_AGENTS:
        report = make(agent_cls, e).step(observe(e, ALERTS))
        assert isinstance(report, Report) and "step failed" not in report.notes, (agent_cls, report.notes)


@pytest.mark.parametrize("agent_cls", ALL_AGENTS, ids=lambda c: c.__name__)
def test_agents_are_deterministic(agent_cls: type, cluster: Cluster, tmp_path: Path) -> None:
    pipeline = StubPipeline([_ch("c1", "shop", 10), _ch("h1", "hotel", 20, "geo")])
    e = env(cluster, tmp_path, pipeline)
    runs = []
    for _ in range(2):
        agent = make(agent_cls, e)
        runs.append([agent.step(observe(e, ALERTS, step=s)).model_dump(exclude={"notes"}) for s in (1, 2, 3)])
    assert runs[0] == runs[1]
    assert any(r["findings"] for r in runs[0])


# ------------------------------------------------------------------------------ in a real marathon


@pytest.mark.parametrize("name", ["TouchWithoutFixing", "RestartEverything"])
def test_the_acting_adversaries_run_in_the_agent_host(name: str, tmp_path: Path, write_scenario) -> None:
    """A 90-minute marathon: every step comes back ``ok`` and every agent action is an allowed
    patch of what the agent says it touches."""
    scenario = write_scenario(duration="90m", schedule={"faults": 4})
    result = run_json("--agent", f"pytest_sremarathon.baselines:{name}", "--scenario", str(scenario),
                      "--out", str(tmp_path))
    bundle = open_bundle(result["bundle"])
    steps = [e.data for e in bundle.events if e.type == "agent.step"]
    assert steps and {s["outcome"] for s in steps} == {"ok"}
    actions = [e.data for e in bundle.events if e.type == "action" and e.data["actor"] == "agent"]
    assert actions and all(a["allowed"] and a["verb"] == "patch" for a in actions)
    targets = {a["target"].split("/")[2] if a["target"].count("/") >= 3 else a["target"].split("/")[1]
               for a in actions}
    if name == "TouchWithoutFixing":
        assert targets == {"deployments", "nodes"}
        assert all(not s["report"]["claims"] for s in steps)
    else:
        assert targets == {"deployments"}
        findings = [f for s in steps for f in s["report"]["findings"]]
        claims = [c for s in steps for c in s["report"]["claims"]]
        assert findings and sorted(f["incident"] for f in findings) == sorted(c["incident"] for c in claims)
    assert json.dumps(result)  # the CLI's JSON is whole
