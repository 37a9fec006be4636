"""The pytest plugin: options, collection of marathon files, segment items, the session object
that owns the running marathons, and the terminal summary.

    pytest scenarios/marathon.yaml --agent=mypkg.agent:Agent --junitxml=out.xml

A marathon file collects as one ``marathon[seed=N]`` per seed, each with one item per segment
in time order. Running an item advances that marathon past the segment (and past the end of
every fault injected in it), then asserts each of those faults' stage progress.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from . import hookspecs
from .agent.host import AgentSpec
from .errors import SremarathonError
from .marathon import Marathon, MarathonOptions, RunResult, SegmentWindow, segment_windows
from .scenario import Scenario, load_scenario
from .scoring import FaultResult, MarathonScore

USAGE_EXAMPLE = "pytest scenarios/marathon.yaml --agent=pytest_sremarathon.baselines:RollbackAgent"
RESULT_KEY = pytest.StashKey["SegmentResult"]()


# -- options --------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sremarathon", "SRE marathons (pytest-sremarathon)")

    def add(name: str, help: str, **kw: Any) -> None:
        ini = name.lstrip("-").replace("-", "_")
        group.addoption(name, dest=ini, help=help, **kw)
        parser.addini(ini, help=help, default=None)

    add("--agent", "the agent under test, as pkg.module:Class")
    add("--agent-cmd", "an agent command speaking the JSON-lines protocol (instead of --agent)")
    add("--marathon-seeds", "comma-separated seeds; one marathon per seed (default: the scenario's seed)")
    add("--marathon-backend", "cluster backend: twin (default)")
    add("--marathon-out", "directory for sealed bundles (default: sremarathon-runs)")
    add("--marathon-min-score", "fail the session when a marathon scores below this")
    add("--marathon-step-budget", "wall seconds an agent step may take (default: the scenario's)")
    add("--marathon-signing-key", "ed25519 private key file to sign bundles with")


def _opt(config: pytest.Config, name: str) -> Optional[str]:
    value = config.getoption(name)
    if value is None:
        value = config.getini(name)
    return str(value) if value not in (None, "") else None


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sremarathon: a marathon segment (added by pytest-sremarathon)")
    session = config.stash[SESSION_KEY] = MarathonSession(config)
    config.pluginmanager.register(session, "sremarathon-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()


# -- the session object ---------------------------------------------------------------------
@dataclass
class SegmentResult:
    """What a segment item found, carried on the report (so it crosses xdist workers)."""

    marathon: str
    segment: str
    faults: list[dict[str, Any]]
    score_so_far: float
    bundle: str
    final: Optional[dict[str, Any]] = None


@dataclass(eq=False)  # registered as a plugin: must stay hashable
class MarathonSession:
    """Owns the marathons of a pytest session (one per scenario file and seed)."""

    config: pytest.Config
    running: dict[str, Marathon] = field(default_factory=dict)
    results: dict[str, RunResult] = field(default_factory=dict)
    missing_agent: list[Path] = field(default_factory=list)

    def options(self, seed: int) -> MarathonOptions:
        from .bundle import load_signing_key

        agent, cmd = _opt(self.config, "agent"), _opt(self.config, "agent_cmd")
        key_path = _opt(self.config, "marathon_signing_key")
        budget = _opt(self.config, "marathon_step_budget")
        return MarathonOptions(agent=AgentSpec.from_options(agent, cmd, cwd=self.config.invocation_params.dir),
                               seed=seed, out_dir=Path(_opt(self.config, "marathon_out") or "sremarathon-runs"),
                               step_budget=float(budget) if budget else None,
                               signing_key=load_signing_key(key_path) if key_path else None)

    def marathon(self, key: str, scenario: Scenario, seed: int) -> Marathon:
        m = self.running.get(key)
        if m is None:
            m = self.running[key] = Marathon(scenario, self.options(seed), hook=self.config.hook)
            m.start()
        return m

    def finish(self, key: str) -> RunResult:
        if key not in self.results:
            self.results[key] = self.running[key].finish()
        return self.results[key]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """pytest's JUnit writer reads a bracket in a middle id component as the last one's
        parameters ("…segment-01]"); give segment testcases their plain name back. Runs where
        the JUnit file is written (on the xdist controller too)."""
        if not getattr(report, "sremarathon", None):
            return
        try:
            from _pytest.junitxml import xml_key
        except ImportError:  # pragma: no cover - a pytest without the private key
            return
        xml = self.config.stash.get(xml_key, None)
        if xml is not None:
            xml.node_reporter(report).add_attribute("name", report.nodeid.split("::", 1)[1])

    def close(self) -> None:
        """Seal whatever is still running (an interrupted session keeps its evidence)."""
        for key, m in self.running.items():
            if key not in self.results:
                try:
                    self.results[key] = m.finish("interrupted")
                except Exception as exc:  # noqa: BLE001 - never mask the session's own outcome
                    print(f"sremarathon: could not seal {key}: {exc}", file=sys.stderr)


SESSION_KEY = pytest.StashKey[MarathonSession]()


# -- collection -----------------------------------------------------------------------------
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    explicit = any(Path(a.split("::")[0]).resolve() == file_path.resolve() for a in parent.config.args)
    if explicit or file_path.name.startswith("marathon"):
        return MarathonFile.from_parent(parent, path=file_path)
    return None


class MarathonFile(pytest.File):
    def collect(self) -> Iterator[pytest.Collector]:
        config = self.config
        if not (_opt(config, "agent") or _opt(config, "agent_cmd")):
            # A usage error, not a collection error: raised once collection is over.
            config.stash[SESSION_KEY].missing_agent.append(self.path)
            return
        try:
            scenario = load_scenario(self.path)
        except SremarathonError as exc:
            raise self.CollectError(str(exc)) from None
        seeds_opt = _opt(config, "marathon_seeds")
        try:
            seeds = [int(s) for s in seeds_opt.split(",")] if seeds_opt else [scenario.spec.seed]
        except ValueError:
            raise pytest.UsageError(f"--marathon-seeds takes comma-separated integers, got {seeds_opt!r}") from None
        for seed in seeds:
            yield MarathonRun.from_parent(self, name=f"{scenario.name}[seed={seed}]", scenario=scenario, seed=seed)


class MarathonRun(pytest.Collector):
    def __init__(self, *, scenario: Scenario, seed: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.scenario = scenario
        self.seed = seed
        self.add_marker(pytest.mark.xdist_group(name=self.nodeid))

    def collect(self) -> Iterator[pytest.Item]:
        windows = segment_windows(self.scenario)  # known without starting the run
        for i, window in enumerate(windows):
            yield SegmentItem.from_parent(self, name=window.name, window=window, last=i == len(windows) - 1)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    missing = config.stash[SESSION_KEY].missing_agent
    if missing:
        raise pytest.UsageError(f"{missing[0]}: a marathon needs an agent to run; for example:\n  {USAGE_EXAMPLE}")


class SegmentFailure(Exception):
    pass


class SegmentItem(pytest.Item):
    def __init__(self, *, window: SegmentWindow, last: bool, **kw: Any) -> None:
        super().__init__(**kw)
        self.window = window
        self.last = last
        self.add_marker(pytest.mark.sremarathon)

    @property
    def run(self) -> MarathonRun:
        assert isinstance(self.parent, MarathonRun)
        return self.parent

    def runtest(self) -> None:
        session: MarathonSession = self.config.stash[SESSION_KEY]
        key = self.run.nodeid
        marathon = session.marathon(key, self.run.scenario, self.run.seed)
        faults = marathon.faults_in(self.window)
        until = max([self.window.end] + [f.end for f in faults])
        marathon.advance_to(until)
        if self.last:
            final = session.finish(key)
            score = final.score
        else:
            score = marathon.score_now()
        bundle = str(marathon.run_dir) + ".tar.gz"
        by_id = {r.id: r for r in score.faults}
        rows = [by_id[f.id] for f in faults if f.id in by_id]
        result = SegmentResult(marathon=key, segment=self.window.name, faults=[r.to_dict() for r in rows],
                               score_so_far=round(score.score, 3), bundle=bundle,
                               final=_final_summary(score) if self.last else None)
        self.stash[RESULT_KEY] = result
        self.user_properties.extend([
            ("sremarathon_score", f"{score.score:.2f}"),
            ("sremarathon_faults", str(len(rows))),
            ("sremarathon_stages", "; ".join(f"{r.id}:{_stages(r)}" for r in rows)),
            ("sremarathon_bundle", bundle),
        ])
        print(f"[[ATTACHMENT|{bundle}]]")
        failed = [r for r in rows if not (r.correlated and r.localized and r.repaired) or r.false_claim]
        if failed:
            raise SegmentFailure(self._message(rows, score))

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


def _stages(r: FaultResult) -> str:
    def mark(ok: bool) -> str:
        return "✓" if ok else "✗"

    return (f"correlated {mark(r.correlated)} localized {mark(r.localized)} "
            f"repaired-while-active {mark(r.repaired)} false-claim {'✗ (claimed while broken)' if r.false_claim else '–'}")


def _final_summary(score: MarathonScore) -> dict[str, Any]:
    return {"score": round(score.score, 3), "declared_done_gap": round(score.declared_done_gap, 3),
            "faults": len(score.faults), "correlated": sum(f.correlated for f in score.faults),
            "localized": sum(f.localized for f in score.faults), "repaired": sum(f.repaired for f in score.faults)}


# -- reporting ------------------------------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    result = item.stash.get(RESULT_KEY, None) if isinstance(item, SegmentItem) else None
    if result is not None and call.when == "call":
        # Carried on the report object (serialised by xdist), like Hypothesis's statistics.
        report.sremarathon = result.__dict__  # type: ignore[attr-defined]
    return report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    finals: dict[str, dict[str, Any]] = {}
    for stat in ("passed", "failed", "xfailed", "xpassed"):
        for rep in terminalreporter.stats.get(stat, []):
            data = getattr(rep, "sremarathon", None)
            if data and data.get("final"):
                finals[data["marathon"]] = {**data["final"], "bundle": data["bundle"]}
    if not finals:
        return
    tr = terminalreporter
    tr.write_sep("=", "SRE marathon results")
    tr.write_line(f"{'marathon':<50} {'score':>7} {'C':>4} {'L':>4} {'R':>4} {'faults':>7} {'done-gap':>9}  bundle")
    for key, f in sorted(finals.items()):
        tr.write_line(f"{key:<50} {f['score']:>7.1f} {f['correlated']:>4} {f['localized']:>4} {f['repaired']:>4} "
                      f"{f['faults']:>7} {f['declared_done_gap']:>+9.1f}  {f['bundle']}")
    threshold = _opt(config, "marathon_min_score")
    if threshold is not None:
        low = {k: f for k, f in finals.items() if f["score"] < float(threshold)}
        for key, f in low.items():
            tr.write_line(f"FAILED gate: {key} scored {f['score']:.1f} < --marathon-min-score {threshold}", red=True)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    threshold = _opt(session.config, "marathon_min_score")
    if threshold is None:
        return
    ms: MarathonSession = session.config.stash[SESSION_KEY]
    if any(r.score.score < float(threshold) for r in ms.results.values()) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED

