"""The seeded schedule generator against its calibration, and `sremarathon schedule`."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.calibration import lognormal_fit, weibull_shape_mle
from pytest_sremarathon.clock import EPOCH
from pytest_sremarathon.faults import builtin_registry
from pytest_sremarathon.scenario import load_scenario
from pytest_sremarathon.schedule import generate


def test_weibull_mle_recovers_a_known_shape() -> None:
    import random

    rng = random.Random(11)
    for k in (0.64, 1.0, 2.0):
        assert weibull_shape_mle([rng.weibullvariate(3.0, k) for _ in range(4000)]) == pytest.approx(k, rel=0.05)


def test_same_seed_same_schedule_and_seeds_differ(write_scenario) -> None:
    scenario = load_scenario(write_scenario())
    registry = builtin_registry()
    a, b = (generate(scenario, registry, 5, EPOCH).to_json() for _ in range(2))
    assert a == b
    assert generate(scenario, registry, 6, EPOCH).to_json() != a


def test_generator_matches_its_calibration_over_many_seeds(write_scenario) -> None:
    # A 1 s tick and no clipping, so that what is measured is the generator's distributions.
    scenario = load_scenario(write_scenario(
        tick=1, duration=1_000_000, segment=1_000_000, cadence=300,
        schedule={"faults": 30, "duration_min": 1, "duration_max": 10_000_000,
                  "families": {"change": 0.7, "infrastructure": 0.3}, "code_share_of_changes": 0.55}))
    cfg = scenario.spec.schedule
    registry = builtin_registry()
    gaps: list[float] = []
    minutes: list[float] = []
    change = code = total = 0
    for seed in range(100):
        faults = generate(scenario, registry, seed, EPOCH).faults
        starts = sorted(f.start for f in faults)
        g = [(b - a).total_seconds() for a, b in zip(starts, starts[1:])]
        mean = statistics.fmean(g)
        gaps += [x / mean for x in g if x > 0]
        minutes += [(f.end - f.start).total_seconds() / 60 for f in faults]
        changes = [f for f in faults if f.family == "change"]
        change += len(changes)
        code += sum(f.kind.startswith("code-") for f in changes)
        total += len(faults)
    assert total == 100 * cfg.faults
    assert weibull_shape_mle(gaps) == pytest.approx(cfg.interarrival_weibull_shape, abs=0.06)
    mu, sigma = lognormal_fit(minutes)
    assert mu == pytest.approx(cfg.duration_ln_minutes_mu, abs=0.1)
    assert sigma == pytest.approx(cfg.duration_ln_minutes_sigma, abs=0.1)
    assert change / total == pytest.approx(cfg.families["change"], abs=0.04)
    assert code / change == pytest.approx(cfg.code_share_of_changes, abs=0.06)


def test_schedule_command_prints_the_table_and_draws_the_timeline(write_scenario, tmp_path: Path) -> None:
    scenario = write_scenario(schedule={"faults": 12})
    svg = tmp_path / "timeline.svg"
    proc = subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", "schedule", "--scenario", str(scenario),
                           "--seed", "3", "--svg", str(svg)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("F")]
    assert len(rows) == 12
    assert "overlapping another fault:" in proc.stdout and "change-induced:" in proc.stdout
    rects = ET.parse(svg).getroot().findall(".//{http://www.w3.org/2000/svg}rect")
    assert len(rects) == 12
    as_json = subprocess.run([sys.executable, "-m", "pytest_sremarathon.cli", "schedule", "--scenario", str(scenario),
                              "--seed", "3", "--svg", str(svg), "--json"], capture_output=True, text=True, timeout=120)
    data = json.loads(as_json.stdout)
    assert [f["id"] for f in data["faults"]] == [r.split()[0] for r in rows]
    assert data["stats"]["faults"] == 12


def test_the_default_marathon_is_dense_overlapping_and_mostly_change_induced() -> None:
    from pytest_sremarathon.calibration import describe
    from pytest_sremarathon.hookspecs import standalone_plugin_manager  # noqa: F401 - plugins may add kinds

    scenario = load_scenario(SCENARIOS_DIR / "default.yaml")
    assert [a.namespace for a in scenario.apps] == ["shop", "social", "hotel"]
    stats = describe(generate(scenario, builtin_registry(), scenario.spec.seed, EPOCH).faults)
    assert stats.faults >= 55
    assert stats.change_share >= 0.6
    assert stats.overlap_share >= 0.5
    assert set(stats.by_family) == {"change", "dependency", "infrastructure", "load"}
