"""An agent that uses ``kubectl exec`` and a debug pod in a short marathon: every exec passes
the policy point and lands in the bundle (the ``action`` with the command line, the
``agent.exec`` session with its exit code), the charged think-time model charges the exec
request, and an open interactive session does not hold the world lock."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.cli import run_json

from pytest_sremarathon.bundle import open_bundle, verify
from pytest_sremarathon.scoring import score_bundle

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")


@pytest.mark.parametrize("think_time", ["frozen", "per-request:5"])
def test_an_agents_execs_are_recorded_in_the_bundle(tmp_path: Path, write_scenario, think_time: str) -> None:
    # the built-in smoke marathon as it is; the charged model on a 20-minute variant of it
    scenario = "smoke" if think_time == "frozen" else str(write_scenario(duration="20m", cadence="10m",
                                                                         schedule={"faults": 1}))
    result = run_json("--agent", "marathon_agents_exec:ExecAgent", "--scenario", scenario, "--out",
                      str(tmp_path), "--step-budget", "180", "--think-time", think_time)
    bundle = open_bundle(result["bundle"])
    assert verify(result["bundle"]).ok
    steps = [e for e in bundle.events if e.type == "agent.step"]
    assert {s.data["outcome"] for s in steps} == {"ok"}, steps[0].data.get("error")
    seen = json.loads(steps[0].data["report"]["notes"])
    cart = seen["cart"]
    assert seen["env"]["out"] == "REQUEST_TIMEOUT_MS=300\n"
    assert seen["exit"]["rc"] == 3 and "command terminated with exit code 3" in seen["exit"]["err"]
    assert seen["debug"]["rc"] == 0 and seen["debug"]["out"].startswith("ok")
    assert "403" in seen["denied"] or "Forbidden" in seen["denied"]
    assert seen["meanwhile"]["rc"] == 0 and f"pod/{cart}" in seen["meanwhile"]["out"]
    assert seen["session"] == {"rc": 4, "out": f"{cart}\n", "err": "command terminated with exit code 4\n"}

    actions = [e for e in bundle.events if e.type == "action" and e.data["actor"] == "agent"]
    execs = [a.data for a in actions if a.data["verb"] == "exec"]
    assert {"target": f"kube/shop/pods/{cart}/exec", "status": 101, "allowed": True,
            "detail": "container cart: sh -c 'env | grep REQUEST_TIMEOUT_MS'"}.items() <= execs[0].items()
    denied = [a for a in execs if not a["allowed"]]
    assert len(denied) == 1 and denied[0]["rule"] == "protected-namespaces" and denied[0]["status"] == 403
    assert denied[0]["detail"].endswith("(container ?: true)")
    attach = [a.data for a in actions if a.data["verb"] == "attach"]
    assert len(attach) == 1 and attach[0]["target"] == "kube/default/pods/probe/attach"
    sessions = {tuple(e.data["command"]): e.data for e in bundle.events if e.type == "agent.exec"}
    assert sessions[("sh", "-c", "exit 3")]["exit_code"] == 3
    assert sessions[("sh",)]["exit_code"] == 4 and sessions[("sh",)]["stdin"]
    probe = sessions[("wget", "-qO-", "http://cart.shop:8080/healthz")]
    assert probe["verb"] == "attach" and probe["exit_code"] == 0 and probe["pod"] == "default/probe"
    by_id = {a.data["id"]: a for a in actions}
    assert all(by_id[s["action"]].data["verb"] == s["verb"] for s in sessions.values())

    score = score_bundle(bundle)
    assert score.policy_denials == 1
    assert score.agent_actions == 2  # the debug pod's create and delete; execs only look
    if think_time != "frozen":
        assert steps[0].data["requests"] >= 10 and steps[0].data["virtual_seconds"] >= 50
        times = [a.t for a in actions]
        assert len(set(times)) == len(times), "each charged request happens at its own virtual time"
