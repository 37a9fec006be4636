"""The build step: run the app's handler unit tests on the source tree, then package one
content-addressed artifact per code service."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from ..apps import AppSpec
from ..errors import SremarathonError
from ..runtime import artifacts
from ..runtime.code import Artifact, ContainerCrash, compile_source, format_exception, load_module


class BuildError(SremarathonError):
    pass


@dataclass
class BuildResult:
    artifacts: dict[str, Artifact]  # service -> artifact
    tests_run: int


def package(app: AppSpec, files: dict[str, str]) -> dict[str, Artifact]:
    try:
        return artifacts.package(app, files)
    except artifacts.ArtifactError as exc:
        raise BuildError(str(exc)) from None


def run_unit_tests(app: AppSpec, files: dict[str, str], artifacts: dict[str, Artifact]) -> int:
    """Run ``tests/test_*.py``: every ``test_*(services)`` function gets the freshly built modules."""
    try:
        modules: dict[str, ModuleType] = {svc: load_module(a, "unit-test") for svc, a in artifacts.items()}
    except ContainerCrash as crash:
        raise BuildError(f"{app.name}: build failed: a service does not import:\n{crash}") from None
    count = 0
    for path in sorted(p for p in files if p.startswith("tests/test_") and p.endswith(".py")):
        namespace: dict[str, object] = {"__name__": path[:-3].replace("/", "."), "__file__": f"/app/{path}"}
        exec(compile_source(files[path], f"/app/{path}"), namespace)
        for name, fn in sorted(namespace.items()):
            if not (name.startswith("test_") and callable(fn)):
                continue
            count += 1
            try:
                _call_test(fn, modules)
            except Exception as exc:  # noqa: BLE001 - a failing unit test fails the build
                raise BuildError(f"{app.name}: unit test {path}::{name} failed:\n{format_exception(exc)}") from None
    return count


def _call_test(fn: Callable[..., object], modules: dict[str, ModuleType]) -> None:
    params = inspect.signature(fn).parameters
    fn(**({"services": modules} if "services" in params else {}))


def build(app: AppSpec, files: dict[str, str]) -> BuildResult:
    artifacts = package(app, files)
    tests = run_unit_tests(app, files, artifacts)
    return BuildResult(artifacts, tests)
