"""One marathon run: the session object that owns the cluster, the pipeline, the alerting,
the agent host and the recorder, and advances them together in virtual time.

    marathon = Marathon(scenario, options)
    marathon.start()
    marathon.advance_to(t)     # any number of times (pytest segment items do this)
    result = marathon.finish() # seals the bundle and scores it from the bundle alone
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from .agent.protocol import Alert, EnvironmentWire, ObservationWire
from .agent_host import AgentHost, AgentSpec, StepOutcome
from .alerts.engine import AlertEngine
from .alerts.noise import NoiseGenerator
from .alerts.rules import DEFAULT_RULES
from .apps import AppSpec
from .backends import backend_factories, resolve_backend
from .builtin import APPS_DIR as BUILTIN_APPS_DIR
from .bundle import BundleWriter, commitment, open_bundle
from .clock import EPOCH, VirtualClock, iso
from .events import (
    Action,
    Deployed,
    ExecSession,
    RunEnd,
    RunStart,
    Segment,
    SLISample,
    TruthAlert,
    TruthEffect,
    TruthFault,
    TruthFaultEnd,
    TruthFaultSkipped,
    TruthMitigation,
)
from .faults import Fault, FaultKind, builtin_registry
from .faults.catalogue import CuratedChange
from .pipeline.builds import BuildTimes
from .pipeline.service import PipelineError
from .policy import EXEC_VERBS, Decision, MutationRequest, Policy
from .provenance import Cause, Provenance
from .run_gc import RunCollector
from .scenario import Scenario
from .schedule import Schedule, generate
from .scoring import SCORING_VERSION, MarathonScore, score_bundle, score_events
from .serving.loopback import LoopbackServer
from .thinktime import StepCharge, StepClock, ThinkTime

if TYPE_CHECKING:
    from .agent_tools.server import McpServer

SLI_EVERY_TICKS = 2
SYMPTOM_GRACE = timedelta(minutes=10)
MAX_EVIDENCE = 12  # evidence items named on one truth.mitigation record
WARMUP = timedelta(minutes=5)  # symptoms outlive a fault's cleanup by a little


def _discard(path: Path) -> None:
    """Remove a directory tree without waiting for the disk: renamed away at once (nothing finds
    it by its name after this), then deleted by an ``rm -rf`` that outlives us if need be. The
    private directory's repositories hold a few thousand files, and unlinking them took 1–4 s of
    wall time at the end of every default marathon (0.1 s of CPU)."""
    try:
        doomed = path.rename(path.with_name(f"{path.name}.discarded"))
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    try:  # (the shell returns at once: nothing is left for us to wait for)
        subprocess.run(["sh", "-c", 'rm -rf -- "$1" &', "sh", str(doomed)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=10)
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(doomed, ignore_errors=True)


@dataclass
class MarathonOptions:
    agent: AgentSpec
    seed: int
    out_dir: Path
    step_budget: Optional[float] = None  # default: the scenario's agent.step_budget
    signing_key: Optional[Ed25519PrivateKey] = None
    progress: Optional[Callable[[Progress], None]] = None
    isolation: str = "auto"
    backend: str = "twin"  # a name from backend_factories(hook), or "prefix:ARG" (kubeconfig:PATH)
    keep_cluster: bool = False  # a cluster the backend created outlives the run (kind)
    think_time: Optional[ThinkTime] = None  # default: the scenario's agent.think_time


@dataclass(frozen=True)
class SegmentWindow:
    index: int
    name: str
    start: datetime
    end: datetime


def segment_windows(scenario: Scenario) -> list[SegmentWindow]:
    """The run's segments (pytest items): consecutive windows of ``segment`` virtual seconds."""
    spec = scenario.spec
    end = EPOCH + timedelta(seconds=spec.duration)
    n = max(1, int(round(spec.duration / spec.segment)))
    return [SegmentWindow(i + 1, f"segment-{i + 1:02d}", EPOCH + timedelta(seconds=i * spec.segment),
                          min(end, EPOCH + timedelta(seconds=(i + 1) * spec.segment))) for i in range(n)]


@dataclass(frozen=True)
class Progress:
    now: datetime
    end: datetime
    injected: int
    active: int
    firing: int
    steps: int


@dataclass
class RunResult:
    score: MarathonScore
    bundle: Path
    run_id: str
    virtual_seconds: float
    wall_seconds: float
    schedule: Schedule
    isolation: str
    think_time: str = "frozen"


class _Admission:
    """The policy point of every mutating request, and its recorder. Each agent action gets an
    id (``act-00042``); an allowed one is expected to change the objects it targets, which is
    how provenance links the cluster's state to it."""

    def __init__(self, marathon: Marathon, policy: Policy) -> None:
        self.marathon = marathon
        self.policy = policy
        self._lock = threading.Lock()
        self._count = 0

    def decide(self, req: MutationRequest) -> Decision:
        return self.policy.decide(req)

    def record(self, req: MutationRequest, decision: Decision, status: int) -> Optional[str]:
        if req.actor != "agent":
            return None
        m = self.marathon
        with self._lock:
            self._count += 1
            action_id = f"act-{self._count:05d}"
        # A pipeline action whose build takes time changes the cluster when its build is done:
        # provenance expects it then (Marathon.emit, on its pipeline.deploy), not now.
        deferred = req.channel == "pipeline" and getattr(m.pipelines, "defers", False)
        # An exec changes no object: nothing for provenance to expect. Its record names the
        # container and the command line.
        exec_ = req.verb in EXEC_VERBS
        if decision.allowed and status < 400 and m.provenance is not None and not deferred and not exec_:
            m.provenance.expect(Cause("agent", m.clock.now, action_id), req.target)
        detail = decision.message or None
        if exec_ and isinstance(req.body, dict):
            line = f"container {req.body.get('container') or '?'}: {shlex.join(req.body.get('command') or [])}"
            detail = f"{detail} ({line})" if detail else line
        m.emit("action", Action(actor="agent", channel="pipeline" if req.channel == "pipeline" else "kube",
                                id=action_id, verb=req.verb, target=req.target, app=req.app or req.namespace,
                                allowed=decision.allowed, rule=decision.rule, status=status, detail=detail))
        return action_id

    def record_exec(self, action: Optional[str], req: MutationRequest, outcome: dict[str, Any]) -> None:
        """The end of an agent's exec or attach session (``serving.http.ExecRecorder``)."""
        if req.actor != "agent":
            return
        self.marathon.emit("agent.exec", ExecSession(action=action, verb="attach" if req.verb == "attach" else "exec",
                                                     **outcome))


class Marathon:
    def __init__(self, scenario: Scenario, options: MarathonOptions, hook: Any = None) -> None:
        self.scenario = scenario
        self.options = options
        self.hook = hook
        spec = scenario.spec
        self.clock = VirtualClock(EPOCH - WARMUP)  # the cluster comes up before the run starts
        self.start_time = EPOCH
        self.end_time = EPOCH + timedelta(seconds=spec.duration)
        self.tick_seconds = spec.tick
        self.segments = segment_windows(scenario)
        self.apps: dict[str, AppSpec] = {a.namespace: a for a in scenario.apps}
        self.registry: dict[str, FaultKind] = builtin_registry(hook.pytest_sremarathon_fault_kinds() if hook else ())
        self.provenance: Optional[Provenance] = None  # from the end of the warm-up on
        self.think: ThinkTime = options.think_time or spec.agent.think
        self.stepclock: Optional[StepClock] = None
        self._sim_time = self.clock.now  # virtual time of the last tick (ticks fall on a fixed grid)
        self._next_step_at = self.start_time + timedelta(seconds=spec.cadence)
        self.run_id = f"{spec.name}-seed{options.seed}-{time.strftime('%Y%m%dT%H%M%S')}-{secrets.token_hex(2)}"
        self.run_dir = Path(options.out_dir).resolve() / self.run_id
        self._emit_lock = threading.Lock()
        self._ticks = 0
        self._steps = 0
        self._alerts_seen: dict[str, Alert] = {}
        self._changed_since_step: dict[str, Alert] = {}
        self._attribution: dict[str, list[str]] = {}
        self._wall_steps: list[float] = []
        self._sync: Optional[Callable[[], None]] = None
        self._wall_start = 0.0
        self._started = False
        self._finished: Optional[RunResult] = None
        self.collector = RunCollector()
        self.host: Optional[AgentHost] = None
        self.mcp: Optional[McpServer] = None
        self.server: Optional[LoopbackServer] = None

    # -- World (what fault kinds act on) ----------------------------------------------------
    def curated(self, app: str, change_id: str) -> CuratedChange:
        for c in self.scenario.catalogues.get(app, []):
            if c.id == change_id:
                return c
        raise KeyError(f"no curated change {change_id!r} for app {app!r}")

    # -- recording -------------------------------------------------------------------------
    def emit(self, type_: str, data: Any) -> None:
        with self._emit_lock:
            self.writer.emit(self.clock.now, type_, data)
        if isinstance(data, Deployed) and self.provenance is not None:
            if data.actor == "orchestrator":
                # What the orchestrator's own deploys change is the orchestrator's, even where the
                # agent touched the same objects a moment before.
                self.provenance.expect(Cause("orchestrator", self.clock.now), f"pipeline/{data.app}")
            elif data.action:
                # The agent's revert or deploy, built: it takes effect now, as that action.
                self.provenance.expect(Cause("agent", self.clock.now, data.action), f"pipeline/{data.app}")

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._wall_start = time.perf_counter()
        spec, seed = self.scenario.spec, self.options.seed
        self.writer = BundleWriter(self.run_dir, signing_key=self.options.signing_key)
        self.schedule = generate(self.scenario, self.registry, seed, self.start_time)
        pc = spec.pipeline
        self.build_times = None if pc.builds == "instant" else BuildTimes(
            seed, sorted(self.apps), mu=pc.build_ln_minutes_mu, sigma=pc.build_ln_minutes_sigma, low=pc.build_min,
            high=pc.build_max, jitter=pc.build_jitter)
        self._committed_schedule = self.schedule.to_json()
        self._scheduled = {f.id: f.start for f in self.schedule.faults}
        self._salt = hashlib.sha256(f"sremarathon-salt:{seed}:{self.scenario.digest}".encode()).hexdigest()
        self.emit("run.start", RunStart(
            scenario=spec.name, scenario_digest=self.scenario.digest, seed=seed, agent=self.options.agent.label,
            backend=self.options.backend, apps=sorted(self.apps), start=iso(self.start_time), end=iso(self.end_time),
            tick_seconds=spec.tick, cadence_seconds=spec.cadence,
            segments=[Segment(name=s.name, start=iso(s.start), end=iso(s.end)) for s in self.segments],
            ground_truth_commitment=commitment(self._salt, self._committed_schedule),
            scoring_version=SCORING_VERSION, think_time=str(self.think),
            builds=None if self.build_times is None else {
                "model": pc.builds, "seconds": dict(self.build_times.base), "jitter": pc.build_jitter}))
        self.writer.add_file("scenario.yaml", self.scenario.text)

        # Private state the agent must never see: the repos (with their future) and the change catalogue.
        self.private_dir = Path(tempfile.mkdtemp(prefix="sremarathon-private-"))
        self.admission = _Admission(self, Policy(tuple(spec.policy.rules)))
        agent_token = secrets.token_urlsafe(24)
        factory = resolve_backend(self.options.backend, self.hook, keep_cluster=self.options.keep_cluster, seed=seed)
        if factory is None:
            raise ValueError(f"unknown backend {self.options.backend!r}; available: "
                             f"{', '.join(sorted(backend_factories(self.hook)))}")
        self.backend = factory(self.scenario, self.clock, emit=self.emit, admission=self.admission,
                               private_dir=self.private_dir, tokens={agent_token: "agent"})
        self.store, self.cluster, self.pipelines = self.backend.store, self.backend.cluster, self.backend.pipelines
        self.server = self.backend.server

        rng = random.Random(f"noise:{seed}")
        targets = {"service": [f"{ns}/{s}" for ns, a in sorted(self.apps.items()) for s in a.services],
                   "node": [n for n, _ in self.cluster.topology.node_names()]}
        self.alerts = AlertEngine(DEFAULT_RULES, NoiseGenerator(spec.alerts.noise, rng, targets))
        rules = getattr(self.backend, "rules", None)  # the monitoring namespace's Prometheus shows them
        if rules is not None:
            rules.source = self.alerts
        feed = getattr(self.backend, "alert_feed", None)  # its Alertmanager shows the Observation's alerts
        if feed is not None:
            feed.source = self._alerts_seen.values
        while self.clock.now < self.start_time:  # pods scheduled, started and ready before t=0
            self.clock.advance(self.tick_seconds)
            self.backend.tick(self.tick_seconds, random.Random(f"warmup:{seed}:{self.clock.now.isoformat()}"))
        settled = getattr(self.backend, "settled", None)  # the warm-up's start-up failures are not the run's
        if settled is not None:
            settled()
        self.collector.start()  # what the warm-up built lives as long as the run (run_gc.py)
        self._sim_time = self.clock.now
        self.pipelines.configure(self.build_times)  # from t=0 on, builds take their time
        self.provenance = Provenance(self.store)
        self.workspace = Path(tempfile.mkdtemp(prefix=f"sremarathon-workspace-{self.run_id}-"))
        self.pipelines.attach_workspace(self.workspace)  # <workspace>/<app>: a checkout to commit to
        kubeconfig = self.server.write_kubeconfig(self.workspace / ".kube" / "config", agent_token)
        urls = dict(getattr(self.backend, "urls", None) or {})  # the monitoring services' direct URLs
        env = EnvironmentWire(workspace=str(self.workspace), kubeconfig=str(kubeconfig), apps=sorted(self.apps),
                              cadence_seconds=spec.cadence, server=self.server.url, token=agent_token,
                              prometheus_url=urls.get("prometheus"), alertmanager_url=urls.get("alertmanager"),
                              jaeger_url=urls.get("jaeger-query"))
        # Every app's change catalogue beside the scenario's: it tells faulty changes from benign.
        # The package's own (built-in) catalogues too, wherever the package is installed (site-
        # packages, a checkout): a scenario running copies of the apps has the same changes there.
        catalogues = {a.root.resolve().parent for a in self.apps.values()} | {BUILTIN_APPS_DIR.resolve()}
        hide = [Path(self.options.out_dir).resolve(), self.private_dir] + \
            sorted(d for root in catalogues for d in root.glob("*/changes") if d.is_dir())
        budget = self.options.step_budget or spec.agent.step_budget
        self.host = AgentHost(self.options.agent, env, step_budget=budget,
                              stderr_path=self.run_dir / "agent" / "stderr.log", hide=hide,
                              isolation=self.options.isolation, limits=spec.agent.limits)  # type: ignore[arg-type]
        self._start_mcp(agent_token, urls, budget)
        self._record_step(-1, self.host.start())
        if self.think.charged:
            self.stepclock = StepClock(self.think, self.clock, self._advance_during_step, lambda: self.end_time)
            self.server.gate = self.stepclock.gate
            stepclock = self.stepclock
            self.host.simulating = lambda: stepclock.simulated  # the step budget is the agent's own time
            self.stepclock.hold()  # from here on the agent's requests are served within steps

    def _start_mcp(self, token: str, urls: dict[str, str], budget: float) -> None:
        """The run's MCP server (issue 17): the agent's tools over its own endpoints and token."""
        from .agent_tools.config import Endpoints
        from .agent_tools.rules import Game
        from .agent_tools.server import McpServer

        assert self.host is not None and self.server is not None
        spec = self.scenario.spec
        game = Game(scenario=spec.name, apps=tuple(sorted(self.apps)), cadence_seconds=spec.cadence,
                    step_budget_seconds=budget, think_time=str(self.think), policy_rules=tuple(spec.policy.rules),
                    limits=spec.agent.limits.describe())
        jaeger = urls.get("jaeger-query")  # the monitoring namespace's Jaeger query Service (JAEGER_URL)
        # A per-step command is there for the tools: ready before its first step. Other agents may
        # never connect: the server starts at their first connection.
        self.mcp = McpServer(Endpoints(self.server.url, token, urls.get("prometheus"), jaeger), game,
                             self.host.run_sandboxed).start(eager=self.options.agent.exec is not None)
        self.host.attach_mcp(self.mcp.url, self.mcp.submissions)

    def advance_to(self, t: datetime) -> None:
        """Run ticks (and agent steps at the cadence) until virtual time ``t``."""
        self.start()
        t = min(t, self.end_time)
        while self.clock.now < t:
            self._tick()

    def finish(self, reason: str = "completed", error: Optional[str] = None) -> RunResult:
        """Stop everything, seal the bundle and score it from the bundle alone. Idempotent."""
        if self._finished is not None:
            return self._finished
        self.start()
        try:
            if reason == "completed":
                self.advance_to(self.end_time)
        finally:
            self._shutdown()
            self.collector.finish()  # (the host process's own collector again)
        for f in self.schedule.faults:
            if f.injected and not f.ended:
                f.ended = True
                self.emit("truth.fault_end", TruthFaultEnd(id=f.id, how="run-end"))
            elif f.arrived and not f.injected and not f.ended:
                f.ended = True
                self.emit("truth.fault_skipped", TruthFaultSkipped(
                    id=f.id, reason="its change was still in the pipeline when the run ended"))
        self.emit("run.end", RunEnd(reason=reason, steps=self._steps, error=error))  # type: ignore[arg-type]
        wall = time.perf_counter() - self._wall_start
        self.writer.add_file("wall.json", json.dumps({
            "wall_seconds": round(wall, 3), "step_wall_seconds": [round(x, 4) for x in self._wall_steps],
            "isolation": self.host.isolation if self.host else "none"}, indent=1))
        ground_truth = {"schedule": self._committed_schedule, "alerts": self._attribution,
                        "faults": [{"id": f.id, "component": f.component, "change": f.change, "kind": f.kind,
                                    "injected": f.injected} for f in self.schedule.faults]}
        archive = self.writer.seal(ground_truth, self._salt, {
            "run_id": self.run_id, "agent": self.options.agent.label,
            "isolation": self.host.isolation if self.host else "none",
            "virtual_seconds": (self.clock.now - self.start_time).total_seconds()})
        bundle = open_bundle(archive)
        scorer = self.hook.pytest_sremarathon_choose_scorer(bundle=bundle) if self.hook else None
        score = scorer(bundle) if scorer else score_bundle(bundle)
        shutil.rmtree(self.run_dir, ignore_errors=True)  # the archive holds everything now
        _discard(self.private_dir)
        self._finished = RunResult(score=score, bundle=archive, run_id=self.run_id,
                                   virtual_seconds=(self.clock.now - self.start_time).total_seconds(),
                                   wall_seconds=wall, schedule=self.schedule,
                                   isolation=self.host.isolation if self.host else "none",
                                   think_time=str(self.think))
        return self._finished

    def run(self) -> RunResult:
        try:
            self.start()
            self.advance_to(self.end_time)
        except KeyboardInterrupt:
            return self.finish("interrupted")
        except Exception as exc:
            self.finish("error", f"{type(exc).__name__}: {exc}")
            raise
        return self.finish()

    def _shutdown(self) -> None:
        if self.stepclock is not None:
            self.stepclock.close()
        if self.host is not None:
            self.host.close()
        if self.mcp is not None:
            self.mcp.stop()
        if self.server is not None:
            self.backend.close()

    @property
    def result(self) -> Optional[RunResult]:
        """The sealed and scored run, once :meth:`finish` has run."""
        return self._finished

    # -- live results (for pytest segment items) --------------------------------------------
    def score_now(self) -> MarathonScore:
        return score_events(self.writer.events, until=self.clock.now, attribution=self._attribution)

    def faults_in(self, segment: SegmentWindow) -> list[Fault]:
        """The faults scheduled to arrive in ``segment`` (by their scheduled start: a faulty
        change's window starts later, when its build is deployed, and it stays in this segment)."""
        return [f for f in self.schedule.faults if segment.start <= self._scheduled[f.id] < segment.end]

    # -- one tick --------------------------------------------------------------------------
    def _tick(self, during_step: bool = False) -> None:
        """One tick on the fixed grid. ``during_step``: a tick that falls due while the agent's
        step runs (charged think time): no step starts in it, and what the agent wrote since
        the last look is the agent's before the orchestrator acts."""
        dt = self.tick_seconds
        now = self._sim_time + timedelta(seconds=dt)
        self._sim_time = now
        if now > self.clock.now:
            self.clock.now = now
        self._ticks += 1
        if during_step:
            self._observe("agent")
        self._orchestrate(now)
        self._observe("orchestrator")
        step_due = not during_step and now >= self._next_step_at
        if step_due:
            self._sync = self.pipelines.sync_workspace()
        self.pipelines.advance(now)  # builds done: their rollouts start; rollouts followed
        self._activate(now)
        self.backend.tick(dt, random.Random(f"tick:{self.options.seed}:{self._ticks}"))
        self._observe(None)  # controllers' work; on a real cluster, the agent's writes show up here
        for tr in self.alerts.evaluate(now, dt, self.cluster, self.apps):
            self._alerts_seen[tr.alert.id] = tr.alert
            self._changed_since_step[tr.alert.id] = tr.alert
            self.emit("alert", {"alert": tr.alert.model_dump(mode="json")})
            if tr.alert.status == "firing":
                faults = [] if tr.noise else self._attribute(tr.alert, now)
                self._attribution[tr.alert.id] = faults
                self.emit("truth.alert", TruthAlert(alert=tr.alert.id, faults=faults))
        self._judge_mitigation(now)
        if self._ticks % SLI_EVERY_TICKS == 0:
            self._record_sli()
        if step_due:
            self._agent_step(now)
        self.collector.tick_done()
        if self.options.progress and self._ticks % max(1, int(3600 / dt)) == 0:
            self.options.progress(Progress(now, self.end_time, sum(f.injected for f in self.schedule.faults),
                                           sum(f.injected and not f.ended for f in self.schedule.faults),
                                           sum(a.status == "firing" for a in self._alerts_seen.values()), self._steps))

    def _orchestrate(self, now: datetime) -> None:
        for f in self.schedule.faults:
            if f.injected and not f.ended and f.end <= now:
                self.registry[f.kind].cleanup(self, f)
                f.ended = True
                self.emit("truth.fault_end", TruthFaultEnd(id=f.id, how="cleanup"))
        for c in self.schedule.benign:
            if c.at == now:
                curated = self.curated(c.app, c.change)
                try:
                    self.pipelines.commit_edits(c.app, [(e.file, e.find, e.replace) for e in curated.edits],
                                                curated.message, curated.author)
                    self.pipelines.deploy(c.app, "HEAD", "orchestrator")
                except Exception:  # noqa: BLE001 - an agent's edit may have made it inapplicable
                    continue
        for f in self.schedule.faults:
            if not f.arrived and not f.ended and f.start <= now:
                try:
                    self.registry[f.kind].inject(self, f)
                except PipelineError as exc:  # the tree moved under the change: skip, say why
                    f.ended = True
                    self.emit("truth.fault_skipped", TruthFaultSkipped(id=f.id, reason=str(exc)))
                    continue
                f.arrived = True
                self._activate(now, f)

    def _activate(self, now: datetime, only: Optional[Fault] = None) -> None:
        """A fault whose cause has arrived becomes active when it takes effect — a faulty
        change when the rollout of a deploy containing it starts (it queued for a build first);
        other kinds at once. Its window starts then and lasts as long as scheduled."""
        for f in ([only] if only is not None else self.schedule.faults):
            if not f.arrived or f.injected or f.ended or not self.registry[f.kind].active(self, f):
                continue
            if now > f.start:
                f.end = now + (f.end - f.start)
                f.start = now
            f.injected = True
            self.emit("truth.fault", TruthFault(id=f.id, kind=f.kind, app=f.app, component=f.component,
                                                change=f.change, start=iso(f.start), planned_end=iso(f.end),
                                                description=f.description,
                                                impact=sorted(f"{ns}/{svc}" for ns, svc in f.impact),
                                                nodes=sorted(f.nodes | {n for n, z in self.cluster.network.node_zone.items()
                                                                        if z in f.zones})))

    def _attribute(self, alert: Alert, now: datetime) -> list[str]:
        labels = alert.labels
        out = []
        for f in self.schedule.faults:
            if not f.injected or now < f.start or now >= f.end + SYMPTOM_GRACE:
                continue
            if "service" in labels and (labels.get("namespace", ""), labels["service"]) in f.impact:
                out.append(f.id)
            elif "service" not in labels and (labels.get("node") in f.nodes or labels.get("zone") in f.zones):
                out.append(f.id)
        return out

    def _judge_mitigation(self, now: datetime) -> None:
        for f in self.schedule.faults:
            if not f.injected or f.ended:
                continue
            mitigated = self.registry[f.kind].mitigated(self, f)
            if mitigated != f.mitigated:
                f.mitigated = mitigated
                if not mitigated:
                    self.emit("truth.mitigation", TruthMitigation(fault=f.id, mitigated=False))
                    continue
                self.emit("truth.mitigation", self._attribute_mitigation(f))

    def _attribute_mitigation(self, f: Fault) -> TruthMitigation:
        """Whose hand made ``f``'s condition true, judged on what the condition reads
        (``FaultKind.evidence``): see :meth:`Provenance.attribute`."""
        assert self.provenance is not None
        a = self.provenance.attribute(self.registry[f.kind].evidence(self, f), since=f.start)
        return TruthMitigation(fault=f.id, mitigated=True, by=a.by,
                               actions=list(a.actions), evidence=list(a.evidence[:MAX_EVIDENCE]))

    def _observe(self, only: Optional[str]) -> None:
        """Let provenance attribute what changed since its last look; record the agent's effects."""
        if self.provenance is None:
            return
        self.provenance.observe(only=only)
        for e in self.provenance.drain_effects():
            self.emit("truth.effect", TruthEffect(action=e.action, object=e.object, aspect=e.aspect))

    def _record_sli(self) -> None:
        m = self.cluster.metrics
        services = {}
        for ns, svc in m.services():
            services[f"{ns}/{svc}"] = [round(m.latest(ns, svc, "requests_per_second"), 3),
                                       round(m.latest(ns, svc, "error_ratio"), 4),
                                       round(m.latest(ns, svc, "latency_p99_ms"), 1)]
        self.emit("sli", SLISample(services=services))

    def _agent_step(self, now: datetime) -> None:
        assert self.host is not None
        self._steps += 1
        obs = ObservationWire(time=now, step=self._steps, alerts=list(self._alerts_seen.values()),
                              new_alerts=list(self._changed_since_step.values()))
        self._changed_since_step = {}
        if self._sync is not None:
            self._sync()  # the checkouts' origin/main, fetched while this tick was simulated
            self._sync = None
        if self.hook:
            self.hook.pytest_sremarathon_adjust_observation(observation=obs, marathon=self)
        assert self.host is not None
        host = self.host
        due = self._next_step_at
        if self.stepclock is not None:
            outcome, charge = self.stepclock.run_step(lambda: host.step(obs))
        else:
            outcome, charge = host.step(obs), StepCharge(now, now)
        self._observe("agent")
        # The next step is due a cadence after this one was; if this one ran past that, the next
        # starts at the first tick after it ended (steps never overlap; missed ones are not made up).
        cadence = timedelta(seconds=self.scenario.spec.cadence)
        nxt = due + cadence
        overrun = max(0.0, (charge.ended - nxt).total_seconds())
        while nxt + cadence <= charge.ended:
            nxt += cadence
        self._next_step_at = nxt
        self._record_step(self._steps, outcome, charge, due, overrun)
        if self.hook:
            self.hook.pytest_sremarathon_step_report(step=self._steps, outcome=outcome, marathon=self)

    def _advance_during_step(self, target: datetime) -> None:
        """Virtual time moves on while the agent thinks (charged think time): run every tick
        due up to ``target``, then set the clock to it. Only the marathon thread calls this."""
        dt = timedelta(seconds=self.tick_seconds)
        while self._sim_time + dt <= target:
            self._tick(during_step=True)
        if target > self.clock.now:
            self.clock.now = target

    def _record_step(self, step: int, outcome: StepOutcome, charge: Optional[StepCharge] = None,
                     due: Optional[datetime] = None, overrun: float = 0.0) -> None:
        self._wall_steps.append(outcome.wall_seconds)
        if step < 0:  # setup: recorded only when it failed
            if not outcome.ok:
                self.emit("agent.step", outcome.record(0).model_copy(update={"report": None}))
            return
        record = outcome.record(step)
        if charge is not None:
            record = record.model_copy(update={
                "started": iso(charge.started), "due": iso(due or charge.started),
                "virtual_seconds": round(charge.seconds, 3),
                "requests": charge.requests if self.think.charged else None,  # (frozen: not counted)
                "overrun_seconds": round(overrun, 3)})
        self.emit("agent.step", record)
