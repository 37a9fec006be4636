"""pytest configuration for the applications' own unit tests (``<app>/tests``).

They take a ``services`` fixture: the app's service modules, loaded exactly as the pipeline's
build step loads them. So ``pytest pytest_sremarathon/scenarios/apps/shop/tests`` (or, for the
copies ``sremarathon init --with-apps`` makes, ``pytest <dir>/apps/shop/tests``) runs an app's
tests the way the build does. All apps in one run: ``pytest --import-mode=importlib <dir>/apps``
(their test files share a name).

These tests are collected only when a path on the command line points into this directory, so a
project that keeps copies of the apps does not run them with its own suite.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Optional

import pytest

HERE = Path(__file__).resolve().parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> Optional[bool]:
    for arg in config.args:
        path = (Path(config.invocation_params.dir) / arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return None
    return True


@pytest.fixture
def services(request: pytest.FixtureRequest) -> dict[str, ModuleType]:
    from pytest_sremarathon.apps import load_app
    from pytest_sremarathon.runtime.artifacts import package
    from pytest_sremarathon.runtime.code import load_module

    app_root = Path(request.node.path).resolve().parent.parent
    app = load_app(app_root)
    files = {str(p.relative_to(app_root)): p.read_text() for p in (app_root / "services").glob("*.py")}
    return {svc: load_module(a, "pytest") for svc, a in package(app, files).items()}
