"""Whole marathons with agents that bring nothing but a command line and MCP (issue 17): the
scripted MCP-client agent (tests/mcp_agents/rollback_mcp.py: the SDK's client, no LLM) through
pytest's ``--agent-exec`` on the smoke marathon, and agents that cross their limits at one step
after another through ``sremarathon run --agent-exec``. Everything is real: the twin, the
pipeline, the MCP server, the agent's sandbox."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from support.cli import TESTS, child_env, events_bytes, run_json

from pytest_sremarathon.bundle import open_bundle, verify
from pytest_sremarathon.scoring import score_bundle

pytest_plugins = ["pytester"]

MCP_AGENT = TESTS / "mcp_agents" / "rollback_mcp.py"


def events(bundle: Path | str, type_: str) -> list[dict[str, Any]]:
    return [e.data for e in open_bundle(bundle).events if e.type == type_]


@pytest.mark.slow
def test_a_scripted_mcp_client_runs_the_smoke_marathon_through_agent_exec(pytester: pytest.Pytester,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in child_env().items():
        monkeypatch.setenv(k, v)
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(MCP_AGENT))}"
    result = pytester.runpytest_subprocess("--agent-exec", command, "--marathon-scenario", "smoke")
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    result.stdout.fnmatch_lines([f"sremarathon: agent exec: {command}; backend twin*"])
    row = next(line for line in result.outlines if line.startswith("sremarathon:smoke::smoke[seed=1]"))
    bundle = pytester.path / row.split()[-1]
    assert verify(bundle).ok
    steps = events(bundle, "agent.step")
    assert len(steps) == 24 and {s["outcome"] for s in steps} == {"ok"}, {s["outcome"] for s in steps}
    # what it submitted with report_finding became the steps' reports, in the scoring's identifiers
    findings = [f for s in steps for f in (s["report"] or {}).get("findings", [])]
    assert findings and all(f["component"].startswith("service:") for f in findings)
    assert any((f.get("cause") or "").startswith("change:") for f in findings)
    # its pipeline_revert calls passed the policy point and were recorded as the agent's actions
    reverts = [a for a in events(bundle, "action") if a["channel"] == "pipeline" and a["verb"] == "revert"]
    assert reverts and all(a["actor"] == "agent" and a["allowed"] for a in reverts)
    score = score_bundle(open_bundle(bundle))
    repaired = [f for f in score.faults if f.repaired]
    assert repaired, "the MCP agent repairs at least one fault while it is active"
    assert {a for f in repaired for a in f.repair_actions} <= {a["id"] for a in reverts}
    assert open_bundle(bundle).manifest["agent"] == f"exec:{command}"


def test_an_agent_crossing_each_limit_in_turn_is_stopped_and_the_marathon_goes_on(tmp_path: Path,
                                                                                  write_scenario) -> None:
    scenario = write_scenario(duration="25m", cadence="5m", apps=["shop"], schedule={"faults": 1},
                              agent={"memory_limit": "512Mi", "max_processes": 16, "workspace_limit": "256Mi",
                                     "step_budget": "60s"})
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(TESTS / 'limit_agents.py'))} marathon"
    result = run_json("--agent-exec", command, "--scenario", str(scenario), "--out", str(tmp_path / "out"))
    steps = events(result["bundle"], "agent.step")
    assert [s["outcome"] for s in steps] == ["limit", "limit", "limit", "ok", "ok"], steps
    assert "memory limit 512Mi reached" in steps[0]["error"]
    assert "process limit 16 reached" in steps[1]["error"]
    assert "workspace limit 256Mi reached" in steps[2]["error"]
    assert steps[3]["report"]["notes"] == "step 4: fine"
    assert events(result["bundle"], "run.end")[0]["reason"] == "completed"
    assert verify(result["bundle"]).ok


def test_every_tool_against_the_twin_is_recorded_like_the_agents_own_requests(tmp_path: Path,
                                                                              write_scenario) -> None:
    scenario = write_scenario(duration="40m", cadence="5m", apps=["shop"], schedule={"faults": 2})
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(TESTS / 'mcp_agents' / 'every_tool.py'))}"
    runs = [run_json("--agent-exec", command, "--scenario", str(scenario), "--out", str(tmp_path / f"out{i}"))
            for i in (1, 2)]
    bundle = runs[0]["bundle"]
    steps = events(bundle, "agent.step")
    assert {s["outcome"] for s in steps} == {"ok"}, steps
    first = next(s for s in steps if s["report"] and s["report"]["notes"])
    seen = json.loads(first["report"]["notes"])
    ok = {k for k, (error, _) in seen.items() if not error}
    assert ok >= {"kubectl_get", "pod_logs", "promql_query", "promql_query_range", "alerts", "pipeline_changes",
                  "pipeline_diff", "pipeline_status", "pipeline_deploy", "kubectl_annotate", "kubectl_denied",
                  "report_finding", "claim_resolved"}, seen
    assert '"resultType":"vector"' in seen["promql_query"][1] and '"resultType":"matrix"' in seen["promql_query_range"][1]
    assert "diff --git" in seen["pipeline_diff"][1] or "@@" in seen["pipeline_diff"][1]
    assert "Forbidden" in seen["kubectl_denied"][1] and "no-delete-namespace" in seen["kubectl_denied"][1]
    assert seen["pipeline_revert"][0]  # an unknown change: the pipeline's own error, as text
    # the twin's Jaeger query API: the cart's traces, one of them span by span, an unknown id an error
    assert not seen["traces_search"][0] and "cart.shop" in seen["traces_search"][1]
    assert not seen["trace_get"][0] and "cart.shop" in seen["trace_get"][1]
    assert seen["trace_unknown"][0] and "not found" in seen["trace_unknown"][1]
    # the step's report is what it submitted
    assert [f["incident"] for f in first["report"]["findings"]] == ["probe"]
    assert [c["incident"] for c in first["report"]["claims"]] == ["probe"]
    # the writes passed the policy point and were recorded as the agent's actions
    actions = [a for a in events(bundle, "action") if a["actor"] == "agent"]
    assert any(a["verb"] == "patch" and a["allowed"] and a["target"].endswith("deployments/cart") for a in actions)
    assert any(a["rule"] == "no-delete-namespace" and not a["allowed"] for a in actions)
    assert any(a["channel"] == "pipeline" and a["verb"] == "deploy" and a["allowed"] for a in actions)
    assert first["requests"] and first["virtual_seconds"] > 0  # the tools' requests were charged think time
    # the same seed and the same agent decisions: the same record
    assert events_bytes(runs[0]["bundle"]) == events_bytes(runs[1]["bundle"])
