"""The cycle collector's schedule while a marathon runs (run_gc.py): a tick's survivors are
frozen, the cycles among them are collected once the frozen heap has grown enough, the host gets
its collector back, and nothing recorded depends on any of it."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest
from support.cli import events_bytes

from pytest_sremarathon.agent_host import AgentSpec
from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.marathon import Marathon, MarathonOptions
from pytest_sremarathon.run_gc import RUN_GC_THRESHOLD, RunCollector
from pytest_sremarathon.scenario import load_scenario


class _Node:
    """A reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _cycle() -> weakref.ref:
    return weakref.ref(_Node())


def test_a_ticks_survivors_are_frozen_and_the_host_gets_its_collector_back() -> None:
    gc.collect()
    host_threshold, frozen_before = gc.get_threshold(), gc.get_freeze_count()
    collector = RunCollector(full_pass_growth=10**9)
    collector.start()
    try:
        assert gc.get_threshold() == RUN_GC_THRESHOLD
        survivors = [[i] for i in range(5000)]  # what a tick leaves behind
        collector.tick_done()
        assert gc.get_freeze_count() >= frozen_before + len(survivors)
        garbage = _cycle()  # a cycle among the frozen survivors …
        collector.tick_done()
        gc.collect(0)
        gc.collect(2)
        assert garbage() is not None  # … waits for a full pass: no collection walks frozen objects
    finally:
        collector.finish()
    assert gc.get_threshold() == host_threshold
    assert gc.get_freeze_count() <= frozen_before  # (the host's own frozen objects come back too)
    gc.collect()
    assert garbage() is None  # the host's next full collection frees it


def test_cycles_are_collected_once_the_frozen_heap_has_grown_enough() -> None:
    collector = RunCollector(full_pass_growth=20_000)
    collector.start()
    try:
        garbage = _cycle()
        collector.tick_done()
        assert garbage() is not None and collector.full_passes == 0
        kept = [[i] for i in range(25_000)]  # the run's heap grows by more than that …
        collector.tick_done()  # … and at the tick's end a full pass collects the cycles
        assert collector.full_passes == 1 and garbage() is None
        assert len(kept) == 25_000
        collector.tick_done()
        collector.tick_done()
        assert collector.full_passes == 1  # (grown by nothing since)
    finally:
        collector.finish()


@pytest.mark.parametrize("generation", [0, 1])
def test_growth_a_collection_moved_on_counts_too(generation: int) -> None:
    collector = RunCollector(full_pass_growth=10_000)
    collector.start()
    try:
        garbage = _cycle()
        collector.tick_done()
        kept = [[i] for i in range(15_000)]  # (fewer than make a young collection by themselves)
        gc.collect(generation)  # a collection mid-tick: its survivors left the young generation's count
        assert gc.get_count()[0] < 10_000
        collector.tick_done()
        assert collector.full_passes == 1 and garbage() is None
        assert len(kept) == 15_000
    finally:
        collector.finish()


def _events(tmp_path: Path, collector: RunCollector) -> bytes:
    scenario = load_scenario(SCENARIOS_DIR / "smoke.yaml").with_overrides(duration=600)
    marathon = Marathon(scenario, MarathonOptions(agent=AgentSpec(agent="pytest_sremarathon.baselines:RollbackAgent"),
                                                  seed=3, out_dir=tmp_path))
    marathon.collector = collector
    return events_bytes(str(marathon.run().bundle))


def test_the_recorded_events_do_not_depend_on_when_the_collector_runs(tmp_path: Path) -> None:
    every_tick = RunCollector(full_pass_growth=1)  # a full pass after every tick
    assert _events(tmp_path / "default", RunCollector()) == _events(tmp_path / "full", every_tick)
    assert every_tick.full_passes > 0
