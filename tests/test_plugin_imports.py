"""Loading the plugin costs a project without marathons next to nothing: pytest imports the
``pytest11`` entry point on every run, on any machine where the package is installed, so the
entry point imports nothing else of the package and the hooks import what they need when a
marathon needs it."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points

import pytest

pytest_plugins = ["pytester"]

#: What a run without marathons must never import: the marathon machinery, the shipped agents,
#: the models and the third-party libraries they need.
HEAVY = ("pytest_sremarathon.marathon", "pytest_sremarathon.scenario", "pytest_sremarathon.schedule",
         "pytest_sremarathon.twin", "pytest_sremarathon.kube", "pytest_sremarathon.scoring",
         "pytest_sremarathon.bundle", "pytest_sremarathon.agent", "pytest_sremarathon.pipeline",
         "pytest_sremarathon.faults", "pytest_sremarathon.report", "pytest_sremarathon.baselines",
         "pydantic", "yaml", "kubernetes", "cryptography")


def heavy(modules: list[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def entry_point() -> str:
    [ep] = [ep for ep in entry_points(group="pytest11") if ep.name == "sremarathon"]
    return ep.value


def test_importing_the_entry_point_imports_nothing_else_of_the_package() -> None:
    module = entry_point()
    assert module == "pytest_sremarathon.plugin"
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout)
    assert heavy(loaded) == []
    assert [m for m in loaded if m.startswith("pytest_sremarathon")] == ["pytest_sremarathon", module]


@pytest.mark.parametrize("agent", [None, "pytest_sremarathon.baselines:NoopAgent"])
def test_a_run_without_marathons_imports_nothing_heavy(pytester: pytest.Pytester, agent: str | None) -> None:
    """Up to the process's end (the JUnit file, the terminal summary), with or without an agent
    (with one, naming a test file runs just that file)."""
    pytester.makeconftest("""
        import atexit, json, sys

        atexit.register(lambda: open("modules.json", "w").write(json.dumps(sorted(sys.modules))))
    """)
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    args = ["-p", "no:cacheprovider", "--junitxml=out.xml", "test_unit.py"]
    if agent:
        args.append(f"--agent={agent}")
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=1)
    loaded = json.loads((pytester.path / "modules.json").read_text())
    assert "pytest_sremarathon.plugin" in loaded  # the plugin was loaded (from its entry point)
    assert heavy(loaded) == []
