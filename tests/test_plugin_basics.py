"""The pytest face of a marathon: collection ids, ordering, messages, usage errors, progress."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

NOOP = "--agent=pytest_sremarathon.baselines:NoopAgent"


def test_segments_collect_in_order_with_marathon_ids(pytester: pytest.Pytester, write_scenario) -> None:
    scenario = write_scenario("marathon", apps=["shop"], duration="4h", segment="1h", schedule={"faults": 4})
    result = pytester.runpytest_subprocess(str(scenario), NOOP, "--collect-only", "-q")
    ids = [line.split("::", 1)[1] for line in result.outlines if "::" in line]
    assert ids == [f"marathon[seed=1]::segment-{i:02d}" for i in range(1, 5)]


def test_one_marathon_per_seed_in_seed_order(pytester: pytest.Pytester, marathon_file) -> None:
    scenario = marathon_file(duration="2h", segment="1h", schedule={"faults": 2})
    result = pytester.runpytest(str(scenario), NOOP, "--marathon-seeds", "3,1,3", "--collect-only", "-q")
    ids = [line for line in result.outlines if "::" in line]
    assert ids == [f"marathon.yaml::marathon[seed={s}]::segment-{i:02d}" for s in (3, 1) for i in (1, 2)]


def test_any_yaml_passed_explicitly_collects_but_others_only_by_name(pytester: pytest.Pytester, marathon_file) -> None:
    other = marathon_file("nightly", duration="1h", schedule={"faults": 1})
    marathon_file("marathon-short", duration="1h", schedule={"faults": 1})
    (pytester.path / "unrelated.yaml").write_text("a: 1\n")
    explicit = pytester.runpytest(str(other), NOOP, "--collect-only", "-q")
    assert [line for line in explicit.outlines if "::" in line] == ["nightly.yaml::marathon[seed=1]::segment-01"]
    found = pytester.runpytest(NOOP, "--collect-only", "-q")
    assert [line for line in found.outlines if "::" in line] == ["marathon-short.yaml::marathon[seed=1]::segment-01"]


def test_without_an_agent_collecting_a_marathon_is_a_usage_error(pytester: pytest.Pytester, write_scenario) -> None:
    scenario = write_scenario("marathon", apps=["shop"], duration="1h", schedule={"faults": 1})
    result = pytester.runpytest_subprocess(str(scenario))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*a marathon needs an agent*", "*--agent=*"])


def test_without_an_agent_ordinary_tests_still_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_ok():\n    pass\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("args, message", [
    (["--agent=nope.missing:Agent"], "*--agent=nope.missing:Agent: cannot import agent module 'nope.missing'*"),
    (["--agent=not a spec"], "*invalid agent spec*"),
    ([NOOP, "--agent-cmd=./agent"], "*give one of --agent, --agent-cmd or --agent-exec*"),
    (["--agent-cmd=./no-such-agent"], "*--agent-cmd: command not found: ./no-such-agent*"),
    ([NOOP, "--marathon-seeds=1,x"], "*--marathon-seeds takes comma-separated integers*"),
    ([NOOP, "--marathon-min-score=high"], "*--marathon-min-score takes a number*"),
    ([NOOP, "--marathon-min-score=120"], "*--marathon-min-score must be between 0 and 100*"),
    ([NOOP, "--marathon-step-budget=0"], "*--marathon-step-budget must be > 0*"),
    ([NOOP, "--marathon-backend=kind9"], "*--marathon-backend 'kind9' is unknown; available: *twin*"),
    ([NOOP, "--marathon-update-baseline"], "*--marathon-update-baseline needs --marathon-baseline*"),
    ([NOOP, "--marathon-baseline=nothing.json"], "*--marathon-baseline: no such file*--marathon-update-baseline*"),
    ([NOOP, "--marathon-signing-key=nokey"], "*--marathon-signing-key: no such file*"),
])
def test_bad_options_are_usage_errors(pytester: pytest.Pytester, marathon_file, args: list[str],
                                      message: str) -> None:
    scenario = marathon_file(duration="1h", schedule={"faults": 1})
    result = pytester.runpytest(str(scenario), *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_baseline_that_is_not_one_is_a_usage_error(pytester: pytest.Pytester, marathon_file) -> None:
    scenario = marathon_file(duration="1h", schedule={"faults": 1})
    (pytester.path / "base.json").write_text('{"faults": []}')
    result = pytester.runpytest(str(scenario), NOOP, "--marathon-baseline=base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*base.json: not a baseline file*sremarathon-baseline/1*"])


def test_a_scenario_error_is_a_collection_error_naming_the_file(pytester: pytest.Pytester) -> None:
    bad = pytester.path / "marathon.yaml"
    bad.write_text("name: marathon\napps: [shop]\nduration: twelve hours\n")
    result = pytester.runpytest(NOOP)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*ERROR collecting marathon.yaml*", "*marathon.yaml: duration*"])


def test_segment_failures_list_each_fault_and_its_stages(pytester: pytest.Pytester, marathon_file) -> None:
    scenario = marathon_file(duration="1h", segment="30m", schedule={"faults": 2})
    result = pytester.runpytest_subprocess(str(scenario), NOOP)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*_ marathon[[]seed=1[]]::segment-01 _*",
        "segment-01 [[]00:00–00:30 virtual[]]: 0/* faults repaired while active (marathon score so far 0.0)",
        "  F01 * correlated ✗ localized ✗ repaired-while-active ✗ false-claim –",
    ])
    # the summary: a row per marathon with the score, stage counts, gap and bundle
    result.stdout.fnmatch_lines([
        "*= SRE marathon results =*",
        "marathon * score * segments * faults * C * L * R * false-claims * done-gap * bundle",
        "marathon.yaml::marathon[[]seed=1[]] * 0.0 * 1/2 ok * 2 * 0 * 0 * 0 * 0 * +0.0 * sremarathon-runs/marathon-seed1-*.tar.gz",
        "weights: correlation 20, localization 30, repair 50*",
    ])


def test_progress_lines_show_virtual_time_and_faults(pytester: pytest.Pytester, marathon_file) -> None:
    scenario = marathon_file(duration="2h", schedule={"faults": 2})
    pytester.makeini("[pytest]\nmarathon_progress_interval = 0\n")
    result = pytester.runpytest_subprocess(str(scenario), NOOP)
    result.stdout.fnmatch_lines([
        "sremarathon: marathon[[]seed=1[]] 1:00 of 2:00 virtual; faults injected * active); alerts firing *; "
        "agent steps 12",
        "sremarathon: marathon[[]seed=1[]] 2:00 of 2:00 virtual; *agent steps 24",
    ])
    quiet = pytester.runpytest_subprocess(str(scenario), NOOP, "-qq")  # -qq: no progress lines at all
    assert not [line for line in quiet.outlines if "virtual; faults injected" in line]
