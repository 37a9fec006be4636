"""A host that runs several marathons in one process (a pytest session over several scenario
files or seeds, a test suite, a notebook) gets each finished run's memory back.

A marathon freezes what its warm-up built (``gc.freeze()``: the collector's full passes need
not walk it again and again while the run runs). Frozen objects are never collected, and the
twin is a web of reference cycles (controllers and the store, modules and their functions), so
unless the run gives them back, every run's cluster, applications and modules stayed in the
host for good: about 57 MB more after each smoke marathon."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from pytest_sremarathon.agent_host import AgentSpec
from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.marathon import Marathon, MarathonOptions
from pytest_sremarathon.scenario import load_scenario


def _run(tmp_path: Path, seed: int) -> weakref.ref:
    """A short marathon in this process; a weak reference to its cluster."""
    scenario = load_scenario(SCENARIOS_DIR / "smoke.yaml").with_overrides(duration=600)
    marathon = Marathon(scenario, MarathonOptions(agent=AgentSpec(agent="pytest_sremarathon.baselines:NoopAgent"),
                                                  seed=seed, out_dir=tmp_path / f"runs-{seed}"))
    result = marathon.run()
    assert result.score is not None
    return weakref.ref(marathon.cluster)


def test_a_finished_marathon_gives_its_cluster_back_to_the_host(tmp_path: Path) -> None:
    gc.collect()
    frozen_before = gc.get_freeze_count()
    first = _run(tmp_path, 1)
    second = _run(tmp_path, 2)
    gc.collect()
    assert first() is None and second() is None, "a finished run's cluster is still alive in the host"
    assert gc.get_freeze_count() <= frozen_before
