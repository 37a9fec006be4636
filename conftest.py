"""Project-level pytest configuration.

The applications' handler unit tests (``pytest_sremarathon/scenarios/apps/<app>/tests``) take a ``services``
fixture: the app's service modules, loaded exactly as the pipeline's build step loads them.
So ``pytest pytest_sremarathon/scenarios/apps/shop/tests`` runs an app's tests the way CI builds do.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture
def services(request: pytest.FixtureRequest) -> dict[str, ModuleType]:
    from pytest_sremarathon.apps import load_app
    from pytest_sremarathon.pipeline.build import package
    from pytest_sremarathon.twin.runtime import load_module

    app_root = Path(request.node.path).resolve().parent.parent
    app = load_app(app_root)
    files = {str(p.relative_to(app_root)): p.read_text() for p in (app_root / "services").glob("*.py")}
    return {svc: load_module(a, "pytest") for svc, a in package(app, files).items()}
