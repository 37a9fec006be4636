"""``--agent-exec``: a command started once per step, in the agent's isolation, with the step's
observation, the MCP server and the token in its environment (real processes, the real MCP SDK
client, the real MCP server)."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest

from pytest_sremarathon.agent.protocol import Alert, EnvironmentWire, ObservationWire
from pytest_sremarathon.agent_host import AgentHost, AgentSpec
from pytest_sremarathon.agent_tools.rules import Game
from pytest_sremarathon.agent_tools.server import McpServer
from pytest_sremarathon.agent_tools.toolbox import Endpoints
from pytest_sremarathon.clock import EPOCH

TOKEN = "tok-" + "5" * 20


def make_host(tmp_path: Path, command: str, budget: float = 20.0, isolation: str = "auto") -> AgentHost:
    ws = tmp_path / "workspace"
    ws.mkdir(exist_ok=True)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = EnvironmentWire(workspace=str(ws), kubeconfig=str(kubeconfig), apps=["shop"], cadence_seconds=300,
                          server="http://127.0.0.1:9", token=TOKEN)
    return AgentHost(AgentSpec(exec=command), env, step_budget=budget, stderr_path=tmp_path / "stderr.log",
                     hide=[tmp_path / "hidden"], isolation=isolation)  # type: ignore[arg-type]


def obs(step: int) -> ObservationWire:
    a = Alert(id=f"a{step}", name="HighErrorRate", status="firing", severity="critical",
              labels={"app": "shop", "service": "cart"}, starts_at=EPOCH)
    return ObservationWire(time=EPOCH + timedelta(minutes=5 * step), step=step, alerts=[a], new_alerts=[a])


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(path))}"


def test_each_step_runs_the_command_with_the_observation_and_a_stdout_report(tmp_path: Path) -> None:
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hidden" / "truth").write_text("secret")
    cmd = script(tmp_path, "agent.py", """
        import json, os, pathlib
        obs = json.load(open(os.environ["SREMARATHON_OBSERVATION"]))
        seen = {k: os.environ.get(k) for k in ("SREMARATHON_TOKEN", "SREMARATHON_STEP", "KUBECONFIG",
                                               "SREMARATHON_MCP_URL", "SREMARATHON_MCP_CONFIG")}
        hidden = pathlib.Path(os.environ["HIDDEN"]) if "HIDDEN" in os.environ else None
        pathlib.Path("steps.log").open("a").write(json.dumps({"cwd": os.getcwd(), "step": obs["step"], **seen}) + "\\n")
        print("some chatter first")
        print(json.dumps({"findings": [{"incident": "cart", "alerts": [a["id"] for a in obs["new_alerts"]],
                                        "component": "service:shop/cart"}]}))
    """)
    with make_host(tmp_path, cmd) as h:
        outs = [h.step(obs(1)), h.step(obs(2))]
    assert [o.outcome for o in outs] == ["ok", "ok"]
    assert [o.report.findings[0].alerts for o in outs] == [["a1"], ["a2"]]  # type: ignore[union-attr]
    lines = [json.loads(x) for x in (tmp_path / "workspace" / "steps.log").read_text().splitlines()]
    ws = str((tmp_path / "workspace").resolve())
    assert [(x["cwd"], x["step"], x["SREMARATHON_STEP"]) for x in lines] == [(ws, 1, "1"), (ws, 2, "2")]
    assert lines[0]["SREMARATHON_TOKEN"] == TOKEN and lines[0]["KUBECONFIG"].endswith("kubeconfig")
    assert lines[0]["SREMARATHON_MCP_URL"] is None  # no MCP server attached in this test
    assert "some chatter" not in (tmp_path / "stderr.log").read_text()


@pytest.mark.parametrize("body, outcome, words", [
    ("print('not a report')", "invalid", "printed not JSON on stdout"),
    ("print('[1, 2]')", "invalid", "printed a JSON list"),
    ("print('{\"findings\": [{\"alerts\": []}]}')", "invalid", "invalid report: findings.0.incident"),
    ("import sys; sys.stderr.write('boom: no such thing\\n'); sys.exit(3)", "error",
     "step command exited with code 3; last stderr line: boom: no such thing"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "error", "killed by SIGSEGV"),
    ("", "ok", None),
])
def test_garbage_crashes_and_silence(tmp_path: Path, body: str, outcome: str, words: str | None) -> None:
    with make_host(tmp_path, script(tmp_path, "agent.py", body)) as h:
        out = h.step(obs(1))
    assert out.outcome == outcome and (words is None or words in (out.error or "")), out
    if outcome == "ok":
        assert out.report is None  # nothing printed, nothing submitted: an empty step


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_hanging_command_is_cut_at_the_budget_with_all_it_started(tmp_path: Path, isolation: str) -> None:
    cmd = "sleep 300 & echo $! > bg.pid; setsid sleep 301 & echo $! > escaped.pid; sleep 302"
    with make_host(tmp_path, cmd, budget=2.0, isolation=isolation) as h:
        out = h.step(obs(1))
        assert out.outcome == "timeout" and "budget of 2 s" in (out.error or "")
        assert 2.0 <= out.wall_seconds < 10
        assert h.step(obs(2)).outcome == "timeout"  # and the next step runs it again
    if isolation == "none":  # (in namespaces the pids are the namespace's, which died with the step)
        for name in ("bg.pid", "escaped.pid"):
            pid = int((tmp_path / "workspace" / name).read_text())
            assert not Path(f"/proc/{pid}").exists() or "sleep" not in Path(f"/proc/{pid}/cmdline").read_text()


def test_what_the_command_submits_through_mcp_is_the_steps_report(tmp_path: Path) -> None:
    ran: list[list[str]] = []
    game = Game("t", ("shop",), 300, 20, "frozen", (), "memory 2Gi")
    mcp = McpServer(Endpoints("http://127.0.0.1:9", TOKEN), game,
                    lambda argv, timeout: (ran.append(argv), (0, "ok", ""))[1]).start()
    cmd = script(tmp_path, "agent.py", """
        import json, os, anyio
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        config = json.load(open(os.environ["SREMARATHON_MCP_CONFIG"]))["mcpServers"]["sremarathon"]
        assert config["url"] == os.environ["SREMARATHON_MCP_URL"]

        async def main():
            http = create_mcp_http_client(headers=config["headers"])
            async with streamable_http_client(config["url"], http_client=http) as (r, w), ClientSession(r, w) as s:
                await s.initialize()
                alerts = json.loads((await s.call_tool("alerts", {})).content[0].text)["alerts"]
                await s.call_tool("report_finding", {"incident": "cart", "alerts": [a["id"] for a in alerts],
                                                     "component": "service:shop/cart", "cause": "change:c9"})
                await s.call_tool("claim_resolved", {"incident": "old"})
        anyio.run(main)
        print(json.dumps({"findings": [{"incident": "old", "alerts": []}], "notes": "from stdout"}))
    """)
    try:
        with make_host(tmp_path, cmd) as h:
            h.attach_mcp(mcp.url, mcp.submissions)
            out = h.step(obs(4))
            late = h.step(obs(5))
    finally:
        mcp.stop()
    assert out.outcome == "ok", out
    report = out.report
    assert report is not None
    assert [(f.incident, f.alerts, f.cause) for f in report.findings] == [("old", [], None), ("cart", ["a4"], "change:c9")]
    assert [c.incident for c in report.claims] == ["old"] and report.notes == "from stdout"
    assert late.report is not None and [f.alerts for f in late.report.findings if f.incident == "cart"] == [["a5"]]
    config = json.loads((tmp_path / "workspace" / ".sremarathon" / "mcp.json").read_text())
    assert config["mcpServers"]["sremarathon"]["headers"] == {"Authorization": f"Bearer {TOKEN}"}
    assert oct((tmp_path / "workspace" / ".sremarathon" / "mcp.json").stat().st_mode & 0o777) == "0o600"


def test_relative_paths_in_the_command_line_are_the_invocation_directorys(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "mine.py").write_text("print('{}')")
    spec = AgentSpec.from_options(agent_exec="python3 agents/mine.py --flag", cwd=tmp_path)
    assert spec.exec == f"python3 {tmp_path / 'agents' / 'mine.py'} --flag" and spec.label.startswith("exec:")
    with pytest.raises(ValueError, match="one of"):
        AgentSpec.from_options("a.b:C", agent_exec="x")
    t0 = time.monotonic()
    with make_host(tmp_path, spec.exec or "") as h:
        assert h.step(obs(1)).outcome == "ok"
    assert time.monotonic() - t0 < 20


pytest_plugins = ["pytester"]


def test_the_pytest_option_is_one_of_three_ways_to_name_the_agent(pytester: pytest.Pytester) -> None:
    both = pytester.runpytest_subprocess("--agent=pytest_sremarathon.baselines:NoopAgent", "--agent-exec", "true",
                                         "--collect-only")
    assert both.ret == pytest.ExitCode.USAGE_ERROR
    both.stderr.fnmatch_lines(["*give one of --agent, --agent-cmd or --agent-exec*"])
    empty = pytester.runpytest_subprocess("--agent-exec", " ", "--collect-only")
    assert empty.ret == pytest.ExitCode.USAGE_ERROR
    empty.stderr.fnmatch_lines(["*--agent-exec is empty*"])
    ok = pytester.runpytest_subprocess("--agent-exec", "python3 my_agent.py", "--marathon-scenario", "smoke",
                                       "--collect-only", "-q")
    assert ok.ret == pytest.ExitCode.OK, ok.stdout.str() + ok.stderr.str()
    ok.stdout.fnmatch_lines(["sremarathon:smoke::smoke[[]seed=1[]]::segment-01"])
    assert "--agent-exec" in pytester.runpytest_subprocess("--help").stdout.str()
