"""End-to-end marathons on the embedded twin: what a user of `sremarathon run` relies on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.cli import events_bytes, run_cli, run_json

from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.bundle import open_bundle, verify
from pytest_sremarathon.calibration import alert_mix


def step_outcomes(bundle: str) -> list[str]:
    return [e.data["outcome"] for e in open_bundle(bundle).events if e.type == "agent.step"]


@pytest.mark.slow
def test_rollback_agent_beats_noop_on_the_default_marathon(tmp_path: Path) -> None:
    out = str(tmp_path / "runs")
    noop = run_json("--agent", "pytest_sremarathon.baselines:NoopAgent", "--out", out)
    rollback = run_json("--agent", "pytest_sremarathon.baselines:RollbackAgent", "--out", out)
    assert len(noop["faults"]) >= 10
    assert noop["score"] == 0
    assert not any(f["localized"] or f["repaired"] for f in noop["faults"])
    assert rollback["score"] > noop["score"]
    assert any(f["repaired"] for f in rollback["faults"])
    # the JSON carries what a CI job needs, per fault
    fault = rollback["faults"][0]
    assert set(fault) >= {"id", "kind", "component", "change", "start", "end", "correlated", "localized", "repaired"}
    assert rollback["virtual_seconds"] == 12 * 3600 and rollback["wall_seconds"] > 0
    assert verify(rollback["bundle"]).ok
    # the alert mix of the default marathon sits in its configured band (CALIBRATION: 70–90%)
    mix = alert_mix(open_bundle(noop["bundle"]).events)
    assert 0.7 <= mix.non_actionable_share <= 0.9, mix
    assert mix.symptom > 0 and mix.actionable > 0


def test_agent_process_cannot_see_the_ground_truth(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="1h", cadence="10m", schedule={"faults": 3})
    result = run_json("--agent", "marathon_agents:GroundTruthSnoop", "--scenario", str(scenario),
                      "--out", str(tmp_path / "runs"), "--step-budget", "120",
                      env={"SREMARATHON_TEST_SECRET": "x"})
    if result["isolation"] != "namespaces":
        pytest.skip(f"no namespace isolation on this machine ({result['isolation']})")
    notes = [e.data["report"]["notes"] for e in open_bundle(result["bundle"]).events
             if e.type == "agent.step" and e.data.get("report") and e.data["report"]["notes"].startswith("FOUND:")]
    assert notes, f"the snooping agent did not report: {step_outcomes(result['bundle'])}"
    found = [p for p in notes[0][len("FOUND:"):].split("|") if p]
    runs = str(tmp_path / "runs")
    # The run's own output, private state and the catalogues of the scenario it runs stay hidden;
    # another checkout of this (public) repository elsewhere on the machine is out of scope.
    leaks = [p for p in found if p.startswith(runs) or p.startswith("/proc") or p == "own environment"
             or p.endswith("changes.yaml") and p.startswith(str(APPS_DIR))]
    assert leaks == []


def catalogue_report(bundle: str) -> dict:
    notes = [e.data["report"]["notes"] for e in open_bundle(bundle).events
             if e.type == "agent.step" and e.data.get("report") and e.data["report"]["notes"].startswith("CATALOGUE:")]
    assert notes, f"the snooping agent did not report: {step_outcomes(bundle)}"
    return json.loads(notes[0][len("CATALOGUE:"):])


@pytest.mark.parametrize("apps", ["builtin", "copies"])
def test_the_packaged_change_catalogue_is_hidden_from_the_agent(tmp_path: Path, write_scenario, apps: str) -> None:
    """The package ships its apps' curated changes (which tell faulty changes from benign ones):
    the agent's process cannot read them where the package is installed, also when the scenario
    runs copies of the apps (`sremarathon init --with-apps`), whose own catalogues are hidden too."""
    agent, roots = "marathon_agents:CatalogueSnoop", []
    if apps == "copies":
        for app in ("shop", "social", "hotel"):
            shutil.copytree(APPS_DIR / app, tmp_path / "apps" / app)
        roots = [str(tmp_path / "apps")]
        (tmp_path / "agents").mkdir()
        (tmp_path / "agents" / "snoop_copies.py").write_text(
            f"from marathon_agents import CatalogueSnoop\n\nclass Agent(CatalogueSnoop):\n    roots = {tuple(roots)!r}\n")
        agent = "snoop_copies:Agent"
    scenario = write_scenario(duration="30m", cadence="10m", schedule={"faults": 1},
                              apps_dir="builtin" if apps == "builtin" else str(tmp_path / "apps"))
    result = run_json("--agent", agent, "--scenario", str(scenario), "--out", str(tmp_path / "runs"),
                      extra_path=[tmp_path / "agents"])
    if result["isolation"] != "namespaces":
        pytest.skip(f"no namespace isolation on this machine ({result['isolation']})")
    seen = catalogue_report(result["bundle"])
    # it looked in the right places: the apps' code is there, their catalogues are not
    assert seen["apps_dir"] == str(APPS_DIR) and all(seen["app_code_visible"])
    assert seen["read"] == []


@pytest.mark.parametrize("agent, outcome", [("marathon_agents:RaiseEveryStep", "error"),
                                            ("marathon_agents:SleepPastBudget", "timeout")])
def test_a_broken_agent_still_leaves_a_verifiable_scored_bundle(tmp_path: Path, write_scenario, agent: str,
                                                                 outcome: str) -> None:
    scenario = write_scenario(duration="1h", cadence="15m", schedule={"faults": 3})
    result = run_json("--agent", agent, "--scenario", str(scenario), "--out", str(tmp_path), "--step-budget", "2")
    assert verify(result["bundle"]).ok
    outcomes = step_outcomes(result["bundle"])
    assert len(outcomes) == 4 and set(outcomes) == {outcome}
    assert result["score"] == 0 and len(result["faults"]) == 3


def test_flipping_any_byte_of_a_sealed_bundle_fails_verify(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="1h", schedule={"faults": 3})
    bundle = Path(run_json("--agent", "pytest_sremarathon.baselines:RollbackAgent", "--scenario", str(scenario),
                           "--out", str(tmp_path))["bundle"])
    assert run_cli("verify", str(bundle)).returncode == 0
    data = bundle.read_bytes()
    positions = sorted({0, 1, 3, 4, 8, 9, len(data) - 1, len(data) - 5, len(data) - 8}
                       | set(range(10, len(data) - 8, max(1, len(data) // 60))))
    tampered = tmp_path / "tampered.tar.gz"
    for pos in positions:
        flipped = bytearray(data)
        flipped[pos] ^= 0xFF
        tampered.write_bytes(bytes(flipped))
        assert not verify(tampered).ok, f"flipping byte {pos} of {len(data)} went unnoticed"
    proc = run_cli("verify", str(tampered))
    assert proc.returncode != 0 and proc.stdout.strip()


def test_same_seed_and_agent_give_byte_identical_events(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="2h", schedule={"faults": 5})
    runs = [run_json("--agent", "pytest_sremarathon.baselines:RollbackAgent", "--scenario", str(scenario),
                     "--seed", "7", "--out", str(tmp_path / str(i))) for i in range(2)]
    first, second = (events_bytes(r["bundle"]) for r in runs)
    assert first == second
    other = run_json("--agent", "pytest_sremarathon.baselines:RollbackAgent", "--scenario", str(scenario),
                     "--seed", "8", "--out", str(tmp_path / "other"))
    assert events_bytes(other["bundle"]) != first


@pytest.mark.parametrize("args, expected", [
    (["--scenario", "{bad_yaml}"], "not valid YAML"),
    (["--scenario", "{bad_field}"], "cadance: unknown field"),
    (["--agent", "no_such_module.agents:Agent"], "cannot import agent module 'no_such_module.agents'"),
    (["--agent", "marathon_agents:SECRET_ENV"], "is a str, not a class"),
    (["--agent", "pytest_sremarathon.agent.protocol:Environment"], "step"),
    (["--think-time", "sometimes"], "--think-time: 'sometimes' is not a think-time model; write frozen, "
                                    "per-request:SECONDS"),
])
def test_bad_input_gives_a_one_line_error(tmp_path: Path, args: list[str], expected: str) -> None:
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("name: x\napps: [shop\n")
    bad_field = tmp_path / "typo.yaml"
    bad_field.write_text("name: x\napps: [shop]\ncadance: 5m\n")
    argv = [a.format(bad_yaml=bad_yaml, bad_field=bad_field) for a in args]
    if "--agent" not in argv:
        argv += ["--agent", "pytest_sremarathon.baselines:NoopAgent"]
    proc = run_cli("run", *argv)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert expected in lines[0]
