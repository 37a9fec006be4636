"""With no faults, all three applications run a whole default-length day without alerts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sremarathon.bundle import open_bundle


@pytest.mark.slow
def test_three_apps_run_twelve_virtual_hours_without_alerts(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(schedule={"faults": 0, "benign_per_faulty": 0},
                              alerts={"noise": {"alerts_per_hour": 0}})
    proc = subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", "run", "--json", "--agent",
                           "pytest_sremarathon.baselines:NoopAgent", "--scenario", str(scenario), "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["virtual_seconds"] == 12 * 3600 and result["faults"] == []
    bundle = open_bundle(result["bundle"])
    start = bundle.events[0].data
    assert start["apps"] == ["hotel", "shop", "social"]
    alerts = [e.data["alert"] for e in bundle.events if e.type == "alert"]
    assert [(a["name"], a["labels"].get("service")) for a in alerts] == []
    sli = [e.data["services"] for e in bundle.events if e.type == "sli"]
    assert len(sli) >= 700
    worst = max(v[1] for sample in sli[10:] for v in sample.values())
    assert worst == 0.0, "a healthy service returned errors"
