"""What tests that install the package into a fresh virtualenv share."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without this virtualenv or any Python path of ours."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")
           and not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT"))}
    venv_bin = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env
