"""User-facing errors: one line that names the file, the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # light: the pytest plugin imports this module at start-up
    from pydantic import ValidationError


class SremarathonError(Exception):
    """An error the user can fix; printed as one line, never as a traceback."""


class ConfigError(SremarathonError):
    """A scenario or application file is wrong."""


def describe_validation_error(path: Path, exc: ValidationError) -> str:
    """Turn pydantic's report into '<file>: <field>: <problem>' lines (first three)."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; `sremarathon init` writes a file that comments every known field)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        parts.append(f"{loc}: {msg}")
    more = f" (and {len(exc.errors()) - 3} more)" if len(exc.errors()) > 3 else ""
    return f"{path}: " + "; ".join(parts) + more
