"""The agent's git checkout of each app: it commits a repair and deploys it through the pipeline."""

from __future__ import annotations

from pathlib import Path

from support.cli import run_json

from pytest_sremarathon.bundle import open_bundle


def test_an_agent_commit_in_its_checkout_deploys_as_a_push_to_main(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="1h", cadence="10m", schedule={"faults": 1})
    result = run_json("--agent", "marathon_agents_git:CommitAndDeploy", "--scenario", str(scenario),
                      "--out", str(tmp_path))
    events = open_bundle(result["bundle"]).events
    notes = next(e.data["report"]["notes"] for e in events if e.type == "agent.step" and e.data.get("report")
                 and e.data["report"]["notes"])
    deployed, refused = (part.split("=", 1)[1] for part in notes.split("|"))
    changes = [e.data for e in events if e.type == "pipeline.change" and e.data["actor"] == "agent"]
    assert [c["change"]["message"] for c in changes] == ["recommendation: show four"]
    assert changes[0]["change"]["id"] == deployed and changes[0]["change"]["kind"] == "config"
    assert "-MAX_RECOMMENDATIONS: '5'" in changes[0]["change"]["diff"]
    deploys = [e.data for e in events if e.type == "pipeline.deploy" and e.data["actor"] == "agent"]
    assert [d["commit"] for d in deploys] == [deployed]
    assert "not based on the current main" in refused
