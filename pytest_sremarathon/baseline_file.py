"""The baseline file: per-fault results of an earlier session that later sessions are judged
against (``--marathon-baseline``), and rewritten with ``--marathon-update-baseline``.

See README, "Gate on a baseline", for the verdicts and how segment items report them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

from .scoreboard import Scoreboard

BASELINE_FORMAT = "sremarathon-baseline/1"


def _level(f: dict[str, Any]) -> int:
    """Stage progress, in order: 0 nothing, 1 correlated, 2 + localized, 3 + repaired while active."""
    return int(bool(f.get("correlated"))) + int(bool(f.get("correlated") and f.get("localized"))) + \
        int(bool(f.get("correlated") and f.get("localized") and f.get("repaired")))


def _passed(f: dict[str, Any]) -> bool:
    return _level(f) == 3 and not f.get("false_claim")


@dataclass
class Baseline:
    """A file of per-fault results that later runs are judged against.

    ``{"format": "sremarathon-baseline/1", "marathons": {"<scenario>[seed=N]": {"agent", "score",
    "scenario_digest", "faults": {"<fault id>": {"segment", "kind", "component", "change",
    "correlated", "localized", "localization_credit", "candidates", "repaired", "false_claim", "passed"}}}}}``
    """

    path: Path
    marathons: dict[str, dict[str, Any]]

    @classmethod
    def load(cls, path: Path, missing_ok: bool = False) -> "Baseline":
        if not path.exists():
            if missing_ok:
                return cls(path, {})
            raise pytest.UsageError(f"--marathon-baseline: no such file: {path} "
                                    f"(write one with --marathon-update-baseline)")
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise pytest.UsageError(f"--marathon-baseline: {path}: not a baseline file: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT or \
                not isinstance(data.get("marathons"), dict):
            raise pytest.UsageError(f"--marathon-baseline: {path}: not a baseline file "
                                    f"(expected \"format\": \"{BASELINE_FORMAT}\")")
        return cls(path, data["marathons"])

    def fault(self, run: str, fault: dict[str, Any]) -> Optional[dict[str, Any]]:
        """The baseline's record of ``fault`` when it is the same fault (same id, kind and
        component), else None."""
        b = (self.marathons.get(run) or {}).get("faults", {}).get(fault["id"])
        if b is None:
            return None
        for key in ("kind", "component"):  # change ids depend on the repo history (the agent's reverts)
            if b.get(key) is not None and fault.get(key) is not None and b[key] != fault[key]:
                return None
        return b

    def judge(self, run: str, fault: dict[str, Any]) -> str:
        """One fault's verdict: ok | fixed | expected | regression | worse | new."""
        b = self.fault(run, fault)
        now = _passed(fault)
        if b is None:
            return "ok" if now else "new"
        if bool(b.get("passed", _passed(b))):
            return "ok" if now else "regression"
        if now:
            return "fixed"
        no_new_claim = not fault.get("false_claim") or bool(b.get("false_claim"))
        credit, before = fault.get("localization_credit"), b.get("localization_credit")
        as_precise = credit is None or before is None or _level(fault) > _level(b) or credit >= before - 1e-9
        return "expected" if _level(fault) >= _level(b) and no_new_claim and as_precise else "worse"

    def update(self, board: Scoreboard) -> int:
        """Record the board's results (a partial run keeps what it did not reach); the number
        of faults recorded."""
        n = 0
        for row in board.rows.values():
            entry = None if row.complete else self.marathons.get(row.run)
            faults = dict((entry or {}).get("faults", {}))  # a partial run updates what it saw
            for f in row.faults.values():
                faults[f["id"]] = {"segment": f["segment"], "kind": f["kind"], "component": f["component"],
                                   "change": f["change"], "correlated": f["correlated"], "localized": f["localized"],
                                   "localization_credit": f.get("localization_credit"),
                                   "candidates": f.get("candidates"), "repaired": f["repaired"], "false_claim": f["false_claim"], "passed": _passed(f)}
                n += 1
            self.marathons[row.run] = {
                "agent": row.agent, "scenario_digest": row.scenario_digest,
                "score": row.final["score"] if row.final else (entry or {}).get("score"),
                "faults": dict(sorted(faults.items())),
            }
        return n

    def write(self) -> None:
        """Write the file atomically (a crash never leaves half a baseline)."""
        data = {"format": BASELINE_FORMAT, "marathons": dict(sorted(self.marathons.items()))}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        os.replace(tmp, self.path)
