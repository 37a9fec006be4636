"""A whole short marathon (the built-in smoke scenario) where a scripted agent finds the faulty
services with PromQL alone, through PROMETHEUS_URL, as an agent built for production would."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_sremarathon.agent_host import AgentSpec
from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.marathon import Marathon, MarathonOptions
from pytest_sremarathon.scenario import load_scenario


def test_a_promql_agent_finds_the_faulty_services_in_the_smoke_marathon(tmp_path: Path) -> None:
    # seed 2: among its faults, a replicas cut and a code exception whose services top the error ratios
    options = MarathonOptions(agent=AgentSpec.from_options("promql_agents:PromQLInvestigator"), seed=2,
                              out_dir=tmp_path / "runs")
    result = Marathon(load_scenario(SCENARIOS_DIR / "smoke.yaml"), options).run()
    events = open_bundle(result.bundle).events
    steps = [e.data for e in events if e.type == "agent.step"]
    assert steps and all(s["outcome"] == "ok" for s in steps), [s.get("error") for s in steps]
    worst = [json.loads(s["report"]["notes"])["worst"] for s in steps]
    named = {svc for w in worst for svc, _ in w}
    faulty = {f.component.split("/", 1)[1] for f in result.score.faults if f.component.startswith("service:")}
    assert named & faulty, (named, faulty)  # the error ratios PromQL ranks point at faulty services
    localized = [f for f in result.score.faults if f.localized]
    assert localized, [(f.id, f.kind, f.component) for f in result.score.faults]
    assert result.score.score > 0
