"""The agent's process tree is limited (issue 17): memory, processes, workspace. Real agent
processes, real allocations, forks and writes; each crossing ends that step with the ``limit``
outcome naming the limit, the next step runs, and nothing the agent started survives."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from pytest_sremarathon.agent.protocol import EnvironmentWire, ObservationWire
from pytest_sremarathon.agent_host import AgentHost, AgentSpec
from pytest_sremarathon.agent_limits import AgentLimits, dir_size
from pytest_sremarathon.clock import EPOCH

TESTS = Path(__file__).resolve().parents[1]
LIMITS = AgentLimits.parse("512Mi", 16, "256Mi")


def host(tmp_path: Path, spec: AgentSpec, isolation: str = "auto", budget: float = 60.0) -> AgentHost:
    ws = tmp_path / "workspace"
    ws.mkdir(exist_ok=True)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    env = EnvironmentWire(workspace=str(ws), kubeconfig=str(kubeconfig), apps=["shop"], cadence_seconds=60,
                          server="http://127.0.0.1:9", token="tok")
    return AgentHost(spec, env, step_budget=budget, stderr_path=tmp_path / "stderr.log", hide=[],
                     isolation=isolation, limits=LIMITS)  # type: ignore[arg-type]


def obs(step: int) -> ObservationWire:
    return ObservationWire(time=EPOCH + timedelta(minutes=5 * step), step=step, alerts=[], new_alerts=[])


def alive(pid: int) -> bool:
    """Is ``pid`` still one of the test agents' ``sleep 300`` children (not a zombie, and not another
    process that got the pid since)?"""
    try:
        with open(f"/proc/{pid}/stat") as f:
            running = f.read().split(")")[-1].split()[0] != "Z"
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return running and f.read() == b"sleep\x00300\x00"
    except OSError:
        return False


def exec_spec(what: str) -> AgentSpec:
    return AgentSpec(exec=f"{sys.executable} {TESTS / 'limit_agents.py'} {what}")


def test_limits_are_scenario_fields_with_defaults_and_errors_that_say_the_fix(write_scenario) -> None:
    from pytest_sremarathon.errors import ConfigError
    from pytest_sremarathon.scenario import AgentConfig, load_scenario

    assert AgentConfig().limits == AgentLimits.parse("2Gi", 64, "2Gi")
    assert AgentConfig(memory_limit="unlimited").limits.memory is None
    path = write_scenario(agent={"memory_limit": "lots"})
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert str(path) in str(err.value) and "memory_limit" in str(err.value) and "512Mi" in str(err.value)


@pytest.mark.parametrize("how", ["class", "exec"])
def test_an_agent_holding_3gb_is_stopped_at_the_memory_limit(tmp_path: Path, how: str) -> None:
    spec = AgentSpec(agent="limit_agents:Hog3G") if how == "class" else exec_spec("hog")
    with host(tmp_path, spec) as h:
        first = h.step(obs(1))
        assert first.outcome == "limit" and "memory limit 512Mi reached" in (first.error or ""), first
        if how == "class":
            assert h.step(obs(2)).outcome == "ok"


def test_children_holding_memory_together_are_stopped_by_the_tree_limit(tmp_path: Path) -> None:
    with host(tmp_path, exec_spec("hog-children")) as h:
        out = h.step(obs(1))
    assert out.outcome == "limit" and "memory limit 512Mi reached (the agent's processes held" in (out.error or "")
    assert out.wall_seconds < 30  # not left to run out its 60 s


@pytest.mark.parametrize("isolation", ["auto", "none"])
@pytest.mark.parametrize("how", ["class", "exec"])
def test_an_agent_forking_25_children_is_stopped_and_they_are_gone(tmp_path: Path, how: str, isolation: str) -> None:
    spec = AgentSpec(agent="limit_agents:Forker") if how == "class" else exec_spec("fork")
    with host(tmp_path, spec, isolation=isolation) as h:
        out = h.step(obs(1))
        assert out.outcome == "limit" and "process limit 16 reached" in (out.error or ""), out
        assert out.wall_seconds < 20
        if how == "class":
            assert h.step(obs(2)).outcome == "ok"  # a fresh process, the marathon goes on
    pid_file = tmp_path / "workspace" / "children.pids"
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) >= 10  # it got that far before the limit stopped it
    if isolation == "auto" and h.isolation == "namespaces":
        pids = []  # their pids are the namespace's: the namespace died with its first process
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [p for p in pids if alive(p)], "children that left the process group were cleaned up"


@pytest.mark.parametrize("how", ["class", "exec"])
def test_an_agent_filling_its_workspace_is_stopped_at_the_workspace_limit(tmp_path: Path, how: str) -> None:
    spec = AgentSpec(agent="limit_agents:Filler") if how == "class" else exec_spec("fill")
    with host(tmp_path, spec) as h:
        out = h.step(obs(1))
        assert out.outcome == "limit" and "workspace limit 256Mi reached" in (out.error or ""), out
        assert dir_size(tmp_path / "workspace") < 600 * 2**20  # stopped well before its 1 GiB
        if how == "class":
            assert h.step(obs(2)).outcome == "ok"  # a full workspace that stops growing is no crossing


def test_a_single_file_cannot_outgrow_the_workspace_limit(tmp_path: Path) -> None:
    cmd = f"{sys.executable} -c \"open('big', 'wb').write(b'x' * (300 * 2**20))\""
    with host(tmp_path, AgentSpec(exec=cmd)) as h:
        out = h.step(obs(1))
    assert out.outcome == "limit" and "workspace limit 256Mi reached" in (out.error or ""), out
    assert os.path.getsize(tmp_path / "workspace" / "big") <= 256 * 2**20
