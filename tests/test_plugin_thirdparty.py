"""A third-party agent package, installed with the plugin into a fresh virtualenv, outside the
repository, runs as the README says:

    pytest scenarios/marathon.yaml --agent=thirdparty.agent:Agent --junitxml=out.xml

The plugin and the agent are built into wheels; the fresh environment installs them from
those wheels only (``--no-index``), their dependencies included, so nothing of this checkout or
its virtualenv leaks in.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from support.fresh_venv import clean_env

from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.bundle import open_bundle, verify

REPO = Path(__file__).resolve().parent.parent
AGENT_PACKAGE = Path(__file__).resolve().parent / "thirdparty_agent"


def run(*argv: str | Path, cwd: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_thirdparty_agent_package_runs_from_a_fresh_virtualenv(tmp_path: Path, write_scenario) -> None:
    env = clean_env()
    # sources copied out of the checkout, so that building leaves nothing behind in it
    src = tmp_path / "src"
    shutil.copytree(REPO / "pytest_sremarathon", src / "plugin" / "pytest_sremarathon",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / "plugin" / name)
    shutil.copytree(AGENT_PACKAGE, src / "agent", ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))

    wheels = tmp_path / "wheels"
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", wheels, src / "plugin", src / "agent",
                cwd=tmp_path, env=env, timeout=600)
    if built.returncode != 0:
        pytest.skip(f"cannot build the wheels (no package index reachable?): {built.stderr.strip()[-500:]}")
    assert {re.sub(r"-.*", "", w.name) for w in wheels.glob("*.whl")} >= {"pytest_sremarathon", "thirdparty_sre_agent"}

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=env, timeout=300)
    python = venv / "bin" / "python"
    installed = run(python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels,
                    "thirdparty-sre-agent", cwd=tmp_path, env=env, timeout=600)
    assert installed.returncode == 0, installed.stderr
    # the fresh environment has its own plugin, not this checkout's
    where = run(python, "-c", "import pytest_sremarathon, thirdparty.agent; print(pytest_sremarathon.__file__)",
                cwd=tmp_path, env=env, timeout=120)
    assert where.returncode == 0, where.stderr
    assert where.stdout.strip().startswith(str(venv))

    # a project of the agent team's: the scenario (one virtual hour) and the applications it runs
    project = tmp_path / "project"
    shutil.copytree(APPS_DIR / "shop", project / "scenarios" / "apps" / "shop",
                    ignore=shutil.ignore_patterns("__pycache__"))
    scenario = yaml.safe_load(write_scenario("marathon", apps=["shop"], duration="1h", segment="30m",
                                             schedule={"faults": 2}).read_text())
    scenario["apps_dir"] = "apps"
    (project / "scenarios" / "marathon.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))

    result = run(venv / "bin" / "pytest", "scenarios/marathon.yaml", "--agent=thirdparty.agent:Agent",
                 "--junitxml=out.xml", "-p", "no:cacheprovider", cwd=project, env=env, timeout=600)
    assert result.returncode in (0, 1), result.stdout + result.stderr  # passed, or segments failed
    assert "SRE marathon results" in result.stdout

    cases = list(ET.parse(project / "out.xml").getroot().iter("testcase"))
    assert [c.get("name") for c in cases] == ["marathon[seed=1]::segment-01", "marathon[seed=1]::segment-02"]
    bundles = set()
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        [out] = case.findall("system-out")
        attached = re.findall(r"\[\[ATTACHMENT\|(.+?)\]\]", out.text or "")
        assert attached == [props["sremarathon_bundle"]]
        bundles.add(attached[0])
    [bundle] = bundles
    assert bundle.startswith("sremarathon-runs/")  # relative to the project (the rootdir)
    assert verify(project / bundle).ok
    steps = [e.data for e in open_bundle(project / bundle).events if e.type == "agent.step"]
    assert steps and {s["outcome"] for s in steps} == {"ok"}
    assert all(s["report"]["notes"].startswith("thirdparty step ") for s in steps)
    manifest_agent = [e.data["agent"] for e in open_bundle(project / bundle).events if e.type == "run.start"]
    assert manifest_agent == ["thirdparty.agent:Agent"]
