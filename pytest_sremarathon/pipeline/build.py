"""The build step: run the app's handler unit tests on the source tree, then package one
content-addressed artifact per code service."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

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


# The unit tests' verdict per (app, artifact digests, test files): what they run is exactly
# those, with fresh modules each time, so a tree built before (a revert, a redeploy) passes or
# fails as it did then. Bounded: the oldest verdicts go first.
_VERDICTS: dict[tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]], int | str] = {}
_MAX_VERDICTS = 1024


def build(app: AppSpec, files: dict[str, str]) -> BuildResult:
    artifacts = package(app, files)
    key = (app.name, tuple(sorted((svc, a.digest) for svc, a in artifacts.items())),
           tuple(sorted((path, text) for path, text in files.items() if path.startswith("tests/"))))
    verdict = _VERDICTS.get(key)
    if verdict is None:
        try:
            verdict = run_unit_tests(app, files, artifacts)
        except BuildError as exc:
            verdict = str(exc)
        if len(_VERDICTS) >= _MAX_VERDICTS:
            del _VERDICTS[next(iter(_VERDICTS))]
        _VERDICTS[key] = verdict
    if isinstance(verdict, str):
        raise BuildError(verdict)
    return BuildResult(artifacts, verdict)
