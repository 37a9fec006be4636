"""An agent that repairs forward: it commits a fix in its checkout and deploys it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pytest_sremarathon import Report


class CommitAndDeploy:
    def __init__(self) -> None:
        self.done = False

    def step(self, obs):
        if self.done:
            return Report()
        self.done = True
        repo = Path(obs.workspace) / "shop"
        # start from what is deployed now: origin/main is fetched before every step
        subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-B", "main", "origin/main"], check=True)
        config = repo / "config" / "recommendation.yaml"
        config.write_text(config.read_text().replace("MAX_RECOMMENDATIONS: '5'", "MAX_RECOMMENDATIONS: '4'"))
        subprocess.run(["git", "-C", str(repo), "commit", "-qam", "recommendation: show four"], check=True)
        deployed = obs.pipeline.deploy("shop", "HEAD")
        # a stale branch (not based on main) is refused: make one and try
        subprocess.run(["git", "-C", str(repo), "checkout", "-qb", "stale", "HEAD~1"], check=True)
        (repo / "NOTES.md").write_text("stale\n")
        subprocess.run(["git", "-C", str(repo), "add", "NOTES.md"], check=True)
        subprocess.run(["git", "-C", str(repo), "commit", "-qm", "notes"], check=True)
        try:
            obs.pipeline.deploy("shop", "stale")
            refused = "no"
        except Exception as exc:  # noqa: BLE001
            refused = str(exc)
        # the answer is the queued build (builds take time); its commit is what will be deployed
        return Report(notes=f"deployed={deployed['commit']}|refused={refused}")
