"""The command line without a checkout: built-in scenarios by name (`sremarathon scenarios`,
`--scenario NAME`), the smoke marathon's calibration, and `sremarathon init`.

(tests/test_installed.py runs the commands from a wheel installed in a fresh virtualenv.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.cli import run_cli

from pytest_sremarathon.builtin import APPS_DIR, builtin_path
from pytest_sremarathon.scenario import ScenarioFile, load_scenario


def sremarathon(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return run_cli(*args, cwd=cwd, timeout=timeout)


def test_scenarios_lists_the_builtin_ones_one_line_each(tmp_path: Path) -> None:
    proc = sremarathon("scenarios", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["default", "smoke"]
    assert re.match(r"default +12h, 60 faults over shop, social, hotel, agent every 5m: \S", lines[0]), lines[0]
    assert re.match(r"smoke +2h, 10 faults over shop, social, hotel, agent every 5m: \S", lines[1]), lines[1]


@pytest.mark.parametrize("command", [["run", "--agent", "pytest_sremarathon.baselines:NoopAgent"], ["schedule"],
                                     ["twin", "up"]])
def test_an_unknown_scenario_name_lists_the_available_ones(tmp_path: Path, command: list[str]) -> None:
    proc = sremarathon(*command, "--scenario", "smok", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("sremarathon: error: --scenario smok: no built-in scenario 'smok'; available: "
                                   "default, smoke (`sremarathon scenarios` describes them), or give the path of "
                                   "a scenario .yaml file")


def test_run_from_an_empty_directory_uses_the_builtin_default(tmp_path: Path) -> None:
    proc = sremarathon("run", "--agent", "pytest_sremarathon.baselines:RollbackAgent", "--duration", "30m",
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0].startswith('sremarathon: marathon seed 1 (built-in scenario "default"), 3 app(s)')
    bundle = re.search(r"^bundle: (\S+)$", proc.stdout, re.M)
    assert bundle and Path(bundle.group(1)).is_file()
    assert Path(bundle.group(1)).parent == tmp_path / "sremarathon-runs"


def test_a_projects_scenarios_marathon_yaml_is_the_default_when_there_is_one(tmp_path: Path, write_scenario) -> None:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "marathon.yaml").write_text(
        write_scenario("mine", apps=["shop"], duration="1h", schedule={"faults": 2}).read_text())
    proc = sremarathon("schedule", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["faults"]) == 2


def test_smoke_is_the_default_marathon_shortened_with_the_same_calibration(tmp_path: Path) -> None:
    default, smoke = (load_scenario(builtin_path(n)).spec.model_dump() for n in ("default", "smoke"))
    assert smoke["duration"] == 2 * 3600 and smoke["schedule"]["faults"] == 10
    for spec in (default, smoke):  # what makes the two differ: name, length, fault count, segment
        for key in ("name", "description", "duration", "segment"):
            spec.pop(key)
        spec["schedule"].pop("faults")
    assert smoke == default
    text = builtin_path("smoke").read_text()
    for source in ("CALIBRATION [D]", "SRE Workbook App. C", "Google SRE book", "PagerDuty 2021"):
        assert source in text  # the calibration's sources, as in the default file
    proc = sremarathon("schedule", "--scenario", "smoke", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    schedule = json.loads(proc.stdout)
    assert 8 <= len(schedule["faults"]) <= 10
    assert {f["app"] for f in schedule["faults"]} >= {"shop", "social", "hotel"}
    assert schedule["stats"]["overlap_share"] >= 0.8  # overlapping faults


def commented_keys(text: str) -> list[str]:
    """Keys of the YAML text that have no comment on their line or on the line above."""
    lines = text.splitlines()
    bare = []
    for i, line in enumerate(lines):
        m = re.match(r"^\s*([a-z_]+):", line)
        if m and "#" not in line and not (i and lines[i - 1].strip().startswith("#")):
            bare.append(m.group(1))
    return bare


def model_keys(model: type, prefix: str = "") -> set[str]:
    keys = set()
    for name, field in model.model_fields.items():
        keys.add(prefix + name)
        sub = field.annotation
        if isinstance(sub, type) and hasattr(sub, "model_fields"):
            keys |= model_keys(sub, f"{prefix}{name}.")
    return keys


def yaml_keys(data: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in data.items():
        keys.add(prefix + key)
        if isinstance(value, dict) and key != "families":
            keys |= yaml_keys(value, f"{prefix}{key}.")
    return keys


@pytest.mark.parametrize("source", ["default", "smoke"])
def test_init_writes_a_scenario_with_a_comment_on_every_field(tmp_path: Path, source: str) -> None:
    proc = sremarathon("init", "--from", source, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "scenarios" / "marathon.yaml"
    assert proc.stdout.splitlines()[0] == f"wrote scenarios/marathon.yaml (the built-in scenario {source!r}, running " \
                                          f"the built-in applications)"
    text = written.read_text()
    data = yaml.safe_load(text)
    assert yaml_keys(data) == model_keys(ScenarioFile)  # every field, and only known ones
    assert commented_keys(text) == []
    assert data["apps_dir"] == "builtin"
    from pytest_sremarathon.policy import RULES

    for rule in RULES:  # each policy rule is explained where the rules are listed
        assert re.search(rf"^#   {rule} +denies \S", text, re.M), rule
    # the same marathon as the built-in one: same values, the package's applications
    mine, theirs = load_scenario(written), load_scenario(builtin_path(source))
    assert mine.apps_root == APPS_DIR
    assert {**mine.spec.model_dump(), "apps_dir": ""} == {**theirs.spec.model_dump(), "apps_dir": ""}
    # and the command line picks it up in that directory without being told
    first = sremarathon("schedule", "--json", cwd=tmp_path)
    assert json.loads(first.stdout)["faults"] == json.loads(sremarathon("schedule", "--json", "--scenario", source,
                                                                         cwd=tmp_path).stdout)["faults"]


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    assert sremarathon("init", "ci", cwd=tmp_path).returncode == 0
    mine = tmp_path / "ci" / "marathon.yaml"
    mine.write_text(mine.read_text().replace("cadence: 5m", "cadence: 10m"))
    again = sremarathon("init", "ci", cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.strip() == ("sremarathon init: error: ci/marathon.yaml already exists; give --force to "
                                    "overwrite, or another DIR")
    assert "cadence: 10m" in mine.read_text()
    assert sremarathon("init", "ci", "--with-apps", cwd=tmp_path).returncode == 2  # the file is still there
    assert not (tmp_path / "ci" / "apps").exists()
    forced = sremarathon("init", "ci", "--force", cwd=tmp_path)
    assert forced.returncode == 0 and "cadence: 5m" in mine.read_text()


def test_init_with_apps_copies_them_for_local_changes(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    proc = sremarathon("init", "bench", "--with-apps", "--from", "smoke", cwd=project)
    assert proc.returncode == 0, proc.stderr
    copies = project / "bench" / "apps"
    assert sorted(p.name for p in copies.iterdir()) == ["conftest.py", "hotel", "shop", "social"]
    for app in ("shop", "social", "hotel"):
        shipped = {p.relative_to(APPS_DIR / app) for p in (APPS_DIR / app).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts}
        assert {p.relative_to(copies / app) for p in (copies / app).rglob("*") if p.is_file()} == shipped
    assert yaml.safe_load((project / "bench" / "marathon.yaml").read_text())["apps_dir"] == "apps"
    # relative apps_dir resolves against the scenario file, from whichever directory it is run
    scenario = load_scenario(project / "bench" / "marathon.yaml")
    assert scenario.apps_root == copies.resolve()
    assert {a.root.resolve() for a in scenario.apps} == {(copies / a).resolve() for a in ("shop", "social", "hotel")}
    # a local change to a copy is what runs
    change = copies / "shop" / "app.yaml"
    change.write_text(change.read_text() + "\n# local change\n")
    schedule = sremarathon("schedule", "--scenario", "bench/marathon.yaml", "--json", cwd=project)
    assert schedule.returncode == 0, schedule.stderr
    # the copies' unit tests run as the pipeline's build runs them, and only when asked for
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    unit = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "bench/apps/shop/tests"],
                          cwd=project, capture_output=True, text=True, timeout=300, env=env)
    assert unit.returncode == 0 and re.search(r"\d+ passed", unit.stdout), unit.stdout + unit.stderr
    (project / "test_own.py").write_text("def test_own():\n    pass\n")
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--co",
                            "--agent=pytest_sremarathon.baselines:NoopAgent"],
                           cwd=project, capture_output=True, text=True, timeout=300, env=env)
    collected = [line for line in suite.stdout.splitlines() if "::" in line and not line.startswith("sremarathon: ")]
    assert sorted(collected) == ["bench/marathon.yaml::smoke[seed=1]::segment-01",
                                 "bench/marathon.yaml::smoke[seed=1]::segment-02", "test_own.py::test_own"], suite.stdout
