"""`sremarathon twin up`: a twin to explore with kubectl, outside any marathon."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from support.kubectl import kubectl_for


def test_twin_up_serves_the_apps_to_kubectl_until_interrupted(tmp_path: Path, write_scenario) -> None:
    kubeconfig = tmp_path / "twin.kubeconfig"
    kubectl = kubectl_for(kubeconfig, tmp_path / "cache")  # skips without one
    proc = subprocess.Popen([sys.executable, "-m", "pytest_sremarathon.cli", "twin", "up", "--scenario",
                             str(write_scenario()), "--kubeconfig", str(kubeconfig)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("kubeconfig:"):
                break
        assert lines and lines[-1].strip() == f"kubeconfig: {kubeconfig.resolve()}", "".join(lines)
        out = kubectl.run("get", "pods", "-n", "shop", "--no-headers")
        rows = [r.split() for r in out.stdout.splitlines()]
        assert len(rows) >= 10 and all(r[1] == "1/1" and r[2] == "Running" for r in rows)
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
