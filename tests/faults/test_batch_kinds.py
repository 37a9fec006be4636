"""The batch fault kinds (faults/batch.py) on a real twin running the hotel through its real
pipeline: ``cronjob-failing`` (rate-refresh-source-uri) and ``cronjob-piling``
(rate-refresh-full-reload). For each: the documented effects show in what an agent can read
(Jobs, pods and their logs, the CronJob's status, alerts, metrics); wrong repairs leave the
judge false; the documented repair makes it true and it holds."""

from __future__ import annotations

import copy
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.twins import AppTwin

from pytest_sremarathon.alerts.engine import AlertEngine
from pytest_sremarathon.alerts.noise import NoiseConfig, NoiseGenerator
from pytest_sremarathon.alerts.rules import DEFAULT_RULES
from pytest_sremarathon.apps import load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import Fault, builtin_registry
from pytest_sremarathon.faults.batch import CronJobFault
from pytest_sremarathon.faults.catalogue import CuratedChange, load_catalogue
from pytest_sremarathon.k8s.objects import owner_ref
from pytest_sremarathon.prometheus.promql import Engine
from pytest_sremarathon.twin.defaults import apply_defaults, initial_status

HOTEL = APPS_DIR / "hotel"
NS = "hotel"
CRONJOB = "rate-refresh"
REGISTRY = builtin_registry()


class HotelWorld(AppTwin):
    """The hotel on a twin behind its pipeline, with the default alert rules (no noise): what
    the fault kinds act on (``World``)."""

    settle_after = 20

    def __init__(self, tmp_path: Path) -> None:
        app = load_app(HOTEL)
        super().__init__([app], tmp_path / "repos", start=EPOCH + timedelta(hours=14))
        self.app = app
        self.catalogue = {c.id: c for c in load_catalogue(HOTEL)}
        self.engine = AlertEngine(DEFAULT_RULES, NoiseGenerator(NoiseConfig(alerts_per_hour=0), random.Random(0), {}))
        self.fired: set[tuple[str, str]] = set()

    def curated(self, app: str, change_id: str) -> CuratedChange:
        return self.catalogue[change_id]

    def tick_rng(self) -> random.Random:
        return random.Random(f"hotel:{self.ticks}")

    def after_tick(self, now: Any) -> None:
        for tr in self.engine.evaluate(now, self.tick_seconds, self.cluster, self.apps):
            if tr.alert.status == "firing":
                self.fired.add((tr.alert.name, tr.alert.labels.get("service", "")))

    def firing(self) -> set[tuple[str, str]]:
        return {(a.name, a.labels.get("service", "")) for a in self.engine.alerts.values() if a.status == "firing"}

    def jobs(self) -> list[dict[str, Any]]:
        return [j for j in self.store.list("Job", NS)
                if any(r.get("name") == CRONJOB for r in j["metadata"].get("ownerReferences") or [])]

    def outcome(self, job: dict[str, Any]) -> str:
        for c in job.get("status", {}).get("conditions") or []:
            if c["type"] in ("Complete", "Failed") and c["status"] == "True":
                return c["type"] + ":" + c.get("reason", "")
        return "Running"

    def job_logs(self) -> str:
        return "\n".join(line for c in self.cluster.kubelet.containers.values()
                         if c.namespace == NS and c.pod_name.startswith(CRONJOB) for _, line in c.logs)


def _warm(world: HotelWorld) -> None:
    world.tick(30)  # a quarter of an hour: datastores, services, a few refreshes
    assert not world.firing(), world.firing()
    assert any(world.outcome(j) == "Complete:CompletionsReached" for j in world.jobs())


def _inject(world: HotelWorld, change_id: str) -> tuple[CronJobFault, Fault]:
    change = world.catalogue[change_id]
    assert change.fault is not None
    kind = REGISTRY[change.fault.kind]
    assert isinstance(kind, CronJobFault)
    fault = Fault(id="F01", kind=kind.name, family=kind.family, app=NS, start=world.clock.now,
                  end=world.clock.now + timedelta(hours=2), params={"change": change_id})
    kind.inject(world, fault)
    fault.injected = True
    assert fault.component == f"service:{NS}/{CRONJOB}" and fault.change and kind.active(world, fault)
    return kind, fault


def _hold(world: HotelWorld, kind: CronJobFault, fault: Fault, want: bool, ticks: int, what: str) -> None:
    for i in range(ticks):
        world.tick()
        assert kind.mitigated(world, fault) is want, f"{what}: mitigated() is {not want} at tick {i + 1}"


def _delete_job(world: HotelWorld, job: dict[str, Any]) -> None:
    with world.store.lock:
        for pod in list(world.store.list("Pod", NS)):
            if pod["metadata"]["labels"].get("job-name") == job["metadata"]["name"]:
                world.store.delete("Pod", NS, pod["metadata"]["name"])
        world.store.delete("Job", NS, job["metadata"]["name"])


def _run_by_hand(world: HotelWorld, name: str) -> None:
    """What ``kubectl create job NAME --from=cronjob/rate-refresh`` sends."""
    cj = world.store.get("CronJob", NS, CRONJOB)
    assert cj is not None
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "namespace": NS, "annotations": {"cronjob.kubernetes.io/instantiate": "manual"},
                        "ownerReferences": [owner_ref(cj)]},
           "spec": copy.deepcopy(cj["spec"]["jobTemplate"]["spec"])}
    apply_defaults(job)
    initial_status(job)
    with world.store.lock:
        world.cluster.react(world.store.create(job))


def test_cronjob_failing_effects_wrong_repairs_and_revert(tmp_path: Path) -> None:
    world = HotelWorld(tmp_path)
    _warm(world)
    kind, fault = _inject(world, "rate-refresh-source-uri")
    assert kind.in_head(world, fault) and fault.impact == {(NS, CRONJOB)}
    # 1. effects: each run fails to its backoff limit, its pods say why, the alert fires
    for _ in range(40):
        world.tick()
        assert not kind.mitigated(world, fault)
        if ("KubeJobFailed", CRONJOB) in world.firing():
            break
    assert ("KubeJobFailed", CRONJOB) in world.firing()
    assert "Failed:BackoffLimitExceeded" in {world.outcome(j) for j in world.jobs()}
    assert "no rate plan store configured (RATE_SOURCE)" in world.job_logs()
    # … and what Prometheus holds says the same (the rule's PromQL over kube-state-metrics)
    rule = next(r for r in DEFAULT_RULES if r.name == "KubeJobFailed")
    result = Engine(world.cluster.prometheus).instant(rule.query, world.clock.now.timestamp()).value
    assert [(dict(s.labels).get("namespace"), dict(s.labels).get("owner_name")) for s in result.samples] == \
        [(NS, CRONJOB)], result
    last_success = world.store.get("CronJob", NS, CRONJOB)["status"]["lastSuccessfulTime"]
    # 2. wrong: delete the failed Jobs (the alert clears) — the next run fails again
    for job in world.jobs():
        if world.outcome(job).startswith("Failed"):
            _delete_job(world, job)
    assert not kind.mitigated(world, fault)
    _hold(world, kind, fault, False, 8, "after deleting the failed Jobs")
    assert any(world.outcome(j).startswith("Failed") for j in world.jobs())
    assert world.store.get("CronJob", NS, CRONJOB)["status"]["lastSuccessfulTime"] == last_success  # no run works
    # 3. wrong: re-run the job by hand — it fails the same way
    _run_by_hand(world, "rate-refresh-by-hand")
    seen = set()
    for _ in range(6):
        world.tick()
        assert not kind.mitigated(world, fault), "after a run by hand"
        by_hand = world.store.get("Job", NS, "rate-refresh-by-hand")
        seen.add(world.outcome(by_hand) if by_hand is not None else "pruned")
    assert "Failed:BackoffLimitExceeded" in seen  # (then pruned under the failed-history limit)
    # 4. the documented repair: revert the change through the pipeline; the next run succeeds
    world.pipelines.revert(NS, fault.change or "", "agent")
    assert not kind.in_head(world, fault)
    _hold(world, kind, fault, True, 10, "after the revert")
    assert world.store.get("CronJob", NS, CRONJOB)["status"]["lastSuccessfulTime"] > last_success
    changes = len(world.pipelines.changes(NS))
    kind.cleanup(world, fault)
    assert len(world.pipelines.changes(NS)) == changes


def test_cronjob_piling_starves_the_services_until_reverted_and_cleared(tmp_path: Path) -> None:
    world = HotelWorld(tmp_path)
    _warm(world)
    p99 = {s: world.cluster.metrics.latest(NS, s, "latency_p99_ms") for s in world.app.services}
    kind, fault = _inject(world, "rate-refresh-full-reload")
    assert (NS, "frontend") in fault.impact and (NS, CRONJOB) in fault.impact
    # 1. effects: the Jobs pile up, and the services on the starved nodes slow down
    for _ in range(60):
        world.tick()
        assert not kind.mitigated(world, fault)
    running = [j for j in world.jobs() if world.outcome(j) == "Running"]
    assert len(running) >= 10
    assert abs(len(world.store.get("CronJob", NS, CRONJOB)["status"]["active"]) - len(running)) <= 1  # (a tick behind)
    slower = [s for s, before in p99.items() if before and world.cluster.metrics.latest(NS, s, "latency_p99_ms") > 1.5 * before]
    assert slower, "no service slowed down"
    assert world.fired & {(rule, s) for s in world.app.services
                          for rule in ("ServiceLatencySLOBurn", "ServiceHighErrorRate")}, world.fired
    # 2. wrong: scale the services up
    for name in ("frontend", "search", "rate"):
        d = world.store.get("Deployment", NS, name)
        d["spec"]["replicas"] = int(d["spec"]["replicas"]) + 2
        world.store.touch(d, spec_changed=True)
    _hold(world, kind, fault, False, 6, "after scaling the services")
    # 3. wrong: clear the piled Jobs but leave the change — they pile again
    for job in world.jobs():
        _delete_job(world, job)
    _hold(world, kind, fault, False, 10, "after deleting the Jobs alone")
    # 4. the documented repair: revert, then delete the piled-up Jobs
    world.pipelines.revert(NS, fault.change or "", "agent")
    world.tick()
    assert not kind.mitigated(world, fault)  # the Jobs started meanwhile still run
    for job in [j for j in world.jobs() if world.outcome(j) == "Running"]:
        _delete_job(world, job)
    _hold(world, kind, fault, True, 20, "after the revert and the clean-up")
    assert len([j for j in world.jobs() if world.outcome(j) == "Running"]) <= 1


@pytest.mark.parametrize("name", ["cronjob-failing", "cronjob-piling"])
def test_the_batch_kinds_are_catalogued(name: str) -> None:
    kind = REGISTRY[name]
    assert kind.family == "change" and kind.component_form == "service:<app>/<cronjob>"
    assert kind.repair and kind.judge and "Repair" in (type(kind).__doc__ or "")
    assert any(c.fault and c.fault.kind == name for c in load_catalogue(HOTEL))
