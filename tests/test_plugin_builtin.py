"""The plugin in an agent team's own repository: built-in scenarios by name, the built-in
marathon when the project has no marathon file, and nothing at all without an agent.

(tests/test_installed.py runs the same from a wheel installed in a fresh virtualenv.)
"""

from __future__ import annotations

import textwrap

import pytest

from pytest_sremarathon.builtin import builtin_path
from pytest_sremarathon.bundle import verify

pytest_plugins = ["pytester"]

NOOP = "--agent=pytest_sremarathon.baselines:NoopAgent"
ROLLBACK = "--agent=pytest_sremarathon.baselines:RollbackAgent"


def ids(result: pytest.RunResult) -> list[str]:
    """The node ids ``--collect-only -q`` printed (not the plugin's "sremarathon: ..." lines)."""
    return [line for line in result.outlines if "::" in line and not line.startswith("sremarathon: ")]


def test_an_agent_in_a_project_without_a_marathon_file_collects_the_builtin_default(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    result = pytester.runpytest_subprocess(NOOP, "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK
    assert ids(result) == ["test_unit.py::test_unit"] + [
        f"sremarathon:default::marathon[seed=1]::segment-{i:02d}" for i in range(1, 7)]
    result.stdout.fnmatch_lines(['sremarathon: no marathon file in the test paths: running the built-in scenario '
                                 '"default" as sremarathon:default (12h, 60 faults over shop, social, hotel*'])
    header = pytester.runpytest_subprocess(NOOP, "--collect-only")
    header.stdout.fnmatch_lines(['sremarathon: without a marathon file in the test paths, the built-in scenario '
                                 '"default" runs'])


def test_marathon_scenario_smoke_runs_the_short_builtin_marathon(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(ROLLBACK, "--marathon-scenario", "smoke", "--junitxml=out.xml")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 2  # two one-hour segments
    result.stdout.fnmatch_lines(["*running the built-in scenario \"smoke\" as sremarathon:smoke (2h, 10 faults*",
                                 "*SRE marathon results*",
                                 "sremarathon:smoke::smoke[[]seed=1[]] *sremarathon-runs/smoke-seed1-*.tar.gz"])
    row = next(line for line in result.outlines if line.startswith("sremarathon:smoke::smoke[seed=1]"))
    score, bundle = float(row.split()[1]), row.split()[-1]
    assert score > 0  # the rollback agent repairs some of the smoke marathon's faults
    assert verify(pytester.path / bundle).ok
    assert 'classname="sremarathon:smoke"' in (pytester.path / "out.xml").read_text()


def test_the_projects_own_marathon_files_are_collected_instead(pytester: pytest.Pytester, write_scenario) -> None:
    own = write_scenario("marathon-nightly", apps=["shop"], duration="1h", schedule={"faults": 1})
    (pytester.path / "ci").mkdir()
    (pytester.path / "ci" / own.name).write_text(own.read_text())
    result = pytester.runpytest_subprocess(NOOP, "--marathon-scenario", "smoke", "--collect-only", "-q")
    assert ids(result) == ["ci/marathon-nightly.yaml::marathon[seed=1]::segment-01"]
    assert "running the built-in" not in result.stdout.str()


def test_test_paths_on_the_command_line_collect_only_those(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    result = pytester.runpytest_subprocess("test_unit.py", NOOP, "--collect-only", "-q")
    assert ids(result) == ["test_unit.py::test_unit"]


def test_a_scenario_file_of_the_session_runs_when_the_project_has_none(pytester: pytest.Pytester,
                                                                      write_scenario) -> None:
    """--marathon-scenario FILE (not named marathon*, not under the test paths) is the session's marathon."""
    src = write_scenario("nightly", apps=["shop"], duration="1h", segment="30m", schedule={"faults": 1})
    (pytester.path / "bench").mkdir()
    (pytester.path / "bench" / "nightly.yaml").write_text(src.read_text())
    pytester.makeini("[pytest]\ntestpaths = tests\n")
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_unit.py").write_text("def test_unit():\n    pass\n")
    result = pytester.runpytest_subprocess(NOOP, "--marathon-scenario", "bench/nightly.yaml", "--collect-only", "-q")
    assert ids(result) == ["tests/test_unit.py::test_unit", "bench/nightly.yaml::marathon[seed=1]::segment-01",
                           "bench/nightly.yaml::marathon[seed=1]::segment-02"]
    result.stdout.fnmatch_lines(["*running the scenario bench/nightly.yaml as bench/nightly.yaml*"])


def test_without_an_agent_nothing_of_the_plugin_runs_or_is_imported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unit="""
        import sys

        def test_unit():
            loaded = sorted(m for m in sys.modules if m.startswith(("pytest_sremarathon", "pydantic", "kubernetes",
                                                                    "cryptography", "yaml")))
            assert loaded == ["pytest_sremarathon", "pytest_sremarathon.baseline_file", "pytest_sremarathon.builtin",
                              "pytest_sremarathon.distributed", "pytest_sremarathon.errors",
                              "pytest_sremarathon.fixtures", "pytest_sremarathon.hookspecs",
                              "pytest_sremarathon.plugin", "pytest_sremarathon.scoreboard",
                              "pytest_sremarathon.session", "pytest_sremarathon.settings"]
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "sremarathon" not in result.stdout.str().replace("sremarathon-", "")  # no header, no summary


@pytest.mark.parametrize("where", ["option", "ini", "marker"])
def test_an_unknown_scenario_name_lists_the_builtin_ones(pytester: pytest.Pytester, where: str) -> None:
    args = [NOOP, "--collect-only"]
    if where == "option":
        args += ["--marathon-scenario", "smok"]
    elif where == "ini":
        pytester.makeini("[pytest]\nmarathon_scenario = smok\n")
    else:
        pytester.makepyfile(test_m="""
            import pytest

            @pytest.mark.marathon_scenario("smok")
            def test_m(marathon):
                pass
        """)
    result = pytester.runpytest_subprocess(*args)
    assert result.ret in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERRUPTED)
    text = result.stdout.str() + result.stderr.str()
    assert "no built-in scenario 'smok'; available: default, smoke" in text, text


def test_a_missing_scenario_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(NOOP, "--marathon-scenario", "ci/nightly.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--marathon-scenario: no such scenario file: *ci/nightly.yaml (give a file, or the "
                                 "name of a built-in scenario: default, smoke)"])


def test_the_marker_and_the_fixtures_take_builtin_names(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m=f"""
        import pytest

        @pytest.mark.marathon_scenario("smoke")
        def test_named(marathon):
            assert marathon.target.scenario.name == "smoke"
            assert str(marathon.target.path) == {str(builtin_path("smoke"))!r}

        def test_default(marathon):  # no marker, no option, no scenarios/marathon.yaml: the built-in default
            assert str(marathon.target.path) == {str(builtin_path("default"))!r}
            assert marathon.id == "sremarathon:default::marathon[seed=1]"

    """)
    result = pytester.runpytest_subprocess("test_m.py", NOOP)
    result.assert_outcomes(passed=2)
    pytester.makepyfile(test_missing="""
        import pytest

        @pytest.mark.marathon_scenario("nowhere/marathon.yaml")
        def test_missing(marathon):
            pass
    """)
    missing = pytester.runpytest_subprocess("test_missing.py", NOOP)
    missing.stdout.fnmatch_lines(["*test_missing*no marathon scenario at *nowhere/marathon.yaml*relative to the "
                                  "rootdir*(default, smoke)*"])


def test_a_projects_scenarios_marathon_yaml_is_the_fixtures_default(pytester: pytest.Pytester, write_scenario) -> None:
    src = write_scenario("marathon", apps=["shop"], duration="1h", schedule={"faults": 1})
    (pytester.path / "scenarios").mkdir()
    (pytester.path / "scenarios" / "marathon.yaml").write_text(src.read_text())
    pytester.makepyfile(test_m=textwrap.dedent("""
        def test_default(marathon):
            assert marathon.id == "scenarios/marathon.yaml::marathon[seed=1]"
    """))
    result = pytester.runpytest_subprocess("test_m.py", NOOP)
    result.assert_outcomes(passed=1)
