"""The build step: run the app's handler unit tests on the source tree, then package one
content-addressed artifact per code service."""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Callable

from ..apps import AppSpec
from ..errors import SremarathonError
from ..twin.runtime import Artifact, ContainerCrash, compile_source, format_exception, load_module


class BuildError(SremarathonError):
    pass


@dataclass
class BuildResult:
    artifacts: dict[str, Artifact]  # service -> artifact
    tests_run: int


def _helpers(app: AppSpec, files: dict[str, str]) -> dict[str, str]:
    """Shared modules: files in services/ that are not a service of their own."""
    return {p: s for p, s in files.items() if p.startswith("services/") and p.endswith(".py")
            and p[len("services/"):-3] not in app.services}


def package(app: AppSpec, files: dict[str, str]) -> dict[str, Artifact]:
    helpers = _helpers(app, files)
    out = {}
    for svc in app.code_services():
        entry = f"services/{svc}.py"
        if entry not in files:
            raise BuildError(f"{app.name}: service {svc} has no {entry} in this revision")
        content = {entry: files[entry], **helpers}
        h = hashlib.sha256()
        for path in sorted(content):
            h.update(path.encode() + b"\0" + content[path].encode() + b"\0")
        out[svc] = Artifact(app.namespace, svc, f"sha256:{h.hexdigest()}", entry, content)
    return out


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
                _call_test(fn, modules)  # type: ignore[arg-type]
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
