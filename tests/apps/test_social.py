"""The social network application (``pytest_sremarathon/scenarios/apps/social``), end to end on the twin.

Everything is real: the app definition, its git-backed pipeline (build = the app's own unit
tests), the twin cluster running the handler code, the alert rules. A healthy deploy must run
two virtual hours without a single alert; every curated change must apply and build on its own
and in any combination; every faulty change must show up in the twin (alerts, or the retry
storm's request amplification, or — for the latent zone pin — an outage it turns fatal) and go
away when the pipeline reverts it.
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml
from support.apps import (
    CODE_KINDS,
    CONFIG_KINDS,
    DNS_DEGRADED_ALERTS,
    EXPECTED_ALERTS,
    MANIFEST_KINDS,
    NOT_CURATED,
    fix_forward,
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
from pytest_sremarathon.apps import load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import builtin_registry
from pytest_sremarathon.faults.catalogue import CuratedChange, load_catalogue
from pytest_sremarathon.k8s.objects import pod_is_ready
from pytest_sremarathon.k8s.quantity import memory_bytes
from pytest_sremarathon.pipeline.build import build
from pytest_sremarathon.pipeline.service import apply_edit

APP_ROOT = APPS_DIR / "social"
NS = "social"
TICK = 30.0
WARMUP_TICKS = 20  # 10 virtual minutes: pods start, probes pass, timelines begin to fill
HEALTHY_TICKS = 240  # 2 virtual hours
MAX_FAULT_TICKS = 240  # a faulty change gets up to 2 virtual hours to show
MAX_CLEAR_TICKS = 60  # and its revert 30 minutes to clear it
CLEAR_STREAK = 4  # ... for 2 minutes in a row
STORM_FACTOR = 2.5  # request rate above the healthy maximum that counts as a retry storm


# -- the app and its catalogue -----------------------------------------------------------------

APP = load_app(APP_ROOT)
CATALOGUE = load_catalogue(APP_ROOT)
FAULTY = [c for c in CATALOGUE if c.faulty]
BENIGN = [c for c in CATALOGUE if not c.faulty]


def apply_change(files: dict[str, str], change: CuratedChange) -> dict[str, str]:
    out = dict(files)
    for e in change.edits:
        edited = apply_edit(out[e.file], e.find, e.replace)
        assert edited is not None, f"{change.id}: the text it edits is not in {e.file}"
        assert edited != out[e.file], f"{change.id}: the edit of {e.file} changes nothing"
        out[e.file] = edited
    return out


def edited_lines(text: str, find: str) -> tuple[int, int]:
    """The lines (first, last; 0-based) of ``text`` that ``find`` matches, as apply_edit finds it."""
    for indent in ("", "    ", "        ", "            "):
        f = textwrap.indent(find, indent)
        at = 0 if text.startswith(f) else ("\n" + text).find("\n" + f)
        if at >= 0:
            first = text[:at].count("\n")
            return first, first + f.rstrip("\n").count("\n")
    raise AssertionError(f"{find!r} is not in the file")


# -- a twin running only this app ----------------------------------------------------------------

class Twin(AppTwin):
    """A two-zone twin cluster with only the social app, deployed through its pipeline, with
    the default alert rules (no background noise) evaluated every tick; one random stream
    (``seed``) drives the whole run."""

    settle_after = WARMUP_TICKS

    tick_seconds = TICK

    def __init__(self, tmp: Path, seed: int = 7, hour: int = 0) -> None:
        self.events: list[Any] = []
        super().__init__([APP], tmp, start=EPOCH + timedelta(hours=hour),
                         emit=lambda t, d: self.events.append((t, d)))
        quiet = NoiseGenerator(NoiseConfig(alerts_per_hour=0), random.Random(seed), {})
        self.alerts = AlertEngine(DEFAULT_RULES, quiet)
        self.rng = random.Random(seed)

    def tick_rng(self) -> random.Random:
        return self.rng

    def after_tick(self, now: datetime) -> None:
        self.alerts.evaluate(now, TICK, self.cluster, {NS: APP})

    def firing(self) -> set[tuple[str, str]]:
        """(alert name, service) of every alert firing now."""
        return {(a.name, a.labels.get("service", a.labels.get("node", ""))) for a in self.alerts.alerts.values()
                if a.status == "firing"}

    def pods(self, service: Optional[str] = None) -> list[dict[str, Any]]:
        return self.active_pods(NS, service)

    def serving_pods(self, service: str) -> list[dict[str, Any]]:
        up = self.cluster.network.node_up
        return [p for p in self.pods(service) if pod_is_ready(p) and up.get(p["spec"].get("nodeName") or "", False)]

    def mean(self, service: str, metric: str, n: int = 4) -> float:
        values = self.cluster.metrics.window(NS, service, metric, n)
        return sum(values) / len(values) if values else 0.0

    def set_zone(self, zone: str, up: bool) -> None:
        for node, z in self.cluster.network.node_zone.items():
            if z == zone:
                self.cluster.network.node_up[node] = up


@dataclass
class Healthy:
    twin: Twin
    max_rps: dict[str, float]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Healthy:
    """HEAD deployed on a fresh twin, run for two virtual hours."""
    twin = Twin(tmp_path_factory.mktemp("healthy"))
    twin.tick(HEALTHY_TICKS)
    max_rps = {svc: max((v for _, v in twin.cluster.metrics.series(NS, svc, "requests_per_second")[WARMUP_TICKS:]),
                        default=0.0) for svc in APP.services}
    return Healthy(twin, max_rps)


def symptoms(twin: Twin, max_rps: dict[str, float]) -> set[tuple[str, str]]:
    """What an on-call engineer would see: firing alerts, and request rates far above anything
    the healthy run had (a retry storm raises no alert of its own until something saturates)."""
    out = {(name, svc) for name, svc in twin.firing()}
    for svc in APP.services:
        if max_rps.get(svc) and twin.mean(svc, "requests_per_second") > STORM_FACTOR * max_rps[svc]:
            out.add(("RequestRateAmplified", svc))
    return out


# -- the app loads and builds ------------------------------------------------------------------

def test_app_loads_with_its_call_graph_and_traffic() -> None:
    assert APP.namespace == NS and APP.traffic.entry == "frontend"
    datastores = {s for s, spec in APP.services.items() if spec.datastore}
    assert datastores == {"post-storage-cache", "post-storage-db", "timeline-cache", "social-graph-db"}
    assert set(APP.code_services()) == {"frontend", "compose-post", "text", "user-mention", "url-shorten", "media",
                                        "user", "social-graph", "post-storage", "user-timeline", "home-timeline"}
    for svc in APP.code_services():
        assert APP.services[svc].slo_p99_ms, f"{svc} has no latency SLO"
    # the read path dominates, composing is rarer
    weights = {r.endpoint: r.weight for r in APP.traffic.requests}
    assert weights["read_home_timeline"] + weights["read_user_timeline"] > 3 * weights["compose_post"]
    # every service is reachable from the front door through the declared call graph
    assert all("frontend" in APP.callers_of(s) for s in APP.services if s != "frontend")


def test_manifests_and_config_follow_the_conventions() -> None:
    for svc, spec in APP.services.items():
        docs = [d for d in yaml.safe_load_all((APP_ROOT / "manifests" / f"{svc}.yaml").read_text()) if d]
        deploy, service = service_manifest(docs, svc, spec.datastore)
        assert deploy["metadata"]["name"] == service["metadata"]["name"] == svc
        assert service["spec"]["selector"] == {"app": svc}
        pod = deploy["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert pod["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
        assert container["resources"]["limits"]["memory"] == "256Mi"
        if spec.datastore:
            assert deploy["spec"]["replicas"] == 1 and container["image"] == spec.datastore
            assert "tcpSocket" in container["readinessProbe"]
        else:
            assert deploy["spec"]["replicas"] == spec.replicas
            assert container["image"] == f"social/{svc}"
            assert container["envFrom"] == [{"configMapRef": {"name": f"{svc}-config"}}]
            assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 8080}
            assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8080}
            config = yaml.safe_load((APP_ROOT / "config" / f"{svc}.yaml").read_text())
            assert "REQUEST_TIMEOUT_MS" in config
            for callee in spec.calls:
                assert callee in config.values(), f"{svc} reads the address of {callee} from its config"


def test_build_runs_the_unit_tests() -> None:
    result = build(APP, source_files(APP_ROOT))
    assert set(result.artifacts) == set(APP.code_services())
    assert result.tests_run >= 10


# -- a healthy deploy stays healthy ------------------------------------------------------------

def test_healthy_run_is_quiet(healthy: Healthy) -> None:
    twin = healthy.twin
    pods = twin.pods()
    assert len(pods) == sum(spec.replicas for spec in APP.services.values())
    not_ready = [p["metadata"]["name"] for p in pods if not pod_is_ready(p)]
    assert not not_ready, f"pods not ready after two hours: {not_ready}"
    restarts = {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"] for p in pods}
    assert not any(restarts.values()), restarts

    metrics = twin.cluster.metrics
    for svc, spec in APP.services.items():
        rps = [v for _, v in metrics.series(NS, svc, "requests_per_second")[WARMUP_TICKS:]]
        assert sum(rps) > 0, f"{svc} gets no traffic"
        errors = max(v for _, v in metrics.series(NS, svc, "error_ratio")[WARMUP_TICKS:])
        assert errors == 0, f"{svc} fails {errors:.1%} of requests in a healthy run"
        if spec.slo_p99_ms:
            p99 = max(v for _, v in metrics.series(NS, svc, "latency_p99_ms")[WARMUP_TICKS:])
            assert p99 < spec.slo_p99_ms, f"{svc} p99 {p99:.0f}ms is above its SLO {spec.slo_p99_ms:.0f}ms"
        memory = max(v for _, v in metrics.series(NS, svc, "memory_bytes"))
        assert memory < 0.5 * memory_bytes("256Mi"), f"{svc} uses {memory / 2**20:.0f}Mi"

    warm = EPOCH + timedelta(seconds=WARMUP_TICKS * TICK)
    late = [(a.name, a.labels.get("service"), a.annotations["summary"]) for a in twin.alerts.alerts.values()
            if a.starts_at >= warm]
    assert not late, f"alerts fired in a healthy run: {late}"
    assert not twin.firing()


def test_benign_changes_keep_it_quiet(tmp_path: Path) -> None:
    """All benign changes, shipped one after another through the pipeline, raise nothing."""
    twin = Twin(tmp_path)
    twin.tick(WARMUP_TICKS)
    for change in BENIGN:
        twin.pipelines.commit_edits(NS, [(e.file, e.find, e.replace) for e in change.edits], change.message,
                                    change.author)
        twin.pipelines.deploy(NS, "HEAD", "orchestrator")
        twin.tick(1)
    twin.tick(60)
    warm = EPOCH + timedelta(seconds=WARMUP_TICKS * TICK)
    fired = [(a.name, a.labels.get("service")) for a in twin.alerts.alerts.values() if a.starts_at >= warm]
    assert not fired, f"benign changes raised alerts: {fired}"
    assert all(pod_is_ready(p) for p in twin.pods())


# -- the curated changes -----------------------------------------------------------------------

def test_catalogue_covers_every_change_kind() -> None:
    registry = builtin_registry()
    kinds = {c.fault.kind for c in FAULTY if c.fault}
    elsewhere = set(NOT_CURATED["social"])
    assert (CODE_KINDS | CONFIG_KINDS | MANIFEST_KINDS) - elsewhere <= kinds
    for kind in elsewhere:
        assert any(c.fault and c.fault.kind == kind for a in ("shop", "hotel") for c in load_catalogue(APPS_DIR / a)), kind
    assert kinds <= set(EXPECTED_ALERTS), "a kind without the page it promises"
    assert len(FAULTY) >= 12 and len(BENIGN) >= 36
    by_id = {c.id: c for c in CATALOGUE}
    for c in FAULTY:
        tag = c.fault
        assert tag is not None and tag.kind in registry, c.id
        assert tag.service in APP.services, c.id
        if tag.kind in CODE_KINDS:
            assert tag.signature and c.edits[0].file == f"services/{tag.service}.py", c.id
            assert signature_file(c) == f"services/{tag.service}.py", c.id
            assert tag.object is None and tag.field is None, c.id
            if tag.kind == "code-schema-migration":
                # the service reads and writes records in a datastore, and a known fix forward exists
                assert any(APP.services[ds].datastore for ds in APP.services[tag.service].calls), c.id
                assert fix_forward(c), c.id
        elif tag.kind in CONFIG_KINDS:
            assert tag.key and all(e.file == f"config/{tag.service}.yaml" for e in c.edits), c.id
            if tag.kind == "config-percentage-rollout":
                assert tag.value and 0 < float(tag.value) < 100, c.id  # a share of the users, not all
        else:
            assert tag.object in ("Deployment", "StatefulSet", "Service") and tag.field, c.id  # the workload or its Service
            assert all(e.file == f"manifests/{tag.service}.yaml" for e in c.edits), c.id
            if tag.kind == "manifest-image-tag":
                assert tag.object == "Deployment" and (tag.value or "").startswith(f"{NS}/{tag.service}:"), c.id
            if tag.kind == "manifest-hotfix-undone":
                trigger = by_id.get(tag.trigger or "")
                assert tag.object == "Deployment" and trigger is not None and not trigger.faulty, c.id
                assert {e.file for e in trigger.edits} & {f"config/{tag.service}.yaml",
                                                         f"manifests/{tag.service}.yaml"}, c.id
            else:
                assert tag.trigger is None, c.id


@pytest.mark.parametrize("change", CATALOGUE, ids=lambda c: c.id)
def test_change_applies_and_builds(change: CuratedChange) -> None:
    base = source_files(APP_ROOT)
    files = apply_change(base, change)
    build(APP, files)
    tag = change.fault
    if tag is None:
        return
    if tag.kind in CODE_KINDS:
        path = signature_file(change)  # (a dependency bump's: the vendored module's, not requirements.txt)
        assert path and tag.signature and tag.signature in files[path] and tag.signature not in base[path]
        if tag.kind == "code-schema-migration":  # its fix forward builds too, and no longer holds the faulty reader
            fixed = dict(base)
            for file, find, replace in fix_forward(change):
                edited = apply_edit(fixed[file], find, replace)
                assert edited is not None
                fixed[file] = edited
            build(APP, fixed)
            assert tag.signature not in fixed[path or ""]
    elif tag.kind in CONFIG_KINDS:
        before = yaml.safe_load(base[f"config/{tag.service}.yaml"])
        after = yaml.safe_load(files[f"config/{tag.service}.yaml"])
        assert after.get(tag.key) == tag.value and before.get(tag.key) != tag.value
    else:
        from pytest_sremarathon.faults.change import parse_path, resolve
        doc = next(d for d in yaml.safe_load_all(files[f"manifests/{tag.service}.yaml"])
                   if d and d["kind"] == tag.object)
        assert str(resolve(doc, parse_path(tag.field or ""))) == tag.value


def test_changes_edit_disjoint_regions() -> None:
    """No two changes edit the same or adjacent lines of a file (adjacent edits would make a
    git revert of one conflict with the other)."""
    base = source_files(APP_ROOT)
    spans: dict[str, list[tuple[int, int, str]]] = {}
    for c in CATALOGUE:
        for e in c.edits:
            first, last = edited_lines(base[e.file], e.find)
            spans.setdefault(e.file, []).append((first, last, c.id))
    clashes = []
    for path, items in spans.items():
        for i, (a1, b1, c1) in enumerate(items):
            for a2, b2, c2 in items[i + 1:]:
                if c1 != c2 and not (b1 < a2 - 1 or b2 < a1 - 1):
                    clashes.append((path, c1, c2))
    assert not clashes


# -- faulty changes show in the twin, and their revert clears them ------------------------------

def _impact(service: str) -> set[str]:
    return {service} | APP.callers_of(service) | set(APP.services[service].calls)


def _zone_outage_kills(twin: Twin, service: str, zone: str) -> bool:
    """Take ``zone`` down for 15 minutes: does ``service`` end up with no serving pod? The zone
    comes back afterwards and the cluster settles."""
    twin.set_zone(zone, up=False)
    twin.tick(30)
    dead = not twin.serving_pods(service)
    twin.set_zone(zone, up=True)
    twin.tick(10)
    return dead


@pytest.mark.parametrize("change", FAULTY, ids=lambda c: c.id)
def test_faulty_change_shows_and_revert_clears_it(tmp_path: Path, healthy: Healthy, change: CuratedChange) -> None:
    tag = change.fault
    assert tag is not None
    twin = Twin(tmp_path)
    twin.tick(WARMUP_TICKS)
    assert not symptoms(twin, healthy.max_rps), "the twin is not healthy before the change"

    if tag.kind == "manifest-hotfix-undone":
        # hot-fixed live at once; the routine deploy of its trigger twenty minutes later undoes that
        change_id = ship_hotfixed_then_trigger(twin, NS, change, CATALOGUE, lambda: bool(symptoms(twin, healthy.max_rps)))
    else:
        change_id = twin.pipelines.commit_edits(NS, [(e.file, e.find, e.replace) for e in change.edits],
                                                change.message, change.author).id
        twin.pipelines.deploy(NS, "HEAD", "orchestrator")

    if tag.kind == "manifest-zone-affinity":
        # Latent by design: the pods move into one zone, and only a failure of that zone shows it.
        twin.tick(10)
        zone = tag.value or ""
        pinned = {twin.cluster.network.node_zone[p["spec"]["nodeName"]] for p in twin.pods(tag.service)}
        assert pinned == {zone}, f"{tag.service} pods are in {pinned}, not pinned to {zone}"
        assert _zone_outage_kills(twin, tag.service, zone), f"{zone} outage leaves {tag.service} serving"
        twin.pipelines.revert(NS, change_id, "orchestrator")
        twin.tick(10)
        assert not _zone_outage_kills(twin, tag.service, zone), f"after the revert a {zone} outage still kills it"
        return

    # the page the kind promises, near the service (a retry storm at night: its amplification)
    expected = EXPECTED_ALERTS[tag.kind] | ({"RequestRateAmplified"} if tag.kind == "code-retry-storm" else set())
    impact = _impact(tag.service)
    seen: set[tuple[str, str]] = set()
    for _ in range(MAX_FAULT_TICKS):
        twin.tick()
        seen |= symptoms(twin, healthy.max_rps)
        if any(name in expected and svc in impact for name, svc in seen):
            break
    assert any(name in expected and svc in impact for name, svc in seen), \
        f"{change.id} ({tag.kind}): no {sorted(expected)} on {sorted(impact)} in " \
        f"{MAX_FAULT_TICKS * TICK / 3600:.0f} virtual hours; seen: {sorted(seen)}"

    twin.pipelines.revert(NS, change_id, "orchestrator")
    if tag.kind == "code-schema-migration":
        # The revert is no repair: the old code cannot read the records the new one wrote.
        twin.tick(20)
        assert twin.mean(tag.service, "error_ratio") > 0.05, "the old code reads the new records"
        assert (EXPECTED_ALERTS[tag.kind] & {name for name, svc in symptoms(twin, healthy.max_rps) if svc in impact}), \
            "the revert of a schema migration cleared its page"
        # The documented repair: fix forward, a version that reads both layouts.
        twin.pipelines.commit_edits(NS, fix_forward(change), f"{tag.service}: read both bucket layouts",
                                    "Sam Okoro <sam@social.example>")
        twin.pipelines.deploy(NS, "HEAD", "orchestrator")
    streak = 0
    for _ in range(MAX_CLEAR_TICKS):
        twin.tick()
        left = symptoms(twin, healthy.max_rps)
        streak = 0 if left else streak + 1
        if streak >= CLEAR_STREAK:
            break
    repair = "fix forward" if tag.kind == "code-schema-migration" else "revert"
    assert streak >= CLEAR_STREAK, f"the {repair} of {change.id} did not clear {left}"


def test_retry_storm_saturates_the_cache_at_peak(tmp_path: Path) -> None:
    """At night the storm only multiplies requests; at the afternoon peak it drives memcached
    into its CPU limit and the home timeline past its latency SLO."""
    storm = next(c for c in FAULTY if c.fault and c.fault.kind == "code-retry-storm")
    twin = Twin(tmp_path, hour=15)
    twin.tick(3 * WARMUP_TICKS)  # half an hour: the home timelines have filled
    assert not twin.firing()
    cpu_before = twin.mean("post-storage-cache", "cpu_millicores", 10)
    twin.pipelines.commit_edits(NS, [(e.file, e.find, e.replace) for e in storm.edits], storm.message, storm.author)
    twin.pipelines.deploy(NS, "HEAD", "orchestrator")
    twin.tick(20)
    cpu_after = twin.mean("post-storage-cache", "cpu_millicores", 10)
    assert cpu_after > 5 * cpu_before and cpu_after > 0.6 * 250, (cpu_before, cpu_after)
    for _ in range(60):
        twin.tick()
        if ("ServiceLatencySLOBurn", "home-timeline") in twin.firing():
            break
    assert ("ServiceLatencySLOBurn", "home-timeline") in twin.firing()


def test_dns_degraded_pages_the_callers_and_the_resolver_option_clears_it(tmp_path: Path, healthy: Healthy) -> None:
    """dependency-dns-degraded (injected, no curated change): a share of lookups lost cluster-wide
    pages on the services that call others, never on one only called; the serial-resolver option
    on every calling deployment clears it, while the race goes on."""
    twin = Twin(tmp_path)
    twin.tick(WARMUP_TICKS)
    assert not symptoms(twin, healthy.max_rps)
    callers = {s for s, spec in APP.services.items() if spec.calls}
    twin.cluster.network.dns_race_share[NS] = 0.05  # what DnsDegraded.inject sets
    for _ in range(40):
        twin.tick()
        if any(n in DNS_DEGRADED_ALERTS and s in callers for n, s in twin.firing()):
            break
    assert any(n in DNS_DEGRADED_ALERTS and s in callers for n, s in twin.firing()), twin.firing()
    assert not {(n, s) for n, s in twin.firing() if s not in callers}, "a service only called paged"
    assert all(twin.mean(s, "error_ratio") == 0 for s in APP.services if s not in callers)
    patch_serial_resolver(twin, NS, callers)
    streak = 0
    for _ in range(MAX_CLEAR_TICKS):
        twin.tick()
        left = symptoms(twin, healthy.max_rps)
        streak = 0 if left else streak + 1
        if streak >= CLEAR_STREAK:
            break
    assert streak >= CLEAR_STREAK, f"the resolver option did not clear {left}"
    assert NS in twin.cluster.network.dns_race_share and all(pod_is_ready(p) for p in twin.pods())
