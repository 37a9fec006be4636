"""A marathon killed with SIGKILL at any moment leaves a bundle prefix that verifies as
truncated-but-intact and can be scored with --partial."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_sremarathon.bundle import verify


@pytest.mark.parametrize("point", range(3))
def test_sigkill_mid_run_leaves_a_verifiable_scorable_prefix(tmp_path: Path, write_scenario, point: int) -> None:
    scenario = write_scenario(duration="6h", schedule={"faults": 12})
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "pytest_sremarathon.cli", "run", "--json", "--quiet",
                             "--agent", "pytest_sremarathon.baselines:RollbackAgent", "--scenario", str(scenario),
                             "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # wait until the run has started recording, then kill it at a random later moment
    deadline = time.monotonic() + 120
    while not list(out.glob("*/events.jsonl")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(random.Random(point).uniform(0.2, 3.0))
    if proc.poll() is not None:
        pytest.skip("the run finished before it could be killed (a very fast machine)")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    result = verify(run_dir)
    assert result.ok and not result.sealed and result.truncated, result.problems
    cli = subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", "verify", str(run_dir)],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stdout + cli.stderr
    refused = subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", "score", str(run_dir)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "--partial" in (refused.stdout + refused.stderr)
    partial = subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", "score", str(run_dir), "--partial",
                              "--json"], capture_output=True, text=True, timeout=60)
    assert partial.returncode == 0, partial.stderr
    assert 0 <= json.loads(partial.stdout)["score"] <= 100
