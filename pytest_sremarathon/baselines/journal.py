"""The workspace journal: an agent's state kept across incarnations of its process."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

#: The journal format; a file of another version is ignored (the agent starts afresh).
VERSION = 1


class Journal:
    """A JSON file in the workspace holding an agent's state between process incarnations.

    The agent's process normally lives for the whole run; when the host has to restart it (a
    step overran its budget, the process died), the new one carries on from the last step's
    state. :meth:`load` binds the journal to a workspace; :meth:`save` writes atomically.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.path: Optional[Path] = None

    @property
    def bound(self) -> bool:
        """Whether :meth:`load` has run (in ``setup``, or at the first step without one)."""
        return self.path is not None

    def load(self, workspace: Path | str) -> Optional[dict[str, Any]]:
        """The saved state (without its ``version``), or ``None`` when there is none of this version."""
        self.path = Path(workspace) / self.name
        try:
            state = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(state, dict) or state.get("version") != VERSION:
            return None
        return {k: v for k, v in state.items() if k != "version"}

    def save(self, state: dict[str, Any]) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps({**state, "version": VERSION}, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a convenience: the in-memory state carries on
