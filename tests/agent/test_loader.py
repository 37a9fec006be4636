"""resolve_agent: the class for a good spec, one-line AgentLoadErrors for everything else."""

from __future__ import annotations

import sys

import pytest

from pytest_sremarathon.agent.loader import AgentLoadError, resolve_agent


def test_resolves_a_class_and_baselines():
    import agents_for_tests

    from pytest_sremarathon.baselines import NoopAgent, RollbackAgent

    assert resolve_agent("agents_for_tests:EchoAgent") is agents_for_tests.EchoAgent
    assert resolve_agent("pytest_sremarathon.baselines:NoopAgent") is NoopAgent
    assert resolve_agent(" pytest_sremarathon.baselines:RollbackAgent ") is RollbackAgent


@pytest.fixture
def bad_modules(tmp_path, monkeypatch):
    pkg = tmp_path / "badagents"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "syntax.py").write_text("class Agent:\n    def step(self, obs)\n        return None\n")
    (pkg / "needs_dep.py").write_text("import numpy_that_is_not_installed\n")
    (pkg / "explodes.py").write_text("raise RuntimeError('no GPU found\\nplease install CUDA')\n")
    (pkg / "nested.py").write_text("class Outer:\n    class Agent:\n        def step(self, obs):\n            return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in list(sys.modules):
        if name.startswith("badagents"):
            monkeypatch.delitem(sys.modules, name)
    return pkg


@pytest.mark.parametrize("spec, expected", [
    ("mypkg.agents.MyAgent", "invalid agent spec 'mypkg.agents.MyAgent': expected 'package.module:Class', "
                             "e.g. --agent=mypkg.agents:MyAgent"),
    ("", "invalid agent spec ''"),
    ("pkg:Class:extra", "invalid agent spec 'pkg:Class:extra'"),
    ("pkg/agents.py:Agent", "invalid agent spec"),
    ("no_such_module_xyz:Agent", "cannot import agent module 'no_such_module_xyz' "
                                 "(from 'no_such_module_xyz:Agent'): ModuleNotFoundError: No module named 'no_such_module_xyz'"),
    ("badagents.syntax:Agent", "cannot import agent module 'badagents.syntax' (from 'badagents.syntax:Agent'): "
                               "SyntaxError: expected ':'"),
    ("badagents.needs_dep:Agent", "ModuleNotFoundError: No module named 'numpy_that_is_not_installed'"),
    ("badagents.explodes:Agent", "cannot import agent module 'badagents.explodes' (from 'badagents.explodes:Agent'): "
                                 "RuntimeError: no GPU found"),
    ("agents_for_tests:Missing", "agent module 'agents_for_tests' has no attribute 'Missing' (from 'agents_for_tests:Missing')"),
    ("badagents.nested:Outer.Missing", "has no attribute 'Outer.Missing'"),
    ("agents_for_tests:NOT_A_CLASS", "agent 'agents_for_tests:NOT_A_CLASS' is a int, not a class or factory"),
    ("agents_for_tests:NoStep", "agent class 'agents_for_tests:NoStep' has no step(obs) method; "
                                "an agent needs step(self, obs) -> Report"),
])
def test_one_line_errors(bad_modules, spec, expected):
    with pytest.raises(AgentLoadError) as err:
        resolve_agent(spec)
    msg = str(err.value)
    assert expected in msg
    assert "\n" not in msg
    assert err.value.__cause__ is None


def test_nested_attribute_path(bad_modules):
    import badagents.nested

    assert resolve_agent("badagents.nested:Outer.Agent") is badagents.nested.Outer.Agent
