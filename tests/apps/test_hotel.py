"""The hotel application (``pytest_sremarathon/scenarios/apps/hotel``), end to end on the embedded twin.

Nothing is mocked: the app loads, its build runs the app's own unit tests, a TwinCluster runs
the real handler code behind real Deployments and Services deployed through the pipeline, and
the default alert rules judge what an on-call engineer would see. Every curated change applies
to a fresh repository and builds; every faulty one, shipped alone onto a healthy twin, raises
an alert of the kind its fault tag promises, on the service or one of its callers — and
reverting it through the pipeline clears the alerts.
"""

from __future__ import annotations

import random
import textwrap
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Optional

import pytest
from support.apps import (
    CODE_KINDS,
    CONFIG_KINDS,
    DNS_DEGRADED_ALERTS,
    EXPECTED_ALERTS,
    MANIFEST_KINDS,
    NOT_CURATED,
    RUNTIME_KINDS,
    patch_serial_resolver,
    service_manifest,
    ship_hotfixed_then_trigger,
    signature_file,
    source_files,
)
from support.twins import AppTwin

from pytest_sremarathon.alerts.engine import AlertEngine
from pytest_sremarathon.alerts.noise import NoiseConfig, NoiseGenerator
from pytest_sremarathon.alerts.rules import DEFAULT_RULES
from pytest_sremarathon.apps import AppSpec, load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults.catalogue import CuratedChange, load_catalogue
from pytest_sremarathon.k8s.objects import pod_is_ready
from pytest_sremarathon.k8s.quantity import memory_bytes
from pytest_sremarathon.pipeline.build import build
from pytest_sremarathon.pipeline.service import apply_edit

APP_ROOT = APPS_DIR / "hotel"
NS = "hotel"
TICK = 30.0
WARMUP_TICKS = 20  # 10 virtual minutes: datastores come up, then the services that probe them


# -- the app and its source tree ------------------------------------------------------------------

@pytest.fixture(scope="module")
def app() -> AppSpec:
    return load_app(APP_ROOT)


CATALOGUE: list[CuratedChange] = load_catalogue(APP_ROOT)
#: The faulty changes of the code, config and manifest kinds (the batch kinds' own,
#: rate-refresh-*, have their tests in tests/faults/test_batch_kinds.py).
FAULTY = [c for c in CATALOGUE if c.faulty and c.fault
          and c.fault.kind in CODE_KINDS | CONFIG_KINDS | MANIFEST_KINDS | RUNTIME_KINDS]
BENIGN = [c for c in CATALOGUE if not c.faulty]


def _apply(files: dict[str, str], change: CuratedChange, *, inverse: bool = False) -> Optional[dict[str, str]]:
    out = dict(files)
    for e in change.edits:
        find, replace = (e.replace, e.find) if inverse else (e.find, e.replace)
        edited = apply_edit(out[e.file], find, replace)
        if edited is None:
            return None
        out[e.file] = edited
    return out


def _matches(text: str, find: str) -> int:
    """How often ``find`` occurs at the start of a line, at the indentation apply_edit uses."""
    for indent in ("", "    ", "        ", "            "):
        n = ("\n" + text).count("\n" + textwrap.indent(find, indent))
        if n:
            return n
    return 0


# -- a twin running only this app ---------------------------------------------------------------

class HotelTwin(AppTwin):
    """One TwinCluster with the hotel app deployed through its pipeline, advanced tick by tick
    with the default alert rules (no background noise) evaluated as the marathon does."""

    settle_after = WARMUP_TICKS

    tick_seconds = TICK

    def __init__(self, app: AppSpec, repos: Path, start: datetime = EPOCH) -> None:
        super().__init__([app], repos, start=start)
        self.app = app
        self.fired: list[tuple[datetime, str, str]] = []
        self.alerts = AlertEngine(DEFAULT_RULES, NoiseGenerator(NoiseConfig(alerts_per_hour=0), random.Random(0), {}))

    def tick_rng(self) -> random.Random:
        return random.Random(f"hotel:{self.ticks}")

    def after_tick(self, now: datetime) -> None:
        for tr in self.alerts.evaluate(now, TICK, self.cluster, {NS: self.app}):
            if tr.alert.status == "firing":
                self.fired.append((now, tr.alert.name, tr.alert.labels.get("service", "")))

    def tick_until(self, ticks: int, until: Callable[[], bool]) -> Optional[int]:
        """Advance up to ``ticks`` ticks, stopping (and saying after how many) once ``until`` holds."""
        for i in range(ticks):
            self.tick()
            if until():
                return i + 1
        return None

    def settle(self, ticks: int, quiet: int) -> Optional[int]:
        """Advance until ``quiet`` consecutive ticks pass with nothing firing (at most ``ticks``)."""
        calm = 0
        for i in range(ticks):
            fired_before = len(self.fired)
            self.tick()
            calm = calm + 1 if not self.firing() and len(self.fired) == fired_before else 0
            if calm >= quiet:
                return i + 1
        return None

    def firing(self) -> set[tuple[str, str]]:
        return {(a.name, a.labels.get("service", "")) for a in self.alerts.alerts.values() if a.status == "firing"}

    def ship(self, change: CuratedChange, *, deploy: bool = True) -> str:
        """What the orchestrator does: commit the curated change, deploy HEAD; the change id."""
        shipped = self.pipelines.commit_edits(NS, [(e.file, e.find, e.replace) for e in change.edits],
                                              change.message, change.author)
        if deploy:
            self.pipelines.deploy(NS, "HEAD", "orchestrator")
        return shipped.id

    def metric(self, service: str, name: str) -> float:
        return self.cluster.metrics.latest(NS, service, name)

    def pods(self) -> list[dict]:
        """The services' pods (not the rate-refresh CronJob's: a finished Job's pod is not ready)."""
        return [p for p in self.store.list("Pod", NS) if (p["metadata"].get("labels") or {}).get("app") in self.app.services]


# -- the application definition -------------------------------------------------------------------

def test_app_loads_with_a_consistent_call_graph(app: AppSpec) -> None:
    assert (app.name, app.namespace, app.traffic.entry) == ("hotel", "hotel", "frontend")
    assert 12 <= len(app.services) <= 14
    assert sorted(app.code_services()) == ["frontend", "geo", "profile", "rate", "recommendation", "reservation",
                                           "search", "user"]
    datastores = {s: spec.datastore for s, spec in app.services.items() if spec.datastore}
    assert all(image.split(":")[0] in ("memcached", "mongo") for image in datastores.values())
    for svc in app.code_services():
        assert app.services[svc].slo_p99_ms, f"{svc} has no latency SLO"
    # search dominates the traffic, reservations are rare
    weights = {r.endpoint: r.weight for r in app.traffic.requests}
    assert set(weights) == {"search_hotels", "recommend", "user_login", "reserve"}
    assert max(weights, key=weights.__getitem__) == "search_hotels" and min(weights, key=weights.__getitem__) == "reserve"
    # every address a service reads from its configuration is an edge of the call graph
    for svc in app.code_services():
        config = (APP_ROOT / "config" / f"{svc}.yaml").read_text()
        for line in config.splitlines():
            key, _, value = line.partition(": ")
            if key.endswith("_ADDR"):
                assert value in app.services[svc].calls, f"{svc}: {key}={value} is not in its calls"
    assert app.callers_of("mongodb-hotels") >= {"geo", "rate", "profile", "recommendation", "search", "frontend"}


def test_manifests_follow_the_conventions(app: AppSpec) -> None:
    import yaml

    for svc, spec in app.services.items():
        docs = list(yaml.safe_load_all((APP_ROOT / "manifests" / f"{svc}.yaml").read_text()))
        deployment, service = service_manifest(docs, svc, spec.datastore)
        assert deployment["metadata"]["name"] == service["metadata"]["name"] == svc
        assert deployment["spec"]["replicas"] == spec.replicas
        pod = deployment["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
        assert container["resources"]["limits"]["memory"] and container["resources"]["requests"]["cpu"]
        assert service["spec"]["selector"] == {"app": svc}
        if spec.datastore:
            assert container["image"] == spec.datastore and deployment["spec"]["replicas"] == 1
            assert container["readinessProbe"]["tcpSocket"]["port"] == container["ports"][0]["containerPort"]
        else:
            assert container["image"] == f"hotel/{svc}"
            assert container["envFrom"] == [{"configMapRef": {"name": f"{svc}-config"}}]
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8080}
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8080}
            assert "REQUEST_TIMEOUT_MS" in (APP_ROOT / "config" / f"{svc}.yaml").read_text()


def test_build_runs_the_unit_tests(app: AppSpec) -> None:
    result = build(app, source_files(APP_ROOT))
    assert sorted(result.artifacts) == sorted(app.code_services())
    assert result.tests_run >= 10


# -- the curated changes --------------------------------------------------------------------------

def test_catalogue_covers_every_change_induced_kind(app: AppSpec) -> None:
    kinds = Counter(c.fault.kind for c in FAULTY if c.fault)
    assert len(FAULTY) >= 12 and len(BENIGN) >= 36
    elsewhere = set(NOT_CURATED["hotel"])
    assert set(kinds) == (CODE_KINDS | CONFIG_KINDS | MANIFEST_KINDS | RUNTIME_KINDS) - elsewhere
    for kind in elsewhere:
        assert any(c.fault and c.fault.kind == kind for a in ("shop", "social") for c in load_catalogue(APPS_DIR / a)), kind
    assert set(EXPECTED_ALERTS) == CODE_KINDS | CONFIG_KINDS | MANIFEST_KINDS | RUNTIME_KINDS
    authors = Counter(c.author for c in CATALOGUE)
    assert len(authors) >= 8  # many hands, as in a real team
    by_id = {c.id: c for c in CATALOGUE}
    for c in FAULTY:
        tag = c.fault
        assert tag is not None and tag.service in app.code_services(), c.id
        if tag.kind == "code-dependency-bump":
            # the pin and the vendored library together, as a dependency bot opens it; the
            # service's own code is untouched, and it imports the library
            lib = signature_file(c)
            assert c.edits[0].file == "services/requirements.txt" and lib and lib.startswith("services/"), c.id
            assert lib != f"services/{tag.service}.py" and all(e.file in (c.edits[0].file, lib) for e in c.edits), c.id
            module = Path(lib).stem
            assert f"from {module} import" in (APP_ROOT / "services" / f"{tag.service}.py").read_text(), c.id
        elif tag.kind in CODE_KINDS:
            assert tag.signature and c.edits[0].file == f"services/{tag.service}.py", c.id
            assert signature_file(c) == f"services/{tag.service}.py", c.id
        elif tag.kind in CONFIG_KINDS:
            assert tag.key and c.edits[0].file == f"config/{tag.service}.yaml", c.id
            assert (tag.value is None) == (tag.kind == "config-env-removed"), c.id
            if tag.kind == "config-percentage-rollout":
                assert tag.value and 0 < float(tag.value) < 100, c.id  # a share of the users, not all
        else:
            assert tag.object in ("Deployment", "Service") and tag.field and tag.value, c.id
            assert c.edits[0].file == f"manifests/{tag.service}.yaml", c.id
            if tag.kind == "manifest-image-tag":
                assert tag.object == "Deployment" and tag.value.startswith(f"{NS}/{tag.service}:"), c.id
            if tag.kind == "manifest-hotfix-undone":
                # its trigger: a benign change of the same service, whose routine deploy
                # re-renders the Deployment from the repository
                trigger = by_id.get(tag.trigger or "")
                assert tag.object == "Deployment" and trigger is not None and not trigger.faulty, c.id
                assert {e.file for e in trigger.edits} & {f"config/{tag.service}.yaml",
                                                         f"manifests/{tag.service}.yaml"}, c.id
            else:
                assert tag.trigger is None, c.id
        # nothing in the message gives the fault away
        assert not any(word in c.message.lower() for word in ("fault", "bug", "break", "inject")), c.id


@pytest.mark.parametrize("change", CATALOGUE, ids=[c.id for c in CATALOGUE])
def test_change_applies_to_a_fresh_repo_and_builds(app: AppSpec, change: CuratedChange) -> None:
    files = source_files(APP_ROOT)
    for e in change.edits:
        assert _matches(files[e.file], e.find) == 1, f"{e.file}: the text this change edits is not unique"
    changed = _apply(files, change)
    assert changed is not None, "does not apply"
    path = signature_file(change)
    if change.fault and change.fault.signature and path:  # (a dependency bump's: the vendored module's)
        assert change.fault.signature not in files[path] and change.fault.signature in changed[path]
    if change.fault and change.fault.kind == "code-dependency-bump":
        # the pin moves, and the vendored module says the version it is pinned to
        import re

        module = Path(path or "").stem
        pin = re.compile(rf"^{re.escape(module)}==(\S+)$", re.M)
        old, new = pin.search(files["services/requirements.txt"]), pin.search(changed["services/requirements.txt"])
        assert old and new and old[1] != new[1], f"{module}'s pin does not move"
        assert f'__version__ = "{old[1]}"' in files[path or ""] and f'__version__ = "{new[1]}"' in changed[path or ""]
    if change.fault and change.fault.kind in CONFIG_KINDS:
        import yaml

        config = yaml.safe_load(changed[change.edits[0].file])
        assert config.get(change.fault.key) == change.fault.value
    build(app, changed)
    assert _apply(changed, change, inverse=True) == files  # the on-call's inverse edit restores the tree


def test_any_change_applies_after_any_other_was_applied_and_reverted() -> None:
    files = source_files(APP_ROOT)
    alone = {c.id: _apply(files, c) for c in CATALOGUE}
    for a in CATALOGUE:
        with_a = alone[a.id]
        assert with_a is not None
        for b in CATALOGUE:
            if b is a:
                continue
            both = _apply(with_a, b)
            assert both is not None, f"{b.id} does not apply after {a.id}"
            assert _apply(both, a, inverse=True) == alone[b.id], f"reverting {a.id} after {b.id} disturbs {b.id}"


# -- the twin: healthy, then one fault at a time ----------------------------------------------------

def test_healthy_run_meets_every_slo_and_stays_quiet(app: AppSpec, tmp_path: Path) -> None:
    twin = HotelTwin(app, tmp_path / "repos")
    twin.tick(WARMUP_TICKS)
    warm = len(twin.fired)
    slo = {s: spec.slo_p99_ms for s, spec in app.services.items()}
    for _ in range(240 - WARMUP_TICKS):  # two virtual hours in all
        twin.tick()
        for svc in app.services:
            if twin.metric(svc, "requests_per_second") > 0:
                assert twin.metric(svc, "error_ratio") == 0, f"{svc} fails requests at {twin.clock.now}"
                p99_slo = slo[svc]
                if p99_slo:
                    assert twin.metric(svc, "latency_p99_ms") <= p99_slo, f"{svc} misses its SLO at {twin.clock.now}"
    assert twin.fired[warm:] == [], "alerts fired on a healthy app"
    want = sum(spec.replicas for spec in app.services.values())
    pods = twin.pods()
    assert len(pods) == want and all(pod_is_ready(p) for p in pods)
    for svc in app.services:
        assert twin.metric(svc, "ready_pods") == app.services[svc].replicas
        assert twin.metric(svc, "restarts") == 0
        served = twin.cluster.metrics.series(NS, svc, "requests_per_second")
        assert any(rps > 0 for _, rps in served), f"{svc} never got traffic"


def test_benign_changes_ship_without_paging_anyone(app: AppSpec, tmp_path: Path) -> None:
    """All benign changes, deployed in batches of five (a rollout every two minutes), then half
    an hour more: nothing fires, nothing restarts."""
    twin = HotelTwin(app, tmp_path / "repos")
    twin.tick(WARMUP_TICKS)
    warm = len(twin.fired)
    benign = [c for c in CATALOGUE if not c.faulty]
    for i, change in enumerate(benign):
        batch_done = i % 5 == 4 or i == len(benign) - 1
        twin.ship(change, deploy=batch_done)
        if batch_done:
            twin.tick(4)
    twin.tick(60)
    assert twin.fired[warm:] == [], "a benign change paged"
    assert all(pod_is_ready(p) for p in twin.pods())
    assert all(twin.metric(svc, "restarts") == 0 for svc in app.services)


def _blast_radius(app: AppSpec, kind: str, service: str) -> set[str]:
    """Where a fault of ``kind`` in ``service`` may show (as the fault kinds define impact)."""
    if kind == "code-contract-break":
        return set(app.callers_of(service))
    out = {service} | app.callers_of(service)
    if kind == "code-retry-storm":
        for callee in app.services[service].calls:
            out |= {callee} | app.callers_of(callee)
    return out


@pytest.mark.parametrize("change", FAULTY, ids=[c.id for c in FAULTY])
def test_faulty_change_pages_and_its_revert_clears(app: AppSpec, change: CuratedChange, tmp_path: Path) -> None:
    tag = change.fault
    assert tag is not None
    twin = HotelTwin(app, tmp_path / "repos")
    twin.tick(WARMUP_TICKS + 10)
    assert not twin.firing(), f"the twin is not healthy before the change: {twin.firing()}"

    baseline = {svc: sum(twin.cluster.metrics.window(NS, svc, "requests_per_second", 4)) / 4 for svc in app.services}
    if tag.kind == "manifest-hotfix-undone":
        fired = len(twin.fired)
        change_id = ship_hotfixed_then_trigger(twin, NS, change, CATALOGUE,
                                               lambda: bool(twin.firing()) or len(twin.fired) > fired)
    else:
        change_id = twin.ship(change)
    blast_radius = _blast_radius(app, tag.kind, tag.service)
    expected = EXPECTED_ALERTS[tag.kind]

    def paged() -> bool:
        return any(name in expected and svc in blast_radius for name, svc in twin.firing())

    after = twin.tick_until(240, paged)  # up to two virtual hours (the memory leak needs ~1.5)
    assert after is not None, f"no {sorted(expected)} alert on {sorted(blast_radius)}; fired: {twin.fired}"
    unrelated = {(n, s) for n, s in twin.firing() if s and s not in blast_radius}
    assert not unrelated, f"alerts outside the blast radius of {tag.service}: {unrelated}"
    if tag.kind == "code-contract-break":  # the callee is fine; its callers choke on its answers
        assert twin.metric(tag.service, "error_ratio") == 0
        assert any(twin.metric(s, "error_ratio") > 0 for s in app.callers_of(tag.service))
    if tag.kind == "code-retry-storm":  # the storm multiplies the calls into a dependency
        assert any(twin.metric(s, "requests_per_second") >= 3 * baseline[s] for s in app.services[tag.service].calls)
    if tag.kind == "manifest-image-tag":  # the new pod waits on its image; the old ones serve on
        waiting = {(cs.get("state", {}).get("waiting") or {}).get("reason") for p in twin.pods()
                   if p["metadata"]["labels"].get("app") == tag.service for cs in p["status"].get("containerStatuses") or []}
        assert waiting & {"ErrImagePull", "ImagePullBackOff"}, waiting
        assert twin.metric(tag.service, "ready_pods") >= 1 and twin.metric(tag.service, "error_ratio") == 0
    if tag.kind in ("code-dependency-bump", "config-percentage-rollout"):  # only some requests fail
        assert 0 < twin.metric(tag.service, "error_ratio") < 0.9
    if tag.kind == "code-memory-leak":  # it grew to the limit before the kill
        deployment = twin.store.get("Deployment", NS, tag.service)
        assert deployment is not None
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        limit = memory_bytes(container["resources"]["limits"]["memory"])
        assert max(twin.cluster.metrics.window(NS, tag.service, "memory_bytes", 40)) > 0.9 * limit

    reverted_at = len(twin.fired)
    twin.pipelines.revert(NS, change_id, "orchestrator")
    settled = twin.settle(80, quiet=20)  # ten quiet minutes within forty
    assert settled is not None, f"not quiet after the revert: {twin.firing()}; fired since: {twin.fired[reverted_at:]}"
    assert all(pod_is_ready(p) for p in twin.pods())
    assert twin.metric(tag.service, "ready_pods") == app.services[tag.service].replicas


def test_dns_degraded_pages_the_callers_and_the_resolver_option_clears_it(app: AppSpec, tmp_path: Path) -> None:
    """dependency-dns-degraded (injected, no curated change): a share of lookups lost cluster-wide
    pages on the services that call others, never on one only called; the serial-resolver option
    on every calling deployment clears it, while the race goes on."""
    twin = HotelTwin(app, tmp_path / "repos")
    twin.tick(WARMUP_TICKS + 10)
    assert not twin.firing()
    callers = {s for s, spec in app.services.items() if spec.calls}
    twin.cluster.network.dns_race_share[NS] = 0.05  # what DnsDegraded.inject sets
    after = twin.tick_until(40, lambda: any(n in DNS_DEGRADED_ALERTS and s in callers for n, s in twin.firing()))
    assert after is not None, f"no {sorted(DNS_DEGRADED_ALERTS)} on a caller; fired: {twin.fired}"
    assert not {(n, s) for n, s in twin.firing() if s and s not in callers}, "a service only called paged"
    assert all(twin.metric(s, "error_ratio") == 0 for s in app.services if s not in callers)
    assert 0 < twin.metric("frontend", "error_ratio") < 0.6  # partial: most lookups still answer
    reverted_at = len(twin.fired)
    patch_serial_resolver(twin, NS, callers)
    settled = twin.settle(80, quiet=20)
    assert settled is not None, f"not quiet after the repair: {twin.firing()}; fired since: {twin.fired[reverted_at:]}"
    assert NS in twin.cluster.network.dns_race_share and all(pod_is_ready(p) for p in twin.pods())
