"""Every option of the ``sremarathon`` group, on the command line and as an ini key.

(Bad values are usage errors: see test_plugin_basics.py. The baseline options have their own
file, test_plugin_baseline.py; --marathon-backend is exercised with its hook in
test_plugin_hooks.py.)
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from pytest_sremarathon.bundle import open_bundle, verify

pytest_plugins = ["pytester"]

NOOP = "--agent=pytest_sremarathon.baselines:NoopAgent"
ROLLBACK = "--agent=pytest_sremarathon.baselines:RollbackAgent"


def bundles(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.tar.gz"))


def test_options_are_in_their_own_group_with_ini_keys(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["SRE marathons (pytest-sremarathon):", "*--agent=PKG.MOD:CLASS*"])
    text = result.stdout.str()
    for option in ("--agent", "--agent-cmd", "--marathon-seeds", "--marathon-backend", "--marathon-out",
                   "--marathon-min-score", "--marathon-baseline", "--marathon-update-baseline",
                   "--marathon-step-budget", "--marathon-signing-key", "--marathon-scenario",
                   "--marathon-think-time"):
        assert f"  {option}" in text, option
        ini = option.lstrip("-").replace("-", "_")
        assert f"  {ini} (" in text, ini  # listed under the ini keys too
    assert "  marathon_progress_interval (" in text


def test_marathon_out_and_signing_key(pytester: pytest.Pytester, marathon_file) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                            serialization.NoEncryption())
    (pytester.path / "signing.key").write_text(raw.hex() + "\n")
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()
    scenario = marathon_file(duration="1h", schedule={"faults": 1})
    result = pytester.runpytest_subprocess(str(scenario), NOOP, "--marathon-out=out/runs",
                                           "--marathon-signing-key=signing.key")
    result.stdout.fnmatch_lines(["*bundles in out/runs*", "*out/runs/marathon-seed1-*.tar.gz"])
    [bundle] = bundles(pytester.path / "out" / "runs")
    assert verify(bundle, public_key=public).ok
    assert not (pytester.path / "sremarathon-runs").exists()


def test_min_score_fails_the_session_only_below_the_threshold(pytester: pytest.Pytester, marathon_file) -> None:
    # a scenario without faults: every segment passes, the score is 0
    scenario = marathon_file(duration="1h", schedule={"faults": 0})
    below = pytester.runpytest_subprocess(str(scenario), NOOP, "--marathon-min-score=10")
    below.assert_outcomes(passed=1)
    assert below.ret == pytest.ExitCode.TESTS_FAILED
    below.stdout.fnmatch_lines(["FAILED gate: marathon.yaml::marathon[[]seed=1[]] scored 0.0 < "
                                "--marathon-min-score 10"])
    # (at the threshold the session passes: see the last run of test_every_option_as_an_ini_key)


def test_step_budget_reaches_the_agent_host(pytester: pytest.Pytester, marathon_file) -> None:
    scenario = marathon_file(duration="1h", schedule={"faults": 1})
    pytester.makepyfile(test_budget=f"""
        import pytest

        pytestmark = pytest.mark.marathon_scenario({str(scenario)!r})

        def test_budget(agent):
            assert agent.step_budget == 7.5
            assert agent.label == "pytest_sremarathon.baselines:NoopAgent"
    """)
    result = pytester.runpytest_subprocess("test_budget.py", NOOP, "--marathon-step-budget=7.5")
    result.assert_outcomes(passed=1)


def test_agent_cmd_runs_a_command_agent(pytester: pytest.Pytester, marathon_file) -> None:
    agent = pytester.path / "cmd_agent.py"
    agent.write_text(textwrap.dedent("""
        import json, sys
        for line in sys.stdin:
            msg = json.loads(line)
            if msg.get("op") == "close":
                break
            answer = {} if msg.get("op") == "setup" else {"findings": [], "claims": [], "notes": "from the cmd agent"}
            print(json.dumps(answer), flush=True)
    """))
    scenario = marathon_file(duration="1h", cadence="15m", schedule={"faults": 1})
    result = pytester.runpytest_subprocess(str(scenario), f"--agent-cmd={sys.executable} {agent}")
    result.stdout.fnmatch_lines(["sremarathon: agent cmd: *cmd_agent.py*"])
    [bundle] = bundles(pytester.path / "sremarathon-runs")
    steps = [e.data for e in open_bundle(bundle).events if e.type == "agent.step"]
    assert [s["outcome"] for s in steps] == ["ok"] * 4
    assert {s["report"]["notes"] for s in steps} == {"from the cmd agent"}


def test_every_option_as_an_ini_key(pytester: pytest.Pytester, marathon_file) -> None:
    scenario = marathon_file(duration="1h", schedule={"faults": 0})
    pytester.makeini(f"""
        [pytest]
        agent = pytest_sremarathon.baselines:NoopAgent
        marathon_seeds = 2,5
        marathon_backend = twin
        marathon_out = ini-runs
        marathon_min_score = 50
        marathon_baseline = baseline.json
        marathon_update_baseline = true
        marathon_step_budget = 4
        marathon_scenario = {scenario.name}
        marathon_think_time = wall:3
    """)
    pytester.makepyfile(test_ini="""
        def test_seen(agent, marathon):
            assert agent.step_budget == 4
            assert marathon.seed in (2, 5)
    """)
    result = pytester.runpytest_subprocess(str(scenario), "test_ini.py")
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the min-score gate: 0 < 50
    result.stdout.fnmatch_lines(["*FAILED gate: marathon.yaml::marathon[[]seed=2[]] scored 0.0 < *50*"])
    assert len(bundles(pytester.path / "ini-runs")) == 2  # the fixture tests share the file's runs
    assert {next(iter(open_bundle(b).events)).data["think_time"] for b in bundles(pytester.path / "ini-runs")} \
        == {"wall:3"}
    assert (pytester.path / "baseline.json").exists()
    # the command line wins over the ini file
    again = pytester.runpytest_subprocess(str(scenario), "--marathon-seeds=3", "--marathon-min-score=0")
    again.assert_outcomes(passed=1)
    assert again.ret == pytest.ExitCode.OK  # a score of 0 meets --marathon-min-score 0
    assert "FAILED gate" not in again.stdout.str()


def test_think_time_option_reaches_the_run_and_the_summary(pytester: pytest.Pytester, marathon_file) -> None:
    scenario = marathon_file(duration="30m", schedule={"faults": 0})
    result = pytester.runpytest_subprocess(str(scenario), NOOP, "--marathon-think-time=per-request:4s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SRE marathon results*", "think time: per-request:4"])
    [bundle] = bundles(pytester.path / "sremarathon-runs")
    assert next(iter(open_bundle(bundle).events)).data["think_time"] == "per-request:4"
    bad = pytester.runpytest_subprocess(str(scenario), NOOP, "--marathon-think-time=sometimes")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--marathon-think-time: 'sometimes' is not a think-time model; write frozen, "
                              "per-request:SECONDS*"])


def test_marathon_scenario_option_picks_the_fixtures_marathon(pytester: pytest.Pytester, marathon_file) -> None:
    scenario = marathon_file("short", duration="1h", schedule={"faults": 2})
    pytester.makepyfile(test_scn="""
        def test_schedule(fault_schedule, marathon):
            assert marathon.name == "marathon[seed=1]"
            assert len(fault_schedule.faults) == 2
    """)
    result = pytester.runpytest_subprocess("test_scn.py", NOOP, f"--marathon-scenario={scenario.name}")
    result.assert_outcomes(passed=1)
