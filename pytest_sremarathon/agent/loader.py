"""Resolve ``--agent=pkg.mod:Class`` to the agent's class (or factory).

The pytest process calls :func:`resolve_agent` once for an early, friendly check of the option;
the agent's worker process calls it again for real. Every failure is an :class:`AgentLoadError`
whose message is a single line, fit for a pytest usage error or an ``agent.step`` record.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable
from typing import Any

__all__ = ["AgentLoadError", "EXAMPLE", "one_line", "resolve_agent"]

EXAMPLE = "--agent=mypkg.agents:MyAgent"

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_SPEC = re.compile(rf"^{_IDENT}(\.{_IDENT})*:{_IDENT}(\.{_IDENT})*$")


class AgentLoadError(Exception):
    """The agent named by a spec cannot be used; ``str(err)`` is one line."""


def one_line(text: object, limit: int = 500) -> str:
    """The first non-empty line of ``text``, stripped and capped at ``limit`` characters."""
    for line in str(text).splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _describe(exc: BaseException) -> str:
    msg = one_line(exc)
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def resolve_agent(spec: str) -> Callable[[], Any]:
    """Import ``pkg.mod:Class`` and return the class (or zero-argument factory) it names.

    Raises :class:`AgentLoadError` for a malformed spec, a module that cannot be imported (any
    exception its import raises), a missing attribute, an object that is not callable, and a
    class without a callable ``step``.
    """
    spec = (spec or "").strip()
    if not _SPEC.match(spec):
        raise AgentLoadError(
            f"invalid agent spec {spec!r}: expected 'package.module:Class', e.g. {EXAMPLE}")
    module_name, _, attr_path = spec.partition(":")
    try:
        importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - the agent's import may raise anything
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise AgentLoadError(
            f"cannot import agent module {module_name!r} (from {spec!r}): {_describe(exc)}") from None
    try:
        obj = pkgutil.resolve_name(spec)
    except AttributeError:
        raise AgentLoadError(
            f"agent module {module_name!r} has no attribute {attr_path!r} (from {spec!r})") from None
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise AgentLoadError(f"cannot resolve agent {spec!r}: {_describe(exc)}") from None
    if not callable(obj):
        raise AgentLoadError(
            f"agent {spec!r} is a {type(obj).__name__}, not a class or factory; "
            f"point {EXAMPLE.split('=')[0]} at the agent class")
    if inspect.isclass(obj) and not callable(getattr(obj, "step", None)):
        raise AgentLoadError(
            f"agent class {spec!r} has no step(obs) method; an agent needs step(self, obs) -> Report")
    return obj


def check_agent(spec: str, *, python: str | None = None, timeout: float = 60.0) -> None:
    """Check ``spec`` without importing untrusted code here: a throwaway process resolves it
    and reports the one-line :class:`AgentLoadError`, if any."""
    import subprocess
    import sys

    proc = subprocess.run([python or sys.executable, "-m", __name__, spec], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise AgentLoadError(one_line(proc.stdout) or one_line(proc.stderr) or
                             f"checking agent {spec!r} failed (exit {proc.returncode})")


def _main(argv: list[str]) -> int:
    try:
        resolve_agent(argv[0] if argv else "")
    except AgentLoadError as exc:
        print(exc)
        return 2
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1:]))
