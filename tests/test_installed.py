"""The product as a user gets it: the wheel built from this checkout, installed (not editable)
into a fresh virtualenv, used from an empty directory outside the checkout.

    pip install pytest-sremarathon
    sremarathon scenarios
    sremarathon run --scenario smoke --agent pytest_sremarathon.baselines:RollbackAgent
    pytest --agent=pytest_sremarathon.baselines:RollbackAgent --marathon-scenario smoke

The wheel is built from a copy of the sources (building leaves nothing behind in the checkout);
its dependencies come from the package index, as for a user (pip's cache makes that quick).
Slow (about a minute and a half), and run by CI like every test.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.fresh_venv import clean_env

from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.bundle import verify

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent

pytestmark = pytest.mark.slow


def run(*argv: str | Path, cwd: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=clean_env(**env), capture_output=True, text=True,
                          timeout=timeout)


@dataclass
class Installed:
    wheel: Path
    venv: Path
    site_packages: Path
    tmp: Path

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name

    def project(self, name: str) -> Path:
        """An empty directory of a user's, outside the checkout."""
        path = self.tmp / name
        path.mkdir()
        return path


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("installed")
    assert REPO not in tmp.parents
    src = tmp / "src"
    shutil.copytree(REPO / "pytest_sremarathon", src / "pytest_sremarathon",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    wheels = tmp / "wheels"
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", wheels, src, cwd=tmp)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = wheels.glob("pytest_sremarathon-*.whl")
    venv = tmp / "venv"
    made = run(sys.executable, "-m", "venv", venv, cwd=tmp)
    assert made.returncode == 0, made.stderr
    got = run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=tmp)
    assert got.returncode == 0, got.stderr[-2000:]
    where = run(venv / "bin" / "python", "-c", "import pytest_sremarathon, pathlib; "
                "print(pathlib.Path(pytest_sremarathon.__file__).resolve().parent.parent)", cwd=tmp)
    assert where.returncode == 0, where.stderr
    site_packages = Path(where.stdout.strip())
    assert venv in site_packages.parents  # the installed copy, not this checkout's
    return Installed(wheel, venv, site_packages, tmp)


def test_the_wheel_carries_the_builtin_scenarios_and_applications(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    shipped = {"pytest_sremarathon/" + p.relative_to(REPO / "pytest_sremarathon").as_posix()
               for p in SCENARIOS_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert shipped <= names, sorted(shipped - names)
    for path in ("scenarios/default.yaml", "scenarios/smoke.yaml", "scenarios/apps/conftest.py",
                 "twin/openapi_schemas.json"):  # (the last: what kubectl explain reads)
        assert f"pytest_sremarathon/{path}" in names
    for app in ("shop", "social", "hotel"):  # code, manifests, config, unit tests, curated changes
        for part in ("app.yaml", "services/", "manifests/", "config/", "tests/test_handlers.py",
                     "changes/changes.yaml"):
            assert any(n.startswith(f"pytest_sremarathon/scenarios/apps/{app}/{part}") for n in names), (app, part)
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    # and the installed package has them where the package looks for them
    assert (installed.site_packages / "pytest_sremarathon" / "scenarios" / "apps" / "hotel" / "changes").is_dir()


def test_the_commands_work_from_an_empty_directory(installed: Installed) -> None:
    here = installed.project("cli")
    listed = run(installed.bin("sremarathon"), "scenarios", cwd=here)
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["default", "smoke"]

    schedule = run(installed.bin("sremarathon"), "schedule", "--scenario", "smoke", cwd=here)
    assert schedule.returncode == 0, schedule.stderr
    assert "faults: 10" in schedule.stdout and (here / "schedule-smoke-seed1.svg").is_file()

    ran = run(installed.bin("sremarathon"), "run", "--scenario", "smoke", "--agent",
              "pytest_sremarathon.baselines:RollbackAgent", cwd=here)
    assert ran.returncode == 0, ran.stderr
    score = re.search(r"^Marathon-Score: (\d+\.\d) / 100", ran.stdout, re.M)
    bundle = re.search(r"^bundle: (\S+)$", ran.stdout, re.M)
    assert score and float(score.group(1)) > 0, ran.stdout
    assert bundle and Path(bundle.group(1)).parent == here / "sremarathon-runs"

    assert run(installed.bin("sremarathon"), "verify", bundle.group(1), cwd=here).returncode == 0
    scored = run(installed.bin("sremarathon"), "score", bundle.group(1), "--json", cwd=here)
    assert scored.returncode == 0 and json.loads(scored.stdout)["score"] == pytest.approx(float(score.group(1)),
                                                                                       abs=0.05)
    page = run(installed.bin("sremarathon"), "report", bundle.group(1), "-o", "report.html", cwd=here)
    assert page.returncode == 0 and (here / "report.html").stat().st_size > 1000, page.stderr

    twin = subprocess.Popen([str(installed.bin("sremarathon")), "twin", "up", "--kubeconfig", "twin.kubeconfig"],
                            cwd=here, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert twin.stdout is not None
        lines = []
        for line in twin.stdout:
            lines.append(line)
            if line.startswith("kubeconfig:"):
                break
        assert lines and lines[0].startswith("twin up: shop, social, hotel on "), "".join(lines)
        assert (here / "twin.kubeconfig").is_file()
    finally:
        twin.send_signal(signal.SIGINT)
        assert twin.wait(timeout=60) == 0


def test_pytest_with_an_agent_in_a_project_without_marathon_files(installed: Installed) -> None:
    project = installed.project("agent-repo")
    (project / "test_unit.py").write_text("def test_unit():\n    pass\n")
    plain = run(installed.bin("pytest"), "-p", "no:cacheprovider", cwd=project)
    assert plain.returncode == 0 and "1 passed" in plain.stdout, plain.stdout  # nothing of ours without --agent
    assert "sremarathon" not in plain.stdout.replace("sremarathon-", "")

    result = run(installed.bin("pytest"), "-p", "no:cacheprovider", "--agent=pytest_sremarathon.baselines:RollbackAgent",
                 "--marathon-scenario", "smoke", "--junitxml=out.xml", cwd=project)
    assert result.returncode in (0, 1), result.stdout + result.stderr  # segments pass or fail; no error
    assert 'running the built-in scenario "smoke" as sremarathon:smoke' in result.stdout
    row = next((line for line in result.stdout.splitlines() if line.startswith("sremarathon:smoke::smoke[seed=1]")),
               None)
    assert row is not None, result.stdout
    score, bundle = float(row.split()[1]), row.split()[-1]
    assert score > 0 and bundle.startswith("sremarathon-runs/smoke-seed1-")
    assert verify(project / bundle).ok
    outcomes = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|failed)", result.stdout.splitlines()[-1]))
    assert sum(outcomes.values()) == 3, result.stdout  # the project's test and the two segments of smoke
    assert "sremarathon_bundle" in (project / "out.xml").read_text()


def test_the_agent_cannot_read_the_catalogue_in_site_packages(installed: Installed) -> None:
    project = installed.project("snoop")
    shutil.copy(HERE / "marathon_agents.py", project / "marathon_agents.py")
    ran = run(installed.bin("python"), "-m", "pytest_sremarathon.cli", "run", "--scenario", "smoke", "--duration",
              "30m", "--agent", "marathon_agents:CatalogueSnoop", "--json", cwd=project)
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    if result["isolation"] != "namespaces":
        pytest.skip(f"no namespace isolation on this machine ({result['isolation']})")
    from pytest_sremarathon.bundle import open_bundle

    notes = [e.data["report"]["notes"] for e in open_bundle(result["bundle"]).events
             if e.type == "agent.step" and (e.data.get("report") or {}).get("notes", "").startswith("CATALOGUE:")]
    assert notes, ran.stderr
    seen = json.loads(notes[0][len("CATALOGUE:"):])
    assert Path(seen["apps_dir"]) == installed.site_packages / "pytest_sremarathon" / "scenarios" / "apps"
    assert all(seen["app_code_visible"]) and seen["read"] == []


def test_init_with_apps_in_a_project(installed: Installed) -> None:
    project = installed.project("tuned")
    init = run(installed.bin("sremarathon"), "init", "--with-apps", "--from", "smoke", cwd=project)
    assert init.returncode == 0, init.stderr
    unit = run(installed.bin("pytest"), "-q", "-p", "no:cacheprovider", "scenarios/apps/social/tests", cwd=project)
    assert unit.returncode == 0 and re.search(r"\d+ passed", unit.stdout), unit.stdout + unit.stderr
    collected = run(installed.bin("pytest"), "-q", "-p", "no:cacheprovider", "--co",
                    "--agent=pytest_sremarathon.baselines:NoopAgent", cwd=project)
    ids = [line for line in collected.stdout.splitlines() if "::" in line and not line.startswith("sremarathon: ")]
    assert ids == ["scenarios/marathon.yaml::smoke[seed=1]::segment-01",
                   "scenarios/marathon.yaml::smoke[seed=1]::segment-02"], collected.stdout
