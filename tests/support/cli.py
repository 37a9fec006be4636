"""``sremarathon`` (and other Python children of the tests) in a process of its own, with the
tests' agents importable by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Optional, Union

#: The tests' import root (pyproject's ``pythonpath``): the test agents and ``support``.
TESTS = Path(__file__).resolve().parents[1]


def child_env(extra_path: Iterable[Union[str, Path]] = (), **env: str) -> dict[str, str]:
    """This environment for a Python child: ``PYTHONPATH`` is ``extra_path``, then ``tests/``,
    then what it was (so the child imports the same package as the tests); ``env`` on top."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    roots = [str(p) for p in extra_path] + [str(TESTS)] + inherited
    return {**os.environ, "PYTHONPATH": os.pathsep.join(roots), **env}


def run_cli(*args: str, cwd: Optional[Path] = None, extra_path: Iterable[Union[str, Path]] = (),
            env: Optional[dict[str, str]] = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m pytest_sremarathon.cli ARGS`` (what the ``sremarathon`` command runs)."""
    return subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=child_env(extra_path, **(env or {})))


def run_json(*args: str, **kw) -> dict:
    """``sremarathon run --json ARGS``, which must succeed: its JSON summary."""
    proc = run_cli("run", "--json", *args, **kw)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def events_bytes(bundle: str) -> bytes:
    """The ``events.jsonl`` of a sealed bundle, as written."""
    with tarfile.open(bundle) as tar:
        return tar.extractfile("events.jsonl").read()  # type: ignore[union-attr]
