"""What one step of HeuristicSRE's reasoning shares: the observation, the cluster, the memory,
the notes for the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from pytest_sremarathon.agent.protocol import Change, Observation, PipelineError

from ..kube_client import KubeClient
from .state import HeuristicState
from .tuning import Tuning


@dataclass
class StepContext:
    obs: Observation
    state: HeuristicState
    tuning: Tuning
    apps: list[str]
    """The apps the agent looks after (the environment's, else every namespace with deployments)."""
    kube: Optional[KubeClient] = None
    """``None`` only where nothing reads or touches the cluster (the pure parts, in tests)."""
    notes: list[str] = field(default_factory=list)
    """The report's notes, in the order things happened."""
    changes: dict[str, list[Change]] = field(default_factory=dict)
    """Pipeline changes per app, fetched at most once per step."""

    @property
    def cluster(self) -> KubeClient:
        assert self.kube is not None, "this part of the step reads the cluster"
        return self.kube

    def app_changes(self, app: str) -> list[Change]:
        if app not in self.changes:
            try:
                self.changes[app] = self.obs.pipeline.changes(app)
            except PipelineError as exc:
                self.notes.append(f"changes({app}) failed: {exc}")
                self.changes[app] = []
        return self.changes[app]
