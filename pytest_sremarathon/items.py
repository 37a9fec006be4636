"""The collection tree of a marathon: what ``pytest --collect-only`` shows of it.

    marathon.yaml                        MarathonFile (a scenario file: ``marathon*.yaml``, or named)
      marathon[seed=1]                   MarathonRun (one run per seed)
        segment-01, segment-02, …        SegmentItem (one per segment, in time order)
    sremarathon:default                  SessionMarathon (the session's scenario, when no file was found)

Running a segment item advances its run past the segment (and past the end of every fault
injected in it), then asserts each of those faults' stage progress; with a baseline file the
verdict is per fault (a regression fails, a fault the baseline failed too is an expected
failure). What it found rides on its report (:class:`~pytest_sremarathon.session.SegmentResult`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

import pytest

from . import html_extras
from .errors import SremarathonError
from .session import MarathonCrashed, MarathonTarget, SegmentResult, final_summary, session_of

if TYPE_CHECKING:  # the machinery is imported when a marathon is collected, not at pytest's start
    from _pytest._code.code import TerminalRepr

    from .marathon import SegmentWindow
    from .scenario import Scenario
    from .scoring import FaultResult, MarathonScore

#: On a segment item once it ran: its :class:`SegmentResult` (put on the report by the plugin).
RESULT_KEY = pytest.StashKey[SegmentResult]()


class MarathonFile(pytest.File):
    """A scenario file: one :class:`MarathonRun` per seed (``--marathon-seeds``, else the
    scenario's own)."""

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
    """One run (a scenario and a seed): its segments, in time order, all in one xdist group."""

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


class SegmentFailure(Exception):
    """Some fault of the segment was not correlated, localized and repaired while active (or
    was falsely claimed resolved)."""


class BaselineExpectedFailure(SegmentFailure):
    """The segment fails only in ways the baseline already failed (an expected failure)."""


class SegmentItem(pytest.Item):
    """One segment of a run: a window of virtual time and the faults scheduled in it."""

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
                               final=final_summary(score) if self.last else None)
        if self.last:
            ms.reported.add(target.id)
        self.stash[RESULT_KEY] = result
        if self.last and html_extras.enabled(self.config):
            self.stash[html_extras.RUN_REPORT_KEY] = html_extras.run_report(ms.results.get(target.id), marathon, target)
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
        path = session_of(self.config).settings.baseline
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

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        """A segment's failure is its message (the faults and their stages), not a traceback."""
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
