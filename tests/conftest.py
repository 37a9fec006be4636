"""Fixtures shared by the test files: short scenarios derived from the default marathon."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

import pytest_sremarathon.marathon  # noqa: F401 - see below
from pytest_sremarathon.builtin import APPS_DIR, SCENARIOS_DIR

# The plugin imports its machinery only when a marathon is collected. In-process pytester runs
# (pytester.runpytest) drop the modules a run imported when it ends; cryptography's Rust
# bindings cannot be imported a second time in one process. So the machinery is imported here,
# once, before any such run.

DEFAULT_SCENARIO = SCENARIOS_DIR / "default.yaml"


@pytest.fixture
def write_scenario(tmp_path: Path) -> Callable[..., Path]:
    """Write a variant of the default marathon (same apps and catalogue) into tmp_path."""

    def write(name: str = "short", **overrides: object) -> Path:
        data = yaml.safe_load(DEFAULT_SCENARIO.read_text())
        data["apps_dir"] = str(APPS_DIR)
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key].update(value)
            else:
                data[key] = value
        if "duration" in overrides and "segment" not in overrides:
            data["segment"] = overrides["duration"]  # short runs: one segment unless asked
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def marathon_file(pytester: pytest.Pytester, write_scenario: Callable[..., Path]) -> Callable[..., Path]:
    """A short shop-only scenario ``NAME.yaml`` inside pytester's directory (so that it is the
    rootdir). Its test module loads the pytester plugin (``pytest_plugins = ["pytester"]``)."""

    def make(name: str = "marathon", **overrides: object) -> Path:
        src = write_scenario(name, **{"apps": ["shop"], **overrides})
        dst = pytester.path / src.name
        dst.write_text(src.read_text())
        return dst

    return make
