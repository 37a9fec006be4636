"""The adversarial baselines against the real marathon: what each gaming strategy can earn.

Every agent runs the same short marathon (the default apps and calibration, three virtual
hours, fifteen faults) through `sremarathon run`, as a user would, and each test bounds what a
strategy earns from the sealed bundle: spraying candidates is worth little more than correlation
alone and never a repair, touching objects repairs nothing, spraying alert ids correlates no
more than one finding per alert, claiming everything is paid for correlation only, and an honest
agent's single correct answer plus a real fix still earns the full 100 for that fault.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from support.cli import run_json

from pytest_sremarathon.builtin import APPS_DIR, SCENARIOS_DIR
from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.scoring import WEIGHTS

pytestmark = pytest.mark.slow

DEFAULT_SCENARIO = SCENARIOS_DIR / "default.yaml"
SPRAYERS = ["SprayComponents", "SprayChanges", "RotateCandidates", "TouchWithoutFixing"]
#: What sprayed localization may add on top of correlation, in Marathon-Score points: at most
#: a third of the localization weight (three or more candidates per fault).
SPRAY_MARGIN = WEIGHTS["localization"] / 3


@pytest.fixture(scope="module")
def marathon_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], dict[str, Any]]:
    import yaml

    tmp = tmp_path_factory.mktemp("gaming")
    data = yaml.safe_load(DEFAULT_SCENARIO.read_text())
    data.update(apps_dir=str(APPS_DIR), duration="3h", segment="3h")
    data["schedule"].update(faults=15, warmup="10m", quiet_tail="20m")
    scenario = tmp / "gaming.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    runs: dict[str, dict[str, Any]] = {}

    def run(agent: str) -> dict[str, Any]:
        if agent not in runs:
            runs[agent] = run_json("--agent", f"pytest_sremarathon.baselines:{agent}", "--scenario", str(scenario),
                                   "--seed", "3", "--out", str(tmp / "runs"), "--quiet")
        return runs[agent]

    return run


def correlation_only(result: dict[str, Any]) -> float:
    return WEIGHTS["correlation"] * result["correlated"] / len(result["faults"])


def records(result: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [e.data for e in open_bundle(result["bundle"]).events if e.type == type_]


@pytest.mark.parametrize("agent", SPRAYERS)
def test_sprayed_answers_earn_little_more_than_correlation_and_never_a_repair(marathon_of, agent):
    result = marathon_of(agent)
    assert result["correlated"] >= 3, "the marathon must give the sprayer something to spray on"
    assert result["repaired"] == 0
    assert result["score"] <= correlation_only(result) + SPRAY_MARGIN, result
    sprayed = [f for f in result["faults"] if f["localized"]]
    assert all(f["localization_credit"] == pytest.approx(1 / f["candidates"], abs=1e-6) for f in sprayed)
    assert result["score"] < marathon_of("HeuristicSRE")["score"]


def test_touching_without_fixing_repairs_nothing_and_changes_nothing(marathon_of):
    result = marathon_of("TouchWithoutFixing")
    actions = [a for a in records(result, "action") if a["allowed"]]
    assert len(actions) > 100  # it touched every deployment and node every step …
    assert records(result, "truth.effect") == []  # … and none of it is anything a condition reads
    assert not [m for m in records(result, "truth.mitigation") if m["by"] == "agent"]
    # Touching earns nothing: no repair, and no more than spraying's bound. Its answers are
    # SprayComponents', but submitted later in each step (the touches cost think time), so they
    # can meet a slightly different set of live faults; on seed 3 that moved the score by 0.05
    # either way of SprayComponents' (timing, never a repair: both asserted above).
    assert result["repaired"] == 0
    assert result["score"] <= correlation_only(result) + SPRAY_MARGIN
    assert result["score"] <= marathon_of("SprayComponents")["score"] + 0.5


def test_spraying_alert_ids_correlates_no_more_than_one_finding_per_alert(marathon_of):
    sprayed, singles = marathon_of("SprayAlerts"), marathon_of("ClaimEverything")
    assert sprayed["correlated"] <= singles["correlated"]
    assert sprayed["repaired"] == 0 and sprayed["score"] <= correlation_only(sprayed) + SPRAY_MARGIN


def test_claiming_everything_is_paid_for_correlation_only(marathon_of):
    result = marathon_of("ClaimEverything")
    assert result["localized"] == 0 and result["repaired"] == 0
    assert result["score"] == pytest.approx(correlation_only(result), abs=1e-3)  # the JSON rounds to 3 places
    assert result["declared_done_gap"] >= 50


def test_restarting_everything_is_visible_as_collateral_and_credited_only_through_its_restarts(marathon_of):
    result = marathon_of("RestartEverything")
    assert result["collateral"]["healthy_restarts"] > 0
    restarts = {a["id"] for a in records(result, "action") if a["allowed"] and a["channel"] == "kube"}
    for f in result["faults"]:
        if f["repaired"]:
            assert f["repair_actions"] and set(f["repair_actions"]) <= restarts, f


def test_a_single_correct_answer_and_a_real_fix_still_score_100(marathon_of):
    result = marathon_of("HeuristicSRE")
    full = [f for f in result["faults"] if f["points"] == 100]
    assert full, [(f["id"], f["candidates"], f["repaired"]) for f in result["faults"]]
    actions = {a["id"]: a for a in records(result, "action") if a["allowed"]}
    mitigations = [m for m in records(result, "truth.mitigation") if m["mitigated"]]
    for f in full:
        assert f["localization_credit"] == 1.0 and f["candidates"] == 1
        # the chain a reader of the bundle follows: fault -> mitigation -> the agent's actions
        assert f["repair_actions"] and all(a in actions for a in f["repair_actions"])
        assert any(m["fault"] == f["id"] and m["by"] == "agent" and m["actions"] == f["repair_actions"]
                   for m in mitigations)


def test_honest_agents_outscore_every_gaming_strategy(marathon_of):
    honest = marathon_of("HeuristicSRE")["score"]
    for agent in [*SPRAYERS, "SprayAlerts", "ClaimEverything", "RestartEverything"]:
        assert marathon_of(agent)["score"] < honest, agent
