"""Each hookspec, implemented in a conftest.py as a user would (docs/HOOKS.md)."""

from __future__ import annotations

import pytest

from pytest_sremarathon.bundle import open_bundle

pytest_plugins = ["pytester"]

NOOP = "--agent=pytest_sremarathon.baselines:NoopAgent"


def only_bundle(pytester: pytest.Pytester):
    [path] = (pytester.path / "sremarathon-runs").glob("*.tar.gz")
    return open_bundle(path)


def test_fault_kinds_hook_adds_a_kind_the_scenario_can_schedule(pytester: pytest.Pytester, marathon_file) -> None:
    pytester.makeconftest("""
        from pytest_sremarathon.faults.base import FaultKind

        class Gremlin(FaultKind):
            name = "test-gremlin"
            family = "gremlins"

            def inject(self, world, fault):
                fault.component = "external:gremlin"
                fault.description = "a gremlin in the works"

            def mitigated(self, world, fault):
                return False

            def cleanup(self, world, fault):
                pass

        def pytest_sremarathon_fault_kinds():
            return [Gremlin]
    """)
    scenario = marathon_file(duration="1h", schedule={"faults": 1, "families": {"gremlins": 1.0}})
    result = pytester.runpytest_subprocess(str(scenario), NOOP)
    result.stdout.fnmatch_lines(["  F01 test-gremlin * external:gremlin * correlated ✗*"])
    kinds = [e.data["kind"] for e in only_bundle(pytester).events if e.type == "truth.fault"]
    assert kinds == ["test-gremlin"]


def test_backends_hook_adds_a_backend_for_marathon_backend(pytester: pytest.Pytester, marathon_file) -> None:
    pytester.makeconftest("""
        from pathlib import Path
        from pytest_sremarathon.backends.twin import TwinBackend

        class CountingTwin(TwinBackend):
            name = "counting-twin"

            def tick(self, dt, rng):
                super().tick(dt, rng)
                with open(Path(__file__).parent / "ticks.txt", "a") as out:
                    out.write("tick\\n")

        def pytest_sremarathon_backends():
            return {"counting-twin": CountingTwin}
    """)
    scenario = marathon_file(duration="1h", schedule={"faults": 0})
    unknown = pytester.runpytest(str(scenario), NOOP, "--marathon-backend=kube")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["*--marathon-backend 'kube' is unknown; available: *counting-twin*twin*"])
    result = pytester.runpytest_subprocess(str(scenario), NOOP, "--marathon-backend=counting-twin")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["sremarathon: agent *; backend counting-twin; *"])
    assert (pytester.path / "ticks.txt").read_text().count("tick") >= 120  # the run ticked it: 1 h of 30 s ticks
    [start] = [e.data for e in only_bundle(pytester).events if e.type == "run.start"]
    assert start["backend"] == "counting-twin"


def test_adjust_observation_hook_changes_what_the_agent_sees(pytester: pytest.Pytester, marathon_file) -> None:
    pytester.makepyfile(seeing_agent="""
        from pytest_sremarathon import Report

        class SeeingAgent:
            def step(self, obs):
                return Report(notes=",".join(a.id for a in obs.new_alerts if a.id.startswith("hook-")))
    """)
    pytester.makeconftest("""
        from pytest_sremarathon.agent.protocol import Alert

        def pytest_sremarathon_adjust_observation(observation, marathon):
            observation.new_alerts.append(Alert(id=f"hook-{observation.step}", name="FromTheHook",
                                                status="firing", severity="info", starts_at=observation.time))
    """)
    scenario = marathon_file(duration="1h", cadence="15m", schedule={"faults": 0})
    result = pytester.runpytest_subprocess(str(scenario), "--agent=seeing_agent:SeeingAgent")
    result.assert_outcomes(passed=1)
    notes = [e.data["report"]["notes"] for e in only_bundle(pytester).events if e.type == "agent.step"]
    assert notes == ["hook-1", "hook-2", "hook-3", "hook-4"]


def test_step_report_hook_receives_every_step(pytester: pytest.Pytester, marathon_file) -> None:
    pytester.makeconftest("""
        from pathlib import Path

        def pytest_sremarathon_step_report(step, outcome, marathon):
            with open(Path(__file__).parent / "steps.txt", "a") as out:
                out.write(f"{step} {outcome.outcome} {marathon.clock.now:%H:%M} {outcome.report is not None}\\n")
    """)
    scenario = marathon_file(duration="1h", cadence="20m", schedule={"faults": 0})
    result = pytester.runpytest_subprocess(str(scenario), NOOP)
    result.assert_outcomes(passed=1)
    assert (pytester.path / "steps.txt").read_text().splitlines() == [
        "1 ok 00:20 True", "2 ok 00:40 True", "3 ok 01:00 True"]


def test_a_step_report_hook_that_raises_stops_the_marathon(pytester: pytest.Pytester, marathon_file) -> None:
    pytester.makeconftest("""
        def pytest_sremarathon_step_report(step, outcome, marathon):
            if step == 2:
                raise RuntimeError("hopeless run")
    """)
    scenario = marathon_file(duration="1h", segment="20m", cadence="20m", schedule={"faults": 0})
    result = pytester.runpytest_subprocess(str(scenario), NOOP)
    result.assert_outcomes(passed=1, failed=2)  # step 2 is at 00:40, in segment-02
    result.stdout.fnmatch_lines(["*_ marathon[[]seed=1[]]::segment-02 _*", "*RuntimeError: hopeless run*",
                                 "*_ marathon[[]seed=1[]]::segment-03 _*",
                                 "marathon marathon[[]seed=1[]] stopped in segment-02: RuntimeError: hopeless run; "
                                 "bundle sremarathon-runs/*.tar.gz"])
    result.stdout.fnmatch_lines(["marathon.yaml::marathon[[]seed=1[]] * (error) *"])
    [end] = [e.data for e in only_bundle(pytester).events if e.type == "run.end"]
    assert end["reason"] == "error" and "hopeless run" in end["error"]


def test_choose_scorer_hook_first_result_wins(pytester: pytest.Pytester, marathon_file) -> None:
    pytester.makepyfile(abstaining_scorer="""
        import pytest

        @pytest.hookimpl(tryfirst=True)
        def pytest_sremarathon_choose_scorer(bundle):
            return None  # no opinion: the next implementation decides
    """, unasked_scorer="""
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_sremarathon_choose_scorer(bundle):  # never asked: an earlier one answered
            raise AssertionError("firstresult: not called")
    """)
    pytester.makeconftest("""
        import dataclasses
        from pytest_sremarathon.scoring import score_bundle

        def pytest_sremarathon_choose_scorer(bundle):
            def generous(b):
                return dataclasses.replace(score_bundle(b), score=42.0)
            return generous
    """)
    scenario = marathon_file(duration="1h", schedule={"faults": 0})
    result = pytester.runpytest_subprocess(str(scenario), NOOP, "-p", "abstaining_scorer", "-p", "unasked_scorer",
                                           "--junitxml=out.xml", "--marathon-min-score=50")
    result.stdout.fnmatch_lines(["marathon.yaml::marathon[[]seed=1[]] * 42.0 *",
                                 "FAILED gate: marathon.yaml::marathon[[]seed=1[]] scored 42.0 < --marathon-min-score 50"])
    assert 'name="sremarathon_score" value="42.00"' in (pytester.path / "out.xml").read_text()
