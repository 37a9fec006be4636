"""The pytest plugin: options, collection of marathon files, segment items, the session object
that owns the running marathons, baseline judging, CI gating, JUnit/HTML reporting and the
terminal summary.

    pytest --agent=mypkg.agent:Agent --junitxml=out.xml                 # the built-in marathon
    pytest --agent=mypkg.agent:Agent --marathon-scenario smoke           # the 2-hour one
    pytest ci/marathon.yaml --agent=mypkg.agent:Agent                   # a marathon file of yours

A marathon file collects as one ``marathon[seed=N]`` per seed, each with one item per segment
in time order. Running an item advances that marathon past the segment (and past the end of
every fault injected in it), then asserts each of those faults' stage progress.

With an agent and no test paths on the command line, a project without a marathon file gets
the session's scenario (``--marathon-scenario``, else ``<rootdir>/scenarios/marathon.yaml``,
else the built-in ``default``) collected as ``sremarathon:<name>``. Without an agent, nothing
of the plugin runs in a project without marathon files, and its start-up imports nothing heavy
(the machinery is imported when a marathon is collected).

Where things happen (so that ``pytest -n`` behaves like a plain run):

* a segment item runs where its marathon runs (one process, or one xdist worker per marathon:
  ``xdist_group`` markers plus ``--dist loadgroup``);
* what an item found rides on its report (``report.sremarathon``, like Hypothesis's
  statistics), so the controller builds the summary, the gate, the baseline update and the JUnit
  extras from reports alone (:class:`Scoreboard`), never from a worker's marathons.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import pytest

from . import builtin, hookspecs
from .baseline_file import Baseline
from .errors import SremarathonError
from .scoreboard import Scoreboard
from .scoreboard import report_outcome as _outcome
from .settings import DEFAULT_OUT, DEFAULT_PROGRESS_SECONDS, Settings, read_settings
from .settings import option as _opt

if TYPE_CHECKING:  # the machinery is imported when a marathon is collected, not at pytest's start
    from .marathon import Marathon, MarathonOptions, Progress, RunResult, SegmentWindow
    from .scenario import Scenario
    from .scoring import FaultResult, MarathonScore

pytest_plugins = ("pytest_sremarathon.fixtures",)

USAGE_EXAMPLE = "pytest --agent=pytest_sremarathon.baselines:RollbackAgent"
RESULT_KEY = pytest.StashKey["SegmentResult"]()
RUN_REPORT_KEY = pytest.StashKey["tuple[Optional[Path], str]"]()


# -- options --------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sremarathon", "SRE marathons (pytest-sremarathon)")

    def add(name: str, help: str, ini_type: Optional[str] = None, **kw: Any) -> None:
        ini = name.lstrip("-").replace("-", "_")
        group.addoption(name, dest=ini, help=help, **kw)
        if ini_type == "bool":
            parser.addini(ini, help=help, type="bool", default=False)
        else:
            parser.addini(ini, help=help, default=None)

    add("--agent", "the agent under test, as pkg.module:Class", metavar="PKG.MOD:CLASS")
    add("--agent-cmd", "an agent command speaking the JSON-lines protocol (instead of --agent)", metavar="COMMAND")
    add("--marathon-seeds", "comma-separated seeds; one marathon per seed (default: the scenario's seed)",
        metavar="N[,N…]")
    add("--marathon-backend", "cluster backend: twin (default), kind (a two-zone kind cluster), kubeconfig:PATH "
        "(an existing cluster) or one registered by a pytest_sremarathon_backends hook", metavar="NAME")
    add("--marathon-keep-cluster", "keep the kind cluster a run created (the next run reuses it)", ini_type="bool",
        action="store_true", default=None)
    add("--marathon-out", f"directory for sealed bundles (default: <rootdir>/{DEFAULT_OUT})", metavar="DIR")
    add("--marathon-min-score", "fail the session when a marathon scores below this (0-100)", metavar="N")
    add("--marathon-baseline", "baseline results file: faults that failed in it are expected failures "
        "(xfail strict); a fault that passed in it and fails now is a regression", metavar="FILE")
    add("--marathon-update-baseline", "rewrite --marathon-baseline with this session's results", ini_type="bool",
        action="store_true", default=None)
    add("--marathon-step-budget", "wall seconds an agent step may take (default: the scenario's)", metavar="SECONDS")
    add("--marathon-think-time", "what the agent's thinking costs in virtual time: frozen, per-request:SECONDS "
        "(each request the agent makes costs SECONDS) or wall[:FACTOR] (the step's wall time x FACTOR); default: "
        "the scenario's agent.think_time", metavar="MODE")
    add("--marathon-signing-key", "ed25519 private key file to sign bundles with", metavar="FILE")
    add("--marathon-scenario", "the session's marathon: a built-in scenario's name (" + builtin.names_line() +
        ") or a scenario file. It runs when no marathon file is collected, and it is the marathon of the "
        "marathon fixtures (a marathon_scenario marker wins). Default: <rootdir>/scenarios/marathon.yaml "
        "if there is one, else the built-in default", metavar="NAME|FILE")
    parser.addini("marathon_progress_interval", "at least this many wall seconds between two progress lines of "
                  f"a marathon (default {DEFAULT_PROGRESS_SECONDS:g}; 0 = every virtual hour)", default=None)


# -- plugin wiring --------------------------------------------------------------------------
def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With ``-n`` and no ``--dist``, pick ``loadgroup`` so that each marathon stays on one
    worker, in segment order (before xdist picks ``load``, which would split a marathon)."""
    option = config.option
    if not getattr(option, "numprocesses", None) or not hasattr(option, "dist"):
        return
    if not (_opt(config, "agent") or _opt(config, "agent_cmd")):
        return  # no marathon can run: leave the user's tests alone
    if option.dist == "no" and not getattr(option, "distload", False):
        option.dist = "loadgroup"
        config.stash[AUTO_DIST_KEY] = True
    elif option.dist in ("load", "worksteal"):
        raise pytest.UsageError(
            f"--dist {option.dist} would split a marathon's segments across workers (each would run its own "
            f"copy of the marathon); use --dist loadgroup, or leave --dist out with -n and it is chosen for you")


AUTO_DIST_KEY = pytest.StashKey[bool]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sremarathon: a marathon segment (added by pytest-sremarathon)")
    config.addinivalue_line("markers", "marathon_scenario(name_or_path, seeds=None): the marathon (a built-in "
                                       "scenario's name, or a path relative to the rootdir) the marathon fixtures "
                                       "(cluster, fault_schedule, agent, marathon, marathon_result) of this test use")
    session = config.stash[SESSION_KEY] = MarathonSession(config, read_settings(config))
    if session.settings.has_agent:  # without an agent no marathon runs: none of its hooks are needed
        config.pluginmanager.register(session, "sremarathon-session")
    session.baseline  # a missing or broken baseline file is a usage error now, not in a test
    if _distributing(config):
        # Workers' usage errors never reach the user: check on the controller, once.
        session.check_before_distributing()
        config.pluginmanager.register(_XdistController(config), "sremarathon-xdist")
    workerinput = getattr(config, "workerinput", {})
    if workerinput.get("sremarathon_loadgroup"):
        # Workers parse the original command line (no --dist there): tell xdist's worker side
        # that the controller schedules by group, so it suffixes node ids with "@<group>".
        config.option.loadgroup = True
    if workerinput.get("sremarathon_agent_checked"):
        session.agent_checked = True


def _distributing(config: pytest.Config) -> bool:
    """Is this the controller of an xdist run (which collects nothing itself)?"""
    return (not _is_worker(config) and getattr(config.option, "dist", "no") != "no"
            and bool(getattr(config.option, "tx", None)) and not config.getoption("collectonly", False))


class _XdistController:
    """Hands the controller's decisions to each xdist worker, and takes back the results of
    runs no report carried (sealed when the worker's session ended)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_configure_node(self, node: Any) -> None:
        if self.config.stash.get(AUTO_DIST_KEY, False):
            node.workerinput["sremarathon_loadgroup"] = True
        node.workerinput["sremarathon_agent_checked"] = session_of(self.config).agent_checked

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        board = session_of(self.config).board
        for data in getattr(node, "workeroutput", {}).get("sremarathon", []):
            board.add(data, "")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()


def session_of(config: pytest.Config) -> "MarathonSession":
    return config.stash[SESSION_KEY]


def pytest_report_header(config: pytest.Config) -> list[str]:
    s = session_of(config).settings
    if not s.has_agent:
        return []
    who = s.agent or f"cmd: {s.agent_cmd}"
    lines = [f"sremarathon: agent {who}; backend {s.backend}; bundles in {_display_path(config, s.out)}"]
    if _fallback_allowed(config):
        lines.append(f"sremarathon: without a marathon file in the test paths, the {_scenario_words(config)} runs")
    if s.baseline is not None:
        lines.append(f"sremarathon: baseline {_display_path(config, s.baseline)}"
                     + (" (will be rewritten)" if s.update_baseline else ""))
    if config.stash.get(AUTO_DIST_KEY, False):
        lines.append("sremarathon: --dist loadgroup (each marathon on one worker, in segment order)")
    return lines


def _display_path(config: pytest.Config, path: Path | str) -> str:
    """Relative to the rootdir when inside it (what GitLab and Jenkins resolve attachments
    against: the project directory / workspace), absolute otherwise."""
    p = Path(path)
    try:
        return p.resolve().relative_to(config.rootpath.resolve()).as_posix()
    except ValueError:
        return str(p)


# -- marathons of the session ---------------------------------------------------------------
@dataclass(eq=False)
class MarathonTarget:
    """One marathon of the session: a scenario file and a seed. Segment items and fixtures
    that name the same file and seed share one run."""

    id: str  # display id: "<file>::<scenario>[seed=N]", the marathon collector's node id
    path: Path
    scenario: Scenario
    seed: int

    @property
    def name(self) -> str:
        """``<scenario>[seed=N]``: the key in baseline files (independent of where the file is)."""
        return f"{self.scenario.name}[seed={self.seed}]"

    @property
    def group(self) -> str:
        """The ``xdist_group`` name (no brackets: xdist reads a ``]`` after ``@`` as a parameter)."""
        return f"sremarathon-{self.scenario.name}-seed{self.seed}"


class MarathonCrashed(Exception):
    pass


@dataclass
class SegmentResult:
    """What a segment item found, carried on the report (so it crosses xdist workers)."""

    marathon: str
    run: str
    segment: str
    index: int
    segments: int
    faults: list[dict[str, Any]]
    score_so_far: float
    bundle: str
    scenario_digest: str
    agent: str
    final: Optional[dict[str, Any]] = None
    baseline: Optional[str] = None  # "expected", "improved", "regression" or None (judged without one)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(eq=False)  # registered as a plugin: must stay hashable
class MarathonSession:
    """Owns the marathons of a pytest process (one per scenario file and seed), judges
    segments against the baseline, and (on the controller) keeps the scoreboard."""

    config: pytest.Config
    settings: Settings
    targets: dict[tuple[str, int], MarathonTarget] = field(default_factory=dict)
    running: dict[str, Marathon] = field(default_factory=dict)
    results: dict[str, RunResult] = field(default_factory=dict)
    crashed: dict[str, str] = field(default_factory=dict)
    usage_errors: list[str] = field(default_factory=list)
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    board: "Scoreboard" = field(default_factory=lambda: Scoreboard())
    reasons: dict[str, str] = field(default_factory=dict)  # how each sealed run ended
    reported: set[str] = field(default_factory=set)  # runs whose final result rode on a report
    gate_failures: list[str] = field(default_factory=list)
    not_gated: list[str] = field(default_factory=list)
    baseline_written: Optional[str] = None
    agent_checked: bool = False
    files_collected: int = 0  # marathon files collected from the test paths
    fallback: Optional["SessionMarathon"] = None  # the session's scenario, when it was collected instead
    _agent_error: Optional[str] = None
    _baseline: Optional["Baseline"] = None
    _progress_last: dict[str, float] = field(default_factory=dict)
    _junit_pending: dict[Any, Any] = field(default_factory=dict)

    # -- targets and runs ------------------------------------------------------------------
    def scenario(self, path: Path) -> Scenario:
        key = str(path.resolve())
        if key not in self.scenarios:
            from .scenario import load_scenario

            self.scenarios[key] = load_scenario(path)
        return self.scenarios[key]

    def target(self, path: Path, scenario: Scenario, seed: int, id: Optional[str] = None) -> MarathonTarget:
        key = (str(path.resolve()), seed)
        t = self.targets.get(key)
        if t is None:
            display = id or f"{scenario_id(self.config, path)}::{scenario.name}[seed={seed}]"
            t = self.targets[key] = MarathonTarget(display, path.resolve(), scenario, seed)
        return t

    def agent_problem(self, where: Path | str) -> Optional[str]:
        """Why no marathon can run here (no agent, or one that does not load), else None."""
        if not self.settings.has_agent:
            return f"{where}: a marathon needs an agent to run; for example:\n  {USAGE_EXAMPLE}"
        if not self.agent_checked:
            self.agent_checked = True
            self._agent_error = self._agent_problem()
        return self._agent_error

    def require_agent(self, where: Path | str) -> bool:
        """False when no usable agent is configured: a usage error, raised once collection is
        over (on an xdist worker, a collection error: a worker's usage error would be lost)."""
        problem = self.agent_problem(where)
        if problem is None:
            return True
        if _is_worker(self.config):
            raise pytest.Collector.CollectError(problem)
        self.usage_errors.append(problem)
        return False

    def check_before_distributing(self) -> None:
        explicit = [a.split("::")[0] for a in self.config.args]
        marathons = [a for a in explicit if a.endswith((".yaml", ".yml")) and Path(a).is_file()]
        if not self.settings.has_agent and not marathons:
            return  # nothing of ours to run (or found later, by the workers)
        problem = self.agent_problem(marathons[0] if marathons else "--agent")
        if problem:
            raise pytest.UsageError(problem)

    def _agent_problem(self) -> Optional[str]:
        s = self.settings
        if s.agent:
            from .agent.loader import AgentLoadError, check_agent

            try:
                check_agent(s.agent)
            except AgentLoadError as exc:
                return f"--agent={s.agent}: {exc}"
            return None
        argv = shlex.split(s.agent_cmd or "")
        if not argv:
            return "--agent-cmd is empty"
        exe = argv[0]
        if "/" in exe:
            found = (Path(self.config.invocation_params.dir) / exe).exists()
        else:
            found = shutil.which(exe) is not None
        return None if found else f"--agent-cmd: command not found: {exe}"

    def options(self, target: MarathonTarget) -> MarathonOptions:
        from .agent.host import AgentSpec
        from .bundle import load_signing_key
        from .marathon import MarathonOptions
        from .thinktime import parse_think_time

        s = self.settings
        return MarathonOptions(agent=AgentSpec.from_options(s.agent, s.agent_cmd, cwd=self.config.invocation_params.dir),
                               seed=target.seed, out_dir=s.out, step_budget=s.step_budget,
                               signing_key=load_signing_key(s.signing_key) if s.signing_key else None,
                               progress=self._progress_printer(target), backend=s.backend,
                               keep_cluster=s.keep_cluster,
                               think_time=parse_think_time(s.think_time) if s.think_time else None)

    def marathon(self, target: MarathonTarget) -> Marathon:
        """The target's run, started on first use."""
        if target.id in self.crashed:
            raise MarathonCrashed(self.crashed[target.id])
        m = self.running.get(target.id)
        if m is None:
            from .marathon import Marathon

            m = self.running[target.id] = Marathon(target.scenario, self.options(target), hook=self.config.hook)
            self._progress_last[target.id] = time.monotonic()
            try:
                m.start()
            except Exception as exc:
                self.crash(target, "start", exc)
                raise
        return m

    def finish(self, target: MarathonTarget) -> RunResult:
        if target.id not in self.results:
            self.results[target.id] = self.marathon(target).finish()
            self.reasons[target.id] = "completed"
        return self.results[target.id]

    def final_data(self, target: MarathonTarget) -> dict[str, Any]:
        """A sealed run's result as it rides on a report (and in xdist's workeroutput)."""
        from .clock import parse_iso
        from .marathon import segment_windows

        self.reported.add(target.id)
        result, m = self.results[target.id], self.running[target.id]
        windows = segment_windows(target.scenario)

        def segment_of(start: str) -> str:
            t = parse_iso(start)
            return next((w.name for w in windows if w.start <= t < w.end), windows[-1].name)

        return {"marathon": target.id, "run": target.name, "segment": None, "bundle": self.bundle_path(m),
                "scenario_digest": target.scenario.digest, "agent": m.options.agent.label,
                "faults": [{**r.to_dict(), "segment": segment_of(r.start)} for r in result.score.faults],
                "final": _final_summary(result.score, self.reasons.get(target.id, "completed"))}

    def seal_unfinished(self) -> None:
        """At the session's end: seal runs no test finished (interrupted: fixtures that looked at
        part of a run, deselected segments, ``-x``) and publish the results no report carried."""
        for target in list(self.targets.values()):
            if target.id not in self.running:
                continue
            if target.id not in self.results:
                try:
                    self.results[target.id] = self.running[target.id].finish("interrupted")
                    self.reasons[target.id] = "interrupted"
                except Exception as exc:  # noqa: BLE001 - never mask the session's own outcome
                    print(f"sremarathon: could not seal {target.id}: {exc}", file=sys.stderr)
                    continue
            if target.id in self.reported:
                continue
            data = self.final_data(target)
            if _is_worker(self.config):
                self.config.workeroutput.setdefault("sremarathon", []).append(data)  # type: ignore[attr-defined]
            else:
                self.board.add(data, "")

    def crash(self, target: MarathonTarget, where: str, exc: BaseException) -> None:
        """The run broke: seal what it recorded, and fail its later segments at once."""
        m = self.running.get(target.id)
        bundle = ""
        if m is not None and target.id not in self.results:
            try:
                self.results[target.id] = m.finish("error", f"{type(exc).__name__}: {exc}")
                self.reasons[target.id] = "error"
                bundle = f"; bundle {self.bundle_path(m)}"
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass
        self.crashed[target.id] = f"marathon {target.name} stopped in {where}: {type(exc).__name__}: {exc}{bundle}"

    def bundle_path(self, m: Marathon) -> str:
        """The sealed bundle's path (it exists once the run is sealed), as attached to reports."""
        return _display_path(self.config, Path(str(m.run_dir) + ".tar.gz"))

    def close(self) -> None:
        """Seal whatever is still running (an interrupted session keeps its evidence)."""
        for key, m in self.running.items():
            if key not in self.results:
                try:
                    self.results[key] = m.finish("interrupted")
                    self.reasons[key] = "interrupted"
                except Exception as exc:  # noqa: BLE001 - never mask the session's own outcome
                    print(f"sremarathon: could not seal {key}: {exc}", file=sys.stderr)

    # -- xdist ------------------------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """On an xdist worker under ``loadgroup``: make sure our items carry the ``@<group>``
        node id suffix the controller groups by. xdist 3.8 sets it through ``item._nodeid``,
        which pytest ≥ 9.2 no longer reads (pytest-xdist#1386), so our marathons would be split
        across workers; set it on the structured id when xdist's did not take."""
        if not (_is_worker(self.config) and getattr(self.config.option, "loadgroup", False)):
            return
        for item in items:
            groups = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                      for m in item.iter_markers("xdist_group")}
            if not any(g.startswith("sremarathon-") for g in groups):
                continue
            nodeid = item.nodeid
            if nodeid.rfind("@") > nodeid.rfind("]"):
                continue  # xdist's suffix took
            _set_nodeid(item, f"{nodeid}@{'_'.join(sorted(groups))}")

    # -- baseline ---------------------------------------------------------------------------
    @property
    def baseline(self) -> Optional["Baseline"]:
        if self._baseline is None and self.settings.baseline is not None:
            self._baseline = Baseline.load(self.settings.baseline, missing_ok=self.settings.update_baseline)
        return self._baseline

    # -- progress --------------------------------------------------------------------------
    def _progress_printer(self, target: MarathonTarget) -> Optional[Callable[[Progress], None]]:
        config = self.config
        if _is_worker(config) or config.get_verbosity() < -1:
            return None  # xdist workers have no terminal; -qq asks for silence
        tr = config.pluginmanager.getplugin("terminalreporter")
        if tr is None:
            return None
        interval = self.settings.progress_interval

        def show(p: Progress) -> None:
            now = time.monotonic()
            if now - self._progress_last.get(target.id, 0.0) < interval:
                return
            self._progress_last[target.id] = now
            start = self.running[target.id].start_time if target.id in self.running else p.now
            line = (f"sremarathon: {target.name} {_hours(p.now - start)} of {_hours(p.end - start)} virtual; "
                    f"faults injected {p.injected} ({p.active} active); alerts firing {p.firing}; "
                    f"agent steps {p.steps}")
            capman = config.pluginmanager.getplugin("capturemanager")
            if capman is not None:
                with capman.global_and_fixture_disabled():
                    tr.write_line(line)
            else:
                tr.write_line(line)

        return show

    # -- reports (runs on the controller for every report, the workers' included) -----------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Iterator[None]:
        data = getattr(report, "sremarathon", None)
        segment = bool(getattr(report, "sremarathon_segment", False))
        nodeid = _strip_group(report.nodeid)
        ours = segment or (nodeid != report.nodeid and "@sremarathon-" in report.nodeid)
        xml = _junit(self.config) if ours else None
        reporter = None
        if xml is not None:
            # pytest reads a bracket in a middle id component as the last one's parameters
            # ("…segment-01]"), and xdist appends "@<group>": give the testcase its plain names.
            reporter = xml.node_reporter(report)
            classname, name = _junit_names(nodeid, segment)
            reporter.add_attribute("classname", f"{xml.prefix}.{classname}" if xml.prefix else classname)
            reporter.add_attribute("name", name)
            if data and segment:
                self._junit_pending[(report.nodeid, getattr(report, "node", None))] = data["bundle"]
        if data and report.when == "call":
            self.board.add(data, _outcome(report))
        try:
            return (yield)
        finally:
            if reporter is not None and report.when == "teardown":
                bundle = self._junit_pending.pop((report.nodeid, getattr(report, "node", None)), None)
                if bundle:
                    _attach(reporter, bundle)

    def suite_properties(self) -> None:
        """JUnit ``<testsuite>`` properties per marathon, from the scoreboard (so with xdist too)."""
        xml = _junit(self.config)
        if xml is None or _is_worker(self.config):
            return
        for key in sorted(self.board.rows):
            row = self.board.rows[key]
            if row.final:
                xml.add_global_property(f"sremarathon_score:{key}", f"{row.final['score']:.2f}")
                xml.add_global_property(f"sremarathon_declared_done_gap:{key}", f"{row.final['declared_done_gap']:.2f}")
                xml.add_global_property(f"sremarathon_localization_credit:{key}",
                                        f"{row.final.get('localization_credit', 0):.3f}")
                xml.add_global_property(f"sremarathon_scoring_version:{key}", str(row.final.get("scoring_version", 1)))
                xml.add_global_property(f"sremarathon_collateral:{key}", " ".join(
                    f"{category}={n}" for category, n in sorted((row.final.get("collateral") or {}).items())))
                xml.add_global_property(f"sremarathon_bundle:{key}", row.bundle)

    # -- gating, baseline update ------------------------------------------------------------
    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if _is_worker(self.config):
            return
        s = self.settings
        if s.min_score is not None:
            for key in sorted(self.board.rows):
                row = self.board.rows[key]
                if not row.complete:
                    self.not_gated.append(f"{row.id} did not complete ({row.reason}): not judged against "
                                          f"--marathon-min-score {s.min_score:g}")
                elif row.score is not None and row.score < s.min_score:
                    self.gate_failures.append(f"{row.id} scored {row.score:.1f} < --marathon-min-score {s.min_score:g}")
            if self.gate_failures and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if s.update_baseline and s.baseline is not None and self.board.rows:
            base = self.baseline or Baseline(s.baseline, {})
            n = base.update(self.board)
            base.write()
            self.baseline_written = f"{_display_path(self.config, s.baseline)} ({n} faults of {len(self.board.rows)} marathon(s))"

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if _is_worker(config) or not self.board.rows:
            return
        tr = terminalreporter
        tr.write_sep("=", "SRE marathon results")
        for line in self.board.table():
            tr.write_line(line)
        from .scoring import weights_line

        tr.write_line(weights_line())
        modes = {r.id: (r.final or {}).get("think_time") for r in self.board.rows.values()}
        if any(modes.values()):
            if len(set(modes.values())) == 1:
                tr.write_line(f"think time: {next(iter(modes.values()))}")
            else:
                tr.write_line("think time: " + ", ".join(f"{k} {v or '-'}" for k, v in sorted(modes.items())))
        if self.settings.baseline is not None:
            for line in self.board.baseline_lines(_display_path(config, self.settings.baseline)):
                tr.write_line(line)
        if self.baseline_written:
            tr.write_line(f"baseline updated: {self.baseline_written}")
        for line in self.not_gated:
            tr.write_line(f"not gated: {line}", yellow=True)
        for line in self.gate_failures:
            tr.write_line(f"FAILED gate: {line}", red=True, bold=True)


SESSION_KEY = pytest.StashKey[MarathonSession]()


def _hours(delta: Any) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


def _set_nodeid(item: pytest.Item, nodeid: str) -> None:
    if hasattr(item, "_id"):  # pytest ≥ 9.2: structured node ids
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(nodeid)
    else:  # pragma: no cover - older pytest (where xdist's own suffix takes)
        item._nodeid = nodeid


def _junit_names(nodeid: str, segment: bool) -> tuple[str, str]:
    """(classname, name) of a testcase: ``marathon.yaml`` / ``marathon[seed=1]::segment-01`` for
    a segment; what pytest gives a test function otherwise."""
    path, _, rest = nodeid.partition("::")
    if segment:
        return path.replace("/", "."), rest
    from _pytest.junitxml import mangle_test_address

    names = mangle_test_address(nodeid)
    return ".".join(names[:-1]), names[-1]


def _strip_group(nodeid: str) -> str:
    """xdist's loadgroup appends ``@<group>`` to node ids on workers."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


# -- JUnit ----------------------------------------------------------------------------------
def _junit(config: pytest.Config) -> Any:
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - a pytest without the private key
        return None
    return config.stash.get(xml_key, None)


def _attach(reporter: Any, bundle: str) -> None:
    """Put ``[[ATTACHMENT|bundle]]`` first in the testcase's one ``<system-out>``.

    Jenkins' junit-attachments reads every such line of a testcase's output; GitLab reads the
    first one, of failed testcases only, and breaks on a testcase with two ``system-out``
    elements. So: prepend to pytest's element when ``junit_logging`` wrote one, else add it.
    Runs after pytest finalized the testcase (its element is then frozen and kept as is).
    """
    if "to_xml" not in vars(reporter):  # not finalized (never happens with pytest's writer)
        return
    element = reporter.to_xml()
    line = f"[[ATTACHMENT|{bundle}]]"
    outs = element.findall("system-out")
    if outs:
        text = outs[0].text or ""
        if line not in text:
            outs[0].text = line + "\n" + text
        return
    out = ET.Element("system-out")
    out.text = line + "\n"
    errs = [i for i, child in enumerate(element) if child.tag == "system-err"]
    if errs:
        element.insert(errs[0], out)
    else:
        element.append(out)


# -- collection -----------------------------------------------------------------------------
def scenario_id(config: pytest.Config, path: Path) -> str:
    """How a scenario file appears in node ids: ``sremarathon:<name>`` for a built-in one, its
    path (relative to the rootdir when inside it) otherwise."""
    name = builtin.builtin_name(path)
    return f"sremarathon:{name}" if name else _display_path(config, path)


def _fallback_allowed(config: pytest.Config) -> bool:
    """May the session's scenario be collected when no marathon file is? With an agent, and when
    the command line names no test paths (then pytest collects exactly what it names)."""
    ms = config.stash.get(SESSION_KEY, None)
    return (ms is not None and ms.settings.has_agent
            and getattr(config, "args_source", None) != pytest.Config.ArgsSource.ARGS)


def _scenario_words(config: pytest.Config) -> str:
    path = session_of(config).settings.session_scenario(config.rootpath)
    name = builtin.builtin_name(path)
    return f'built-in scenario "{name}"' if name else f"scenario {_display_path(config, path)}"


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """After the test paths, the session collects its scenario (:class:`SessionMarathon`); it
    yields items only if no marathon file was found in them."""
    report = yield
    if isinstance(collector, pytest.Session) and report.passed and _fallback_allowed(collector.config):
        path = session_of(collector.config).settings.session_scenario(collector.config.rootpath)
        nodeid = scenario_id(collector.config, path)
        report.result.append(SessionMarathon.from_parent(collector, path=path, name=nodeid, nodeid=nodeid))
    return report


def pytest_report_collectionfinish(config: pytest.Config, start_path: Path, items: list[pytest.Item]) -> list[str]:
    ms = config.stash.get(SESSION_KEY, None)
    if ms is None or ms.fallback is None:
        return []
    name = builtin.builtin_name(ms.fallback.path)
    facts = f"{builtin.builtin_scenarios()[name].facts()}; " if name else ""
    return [f"sremarathon: no marathon file in the test paths: running the {_scenario_words(config)} as "
            f"{ms.fallback.nodeid} ({facts}--marathon-scenario NAME|FILE picks another)"]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    explicit = any(Path(a.split("::")[0]).resolve() == file_path.resolve() for a in parent.config.args)
    if explicit or file_path.name.startswith("marathon"):
        return MarathonFile.from_parent(parent, path=file_path)
    return None


class MarathonFile(pytest.File):
    def collect(self) -> Iterator[pytest.Collector]:
        ms = session_of(self.config)
        ms.files_collected += 1
        if not ms.require_agent(self.path):
            return  # a usage error, raised once collection is over
        try:
            scenario = ms.scenario(self.path)
        except SremarathonError as exc:
            raise self.CollectError(str(exc)) from None
        for seed in ms.settings.seeds or [scenario.spec.seed]:
            name = f"{scenario.name}[seed={seed}]"
            target = ms.target(self.path, scenario, seed, id=f"{self.nodeid}::{name}")
            yield MarathonRun.from_parent(self, name=name, target=target)


class SessionMarathon(MarathonFile):
    """The session's scenario (``--marathon-scenario``, else ``<rootdir>/scenarios/marathon.yaml``,
    else the built-in ``default``), collected after the test paths; empty when a marathon file
    was collected from them (the project's own marathons run as they always did)."""

    def collect(self) -> Iterator[pytest.Collector]:
        ms = session_of(self.config)
        if ms.files_collected:
            return
        ms.fallback = self
        yield from super().collect()


class MarathonRun(pytest.Collector):
    def __init__(self, *, target: MarathonTarget, **kw: Any) -> None:
        super().__init__(**kw)
        self.target = target
        self.add_marker(pytest.mark.xdist_group(name=target.group))

    @property
    def scenario(self) -> Scenario:
        return self.target.scenario

    @property
    def seed(self) -> int:
        return self.target.seed

    def collect(self) -> Iterator[pytest.Item]:
        from .marathon import segment_windows

        windows = segment_windows(self.scenario)  # known without starting the run
        for i, window in enumerate(windows):
            yield SegmentItem.from_parent(self, name=window.name, window=window, last=i == len(windows) - 1,
                                          count=len(windows))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    errors = session_of(config).usage_errors
    if errors:
        raise pytest.UsageError(errors[0])


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Plain test functions that use the marathon fixtures run once per marathon seed."""
    if "sremarathon_target" not in metafunc.fixturenames:
        return
    from .fixtures import targets_for

    metafunc.parametrize("sremarathon_target", targets_for(metafunc))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Seal runs that no test finished, before the summary and the JUnit file are written."""
    ms = session_of(session.config)
    ms.seal_unfinished()
    ms.suite_properties()


# -- segment items --------------------------------------------------------------------------
class SegmentFailure(Exception):
    """Some fault of the segment was not correlated, localized and repaired while active (or
    was falsely claimed resolved)."""


class BaselineExpectedFailure(SegmentFailure):
    """The segment fails only in ways the baseline already failed (an expected failure)."""


class SegmentItem(pytest.Item):
    def __init__(self, *, window: SegmentWindow, last: bool, count: int = 0, **kw: Any) -> None:
        super().__init__(**kw)
        self.window = window
        self.last = last
        self.count = count
        self.add_marker(pytest.mark.sremarathon)

    @property
    def run(self) -> MarathonRun:
        assert isinstance(self.parent, MarathonRun)
        return self.parent

    def runtest(self) -> None:
        ms = session_of(self.config)
        target = self.run.target
        try:
            marathon = ms.marathon(target)
        except MarathonCrashed as exc:
            raise SegmentFailure(str(exc)) from None
        try:
            faults = marathon.faults_in(self.window)
            for _ in range(20):  # a fault's window moves on when its change waits for a build
                until = min(max([self.window.end] + [f.end for f in faults]), marathon.end_time)
                if marathon.clock.now >= until:
                    break
                marathon.advance_to(until)
            score = ms.finish(target).score if self.last else marathon.score_now()
        except Exception as exc:
            ms.crash(target, self.name, exc)
            raise
        bundle = ms.bundle_path(marathon)
        by_id = {r.id: r for r in score.faults}
        rows = [by_id[f.id] for f in faults if f.id in by_id]
        dicts = [r.to_dict() for r in rows]
        baseline = ms.baseline
        if baseline is not None:
            for d in dicts:
                d["verdict"] = baseline.judge(target.name, d)
        result = SegmentResult(marathon=target.id, run=target.name, segment=self.window.name, index=self.window.index,
                               segments=self.count, faults=dicts, score_so_far=round(score.score, 3), bundle=bundle,
                               scenario_digest=target.scenario.digest, agent=marathon.options.agent.label,
                               final=_final_summary(score) if self.last else None)
        if self.last:
            ms.reported.add(target.id)
        self.stash[RESULT_KEY] = result
        if self.last and self.config.pluginmanager.getplugin("html") is not None:
            self.stash[RUN_REPORT_KEY] = _run_report(ms.results.get(target.id), marathon, target)
        self.user_properties.extend([
            ("sremarathon_score", f"{score.score:.2f}"),
            ("sremarathon_faults", str(len(rows))),
            ("sremarathon_stages", "; ".join(f"{r.id}:{_stages(r)}" for r in rows)),
            ("sremarathon_localization", "; ".join(f"{r.id}:{_fraction(r.localization_credit)} ({r.candidates} candidates)"
                                                   for r in rows)),
            ("sremarathon_bundle", bundle),
        ])
        print(f"[[ATTACHMENT|{bundle}]]")
        failed = [r for r in rows if not (r.correlated and r.localized and r.repaired) or r.false_claim]
        if baseline is None:
            if failed:
                raise SegmentFailure(self._message(rows, score))
            return
        self._judge(result, rows, score)

    def _judge(self, result: SegmentResult, rows: list[FaultResult], score: MarathonScore) -> None:
        """Per fault against the baseline (see README, "Gate on a baseline"): a regression fails
        the item; otherwise faults the baseline failed make it xfail(strict) — XFAIL when they
        still fail for the same (or fewer) reasons, XPASS(strict) when one of them now passes."""
        verdicts = {d["id"]: d["verdict"] for d in result.faults}
        bad = {v: sorted(i for i, x in verdicts.items() if x == v) for v in ("regression", "worse", "new")}
        expected = sorted(i for i, v in verdicts.items() if v == "expected")
        fixed = sorted(i for i, v in verdicts.items() if v == "fixed")
        notes = {"regression": "passed in the baseline, fails now",
                 "worse": "failed in the baseline, now with less progress or a new false claim",
                 "new": "not in the baseline", "expected": "failed in the baseline, fails as expected",
                 "fixed": "failed in the baseline, passes now"}
        path = self.config.stash[SESSION_KEY].settings.baseline
        lines = [f"  baseline {path.name if path else ''}: {i} {notes[v]}" for i, v in sorted(verdicts.items())
                 if v != "ok"]
        if any(bad.values()):
            result.baseline = "regression"
            raise SegmentFailure(self._message(rows, score) + "\n" + "\n".join(lines))
        if not expected and not fixed:
            return
        if fixed:
            result.baseline = "improved"
            reason = (f"improved over the baseline: {', '.join(fixed)} now pass"
                      f"{'es' if len(fixed) == 1 else ''}; record it with --marathon-update-baseline")
        else:
            result.baseline = "expected"
            reason = f"failed in the baseline too: {', '.join(expected)}"
        self.add_marker(pytest.mark.xfail(reason=reason, strict=True, raises=BaselineExpectedFailure))
        if not fixed:
            raise BaselineExpectedFailure(self._message(rows, score) + "\n" + "\n".join(lines))

    def _message(self, rows: list[FaultResult], score: MarathonScore) -> str:
        lines = [f"{self.window.name} [{self.window.start:%H:%M}–{self.window.end:%H:%M} virtual]: "
                 f"{sum(1 for r in rows if r.repaired)}/{len(rows)} faults repaired while active "
                 f"(marathon score so far {score.score:.1f})"]
        for r in rows:
            where = r.component + (f" change:{r.change}" if r.change else "")
            lines.append(f"  {r.id} {r.kind:<22} {where:<48} {_stages(r)}")
        return "\n".join(lines)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, SegmentFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"{self.run.name}::{self.name}"


def _fraction(credit: float) -> str:
    from .scoring import fraction

    return fraction(credit)


def _stages(r: FaultResult) -> str:
    def mark(ok: bool) -> str:
        return "✓" if ok else "✗"

    precision = f" (credit {_fraction(r.localization_credit)}, {r.candidates} candidates)" \
        if r.localized and r.candidates > 1 else ""
    return (f"correlated {mark(r.correlated)} localized {mark(r.localized)}{precision} "
            f"repaired-while-active {mark(r.repaired)} false-claim {'✗ (claimed while broken)' if r.false_claim else '–'}")


def _final_summary(score: MarathonScore, reason: str = "completed") -> dict[str, Any]:
    return {"reason": reason, "score": round(score.score, 3), "declared_done_gap": round(score.declared_done_gap, 3),
            "scoring_version": score.scoring_version,
            "faults": len(score.faults), "correlated": sum(f.correlated for f in score.faults),
            "localized": sum(f.localized for f in score.faults),
            "localization_credit": round(score.localization_credit, 3), "repaired": sum(f.repaired for f in score.faults),
            "collateral": {k: len(v) for k, v in score.collateral.items()},
            "claims": score.claims, "false_claims": score.false_claims, "policy_denials": score.policy_denials,
            "complete": score.complete, "think_time": score.think_time}


def _run_report(result: Optional[RunResult], marathon: Marathon,
                target: MarathonTarget) -> "tuple[Optional[Path], str]":
    """For pytest-html, on a marathon's last segment: the run's HTML report (``sremarathon
    report``, written next to the bundle) and its timeline picture as a standalone SVG (the
    page's ``#timeline`` with the page's styles); the schedule's timeline when the report
    cannot be made. Never fails the test."""
    page_path: Optional[Path] = None
    svg = ""
    if result is not None:
        try:
            import re

            from .report import write_report

            page_path = write_report(result.bundle, Path(str(result.bundle)[: -len(".tar.gz")] + ".html"))
            page = page_path.read_text(encoding="utf-8")
            found = re.search(r"<svg id=\"timeline\".*?</svg>", page, re.S)
            style = re.search(r"<style>(.*?)</style>", page, re.S)
            if found:
                svg = found.group(0)
                if style:
                    head, _, rest = svg.partition(">")
                    svg = f"{head}><style>{style.group(1)}</style>{rest}"
        except Exception:  # noqa: BLE001 - a report must never fail a test
            page_path = None
    if not svg:
        try:
            from .timeline import render_svg

            svg = render_svg(marathon.schedule.faults, marathon.start_time, marathon.end_time,
                             [(c.at, c.app) for c in marathon.schedule.benign], title=target.name)
        except Exception:  # noqa: BLE001
            svg = ""
    return page_path, svg


# -- reports --------------------------------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if isinstance(item, SegmentItem):
        report.sremarathon_segment = True  # type: ignore[attr-defined]
        result = item.stash.get(RESULT_KEY, None)
        if result is not None and call.when == "call":
            # Carried on the report object (serialised by xdist), like Hypothesis's statistics.
            report.sremarathon = result.to_dict()  # type: ignore[attr-defined]
            _html_extras(item, report, result)
    elif call.when == "call":
        from .fixtures import fixture_report_data

        data = fixture_report_data(item)
        if data is not None:
            report.sremarathon = data  # type: ignore[attr-defined]
    return report


def _html_extras(item: SegmentItem, report: Any, result: SegmentResult) -> None:
    """pytest-html, when installed: a link to the bundle on every segment and, on a marathon's
    last segment, a link to the run's HTML report and its timeline picture."""
    if item.config.pluginmanager.getplugin("html") is None:
        return
    try:
        from pytest_html import extras
    except ImportError:  # pragma: no cover
        return
    html_path = item.config.getoption("htmlpath", None)

    def link(path: Path) -> str:
        if not path.is_absolute():
            path = item.config.rootpath / path
        if html_path:
            return os.path.relpath(path, Path(html_path).resolve().parent)
        return path.as_uri()

    found = list(getattr(report, "extras", []))
    found.append(extras.url(link(Path(result.bundle)), name="bundle"))
    page, svg = item.stash.get(RUN_REPORT_KEY, (None, ""))
    if page is not None:
        found.append(extras.url(link(page), name="report"))
    if svg:
        found.append(extras.svg(base64.b64encode(svg.encode()).decode(), name="timeline"))
    report.extras = found
