"""The session object: the marathons of one pytest process and what became of them.

:class:`MarathonSession` is created at ``pytest_configure`` and kept in ``config.stash`` under
:data:`SESSION_KEY` (:func:`session_of`), where the hooks, the collectors, the segment items and
the fixtures find it. It owns the runs (one per scenario file and seed, :class:`MarathonTarget`:
segment items and fixtures naming the same file and seed share one run), starts them on first
use, seals them, judges segments against the baseline file and, on the controller, keeps the
scoreboard, the ``--marathon-min-score`` gate and the baseline update.

Light at import: the marathon machinery (scenario files, the twin, the agent host, bundles) is
imported when a run needs it.
"""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import pytest

from . import builtin
from .baseline_file import Baseline
from .distributed import GROUP_PREFIX, is_worker, publish_from_worker
from .scoreboard import Scoreboard
from .settings import Settings

if TYPE_CHECKING:  # the machinery is imported when a marathon runs, not at pytest's start
    from .marathon import Marathon, MarathonOptions, Progress, RunResult
    from .scenario import Scenario
    from .scoring import MarathonScore

USAGE_EXAMPLE = "pytest --agent=pytest_sremarathon.baselines:RollbackAgent"


def display_path(config: pytest.Config, path: Path | str) -> str:
    """Relative to the rootdir when inside it (what GitLab and Jenkins resolve attachments
    against: the project directory / workspace), absolute otherwise."""
    p = Path(path)
    try:
        return p.resolve().relative_to(config.rootpath.resolve()).as_posix()
    except ValueError:
        return str(p)


def scenario_id(config: pytest.Config, path: Path) -> str:
    """How a scenario file appears in node ids: ``sremarathon:<name>`` for a built-in one, its
    path (relative to the rootdir when inside it) otherwise."""
    name = builtin.builtin_name(path)
    return f"sremarathon:{name}" if name else display_path(config, path)


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
        return f"{GROUP_PREFIX}{self.scenario.name}-seed{self.seed}"


class MarathonCrashed(Exception):
    """The run broke earlier (in its start or in another segment): its later segments and
    fixtures fail at once, with the first error."""


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


def final_summary(score: MarathonScore, reason: str = "completed") -> dict[str, Any]:
    """A sealed run's totals as they ride on a report (``SegmentResult.final``)."""
    return {"reason": reason, "score": round(score.score, 3), "declared_done_gap": round(score.declared_done_gap, 3),
            "scoring_version": score.scoring_version,
            "faults": len(score.faults), "correlated": sum(f.correlated for f in score.faults),
            "localized": sum(f.localized for f in score.faults),
            "localization_credit": round(score.localization_credit, 3), "repaired": sum(f.repaired for f in score.faults),
            "collateral": {k: len(v) for k, v in score.collateral.items()},
            "claims": score.claims, "false_claims": score.false_claims, "policy_denials": score.policy_denials,
            "complete": score.complete, "think_time": score.think_time}


@dataclass(eq=False)
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
    board: Scoreboard = field(default_factory=Scoreboard)
    reasons: dict[str, str] = field(default_factory=dict)  # how each sealed run ended
    reported: set[str] = field(default_factory=set)  # runs whose final result rode on a report
    gate_failures: list[str] = field(default_factory=list)
    not_gated: list[str] = field(default_factory=list)
    baseline_written: Optional[str] = None
    agent_checked: bool = False
    files_collected: int = 0  # marathon files collected from the test paths
    fallback: Optional[pytest.File] = None  # the session's scenario (items.SessionMarathon), when collected instead
    _agent_error: Optional[str] = None
    _baseline: Optional[Baseline] = None
    _progress_last: dict[str, float] = field(default_factory=dict)

    # -- the session's scenario --------------------------------------------------------------
    def fallback_allowed(self) -> bool:
        """May the session's scenario be collected when no marathon file is? With an agent, and
        when the command line names no test paths (then pytest collects exactly what it names)."""
        return (self.settings.has_agent
                and getattr(self.config, "args_source", None) != pytest.Config.ArgsSource.ARGS)

    def scenario_words(self) -> str:
        """The session's scenario, for a sentence: ``built-in scenario "smoke"`` or ``scenario <path>``."""
        path = self.settings.session_scenario(self.config.rootpath)
        name = builtin.builtin_name(path)
        return f'built-in scenario "{name}"' if name else f"scenario {display_path(self.config, path)}"

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
        if is_worker(self.config):
            raise pytest.Collector.CollectError(problem)
        self.usage_errors.append(problem)
        return False

    def check_before_distributing(self) -> None:
        """On an xdist controller, at configure time: the agent problems the workers would hit."""
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
        if s.agent_exec:
            return None  # a shell command line: what it runs is found (or not) when a step runs it
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
        from .agent_host import AgentSpec
        from .bundle import load_signing_key
        from .marathon import MarathonOptions
        from .thinktime import parse_think_time

        s = self.settings
        return MarathonOptions(agent=AgentSpec.from_options(s.agent, s.agent_cmd, cwd=self.config.invocation_params.dir,
                                                            agent_exec=s.agent_exec),
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
                "final": final_summary(result.score, self.reasons.get(target.id, "completed"))}

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
            if is_worker(self.config):
                publish_from_worker(self.config, data)
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
        return display_path(self.config, Path(str(m.run_dir) + ".tar.gz"))

    def close(self) -> None:
        """Seal whatever is still running (an interrupted session keeps its evidence)."""
        for key, m in self.running.items():
            if key not in self.results:
                try:
                    self.results[key] = m.finish("interrupted")
                    self.reasons[key] = "interrupted"
                except Exception as exc:  # noqa: BLE001 - never mask the session's own outcome
                    print(f"sremarathon: could not seal {key}: {exc}", file=sys.stderr)

    # -- baseline, gate ----------------------------------------------------------------------
    @property
    def baseline(self) -> Optional[Baseline]:
        if self._baseline is None and self.settings.baseline is not None:
            self._baseline = Baseline.load(self.settings.baseline, missing_ok=self.settings.update_baseline)
        return self._baseline

    def gate(self, session: pytest.Session) -> None:
        """``--marathon-min-score``: a completed marathon below it fails the session; one that
        did not complete is not judged (the summary says so)."""
        s = self.settings
        if s.min_score is None:
            return
        for key in sorted(self.board.rows):
            row = self.board.rows[key]
            if not row.complete:
                self.not_gated.append(f"{row.id} did not complete ({row.reason}): not judged against "
                                      f"--marathon-min-score {s.min_score:g}")
            elif row.score is not None and row.score < s.min_score:
                self.gate_failures.append(f"{row.id} scored {row.score:.1f} < --marathon-min-score {s.min_score:g}")
        if self.gate_failures and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def update_baseline(self) -> None:
        """``--marathon-update-baseline``: rewrite the baseline file with the scoreboard."""
        s = self.settings
        if s.update_baseline and s.baseline is not None and self.board.rows:
            base = self.baseline or Baseline(s.baseline, {})
            n = base.update(self.board)
            base.write()
            self.baseline_written = f"{display_path(self.config, s.baseline)} ({n} faults of {len(self.board.rows)} marathon(s))"

    # -- progress --------------------------------------------------------------------------
    def _progress_printer(self, target: MarathonTarget) -> Optional[Callable[[Progress], None]]:
        config = self.config
        if is_worker(config) or config.get_verbosity() < -1:
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


#: Where the hooks, collectors, items and fixtures find the session object.
SESSION_KEY = pytest.StashKey[MarathonSession]()


def session_of(config: pytest.Config) -> MarathonSession:
    return config.stash[SESSION_KEY]


def _hours(delta: Any) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60}:{minutes % 60:02d}"
