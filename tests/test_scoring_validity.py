"""Scoring version 2 (SCORING.md §3): the number cannot be raised without diagnosing or repairing.

Each test records a run the way the marathon writes it (the real BundleWriter) and scores it:
localization precision (k candidates earn at most 1/k, however they are spread), the precision
repair credit needs, correlation under sprayed alert ids, collateral, and bundles of the older
rules.
"""

from __future__ import annotations

import pytest
from support.recording import Recorder, at, close_all, fault, finding, only

from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.scoring import (
    REPAIR_MIN_CREDIT,
    WEIGHTS,
    MarathonScore,
    format_table,
    score_bundle,
    score_events,
)

CART = "service:shop/cart"
CANDIDATES = ["service:shop/frontend", "service:shop/checkout", "service:shop/catalog", "service:shop/payments",
              "node:worker-a1", "zone:zone-a", CART]


@pytest.fixture(autouse=True)
def _close_writers():
    yield
    close_all()


def run(tmp_path, *, version: int = 2, impact=("shop/cart", "shop/frontend")) -> Recorder:
    """f1: shop/cart from change c1, 10–70 min, alerts a1–a3 (cart and its caller frontend)."""
    r = Recorder(tmp_path / "run", [fault("f1", change="c1", start=10, end=70) | {"impact": list(impact)}],
                 scoring_version=version)
    r.now = at(10)
    r.inject("f1")
    r.now = at(12)
    for a in ("a1", "a2", "a3"):
        r.alert(a, "f1")
    return r


def finish(r: Recorder) -> MarathonScore:
    r.now = at(70)
    r.cleanup("f1")
    r.now = at(120)
    r.end()
    return score_events(r.events)


def fix(r: Recorder, t: float = 40) -> None:
    """A real repair: the agent's revert, and the judge attributing the mitigation to it."""
    r.now = at(t)
    act = r.action("shop", verb="revert", target="pipeline/shop/changes/c1")
    r.step([])
    r.now = at(t + 1)
    r.mitigate("f1", True, by="agent", actions=[act])


def points(credit: float, repaired: bool) -> float:
    return WEIGHTS["correlation"] + WEIGHTS["localization"] * credit + WEIGHTS["repair"] * repaired


# --------------------------------------------------------------------------- honest agents

def test_one_correct_answer_and_a_real_fix_scores_100(tmp_path):
    r = run(tmp_path)
    r.now = at(20)
    r.step([finding("cart", ["a1", "a2"], component=CART, cause="change:c1")])  # component + change: one answer
    fix(r)
    f = only(finish(r), "f1")
    assert (f.localization_credit, f.candidates, f.repaired, f.points) == (1.0, 1, True, 100.0)
    assert f.repair_actions == ["act-00001"]


def test_repeating_the_same_answer_every_step_costs_nothing(tmp_path):
    r = run(tmp_path)
    for t in (20, 25, 30, 35):
        r.now = at(t)
        r.step([finding("cart", ["a1", "a2", "a3"], component=CART)])
    assert only(finish(r), "f1").localization_credit == 1.0


def test_changing_ones_mind_once_after_a_wrong_answer_keeps_half_the_credit_and_the_repair(tmp_path):
    r = run(tmp_path)
    r.now = at(20)
    r.step([finding("inc", ["a1", "a2"], component="service:shop/frontend")])
    r.now = at(25)
    r.step([finding("inc", ["a1", "a2"], component=CART)])
    fix(r)
    f = only(finish(r), "f1")
    assert (f.candidates, f.localization_credit) == (2, 0.5) and 0.5 >= REPAIR_MIN_CREDIT
    assert f.repaired and f.points == points(0.5, True)


def test_a_wrong_change_beside_the_right_component_is_one_answer(tmp_path):
    r = run(tmp_path)
    r.now = at(20)
    r.step([finding("inc", ["a1"], component=CART, cause="change:benign-7")])
    assert only(finish(r), "f1").localization_credit == 1.0


def test_overlapping_faults_answered_one_per_incident_keep_full_credit(tmp_path):
    """A caller alert attributed to two faults sits in both incidents; naming each fault's own
    component in its own incident is not a guess about the other fault."""
    r = Recorder(tmp_path / "run", [fault("f1", change="c1", start=10, end=70),
                                    fault("f2", service="catalog", change="c2", start=10, end=70)])
    r.now = at(10)
    r.inject("f1")
    r.inject("f2")
    r.now = at(12)
    r.alert("shared", "f1", "f2")  # the frontend's alert: both faults' blast radius
    r.alert("a1", "f1")
    r.alert("b1", "f2")
    r.now = at(20)
    r.step([finding("cart", ["shared", "a1"], component=CART),
            finding("catalog", ["shared", "b1"], component="service:shop/catalog")])
    r.now = at(70)
    r.cleanup("f1")
    r.cleanup("f2")
    r.end()
    s = score_events(r.events)
    assert [(f.id, f.localization_credit, f.candidates) for f in s.faults] == [("f1", 1.0, 1), ("f2", 1.0, 1)]


# --------------------------------------------------------------------------- spraying

@pytest.mark.parametrize("spread", ["one-step-many-findings", "many-incidents", "many-steps"])
def test_k_candidates_earn_at_most_one_kth_however_spread(tmp_path, spread):
    r = run(tmp_path)
    k = len(CANDIDATES)
    if spread == "one-step-many-findings":
        r.now = at(20)
        r.step([finding("inc", ["a1", "a2"], component=c) for c in CANDIDATES])
    elif spread == "many-incidents":
        r.now = at(20)
        r.step([finding(f"inc-{i}", ["a1", "a2"], component=c) for i, c in enumerate(CANDIDATES)])
    else:  # rotation: one candidate per step, the right one first
        for i, c in enumerate(reversed(CANDIDATES)):
            r.now = at(20 + 5 * i)
            r.step([finding("inc", ["a1", "a2"], component=c)])
    fix(r, t=60)
    f = only(finish(r), "f1")
    assert f.candidates == k and f.localization_credit == pytest.approx(1 / k)
    assert not f.repaired, "a sprayed localization earns no repair, even with a real fix"
    assert f.points == pytest.approx(points(1 / k, False))


def test_rotation_never_beats_naming_everything_at_once(tmp_path):
    scores = []
    for order in (CANDIDATES, list(reversed(CANDIDATES))):
        r = run(tmp_path / f"o{len(scores)}")
        for i, c in enumerate(order):
            r.now = at(20 + 5 * i)
            r.step([finding("inc", ["a1"], component=c)])
        scores.append(only(finish(r), "f1").points)
    r = run(tmp_path / "all")
    r.now = at(20)
    r.step([finding("inc", ["a1"], component=c) for c in CANDIDATES])
    at_once = only(finish(r), "f1").points
    assert scores == [at_once, at_once]


def test_spraying_change_ids_is_counted_like_spraying_components(tmp_path):
    r = run(tmp_path)
    r.now = at(20)
    changes = ["c1", "b1", "b2", "b3", "b4"]
    r.step([finding(f"inc-{c}", ["a1"], component=CART if c == "c1" else "service:shop/frontend",
                    cause=f"change:{c}") for c in changes])
    f = only(finish(r), "f1")
    assert f.candidates == len(changes) and f.localization_credit == pytest.approx(1 / len(changes))


def test_names_outside_the_faults_window_or_incidents_do_not_count(tmp_path):
    """A guess before the fault began, or in a finding that does not correlate it, is no
    candidate for it."""
    r = Recorder(tmp_path / "run", [fault("f1", change="c1", start=10, end=70)])
    r.now = at(5)
    r.step([finding("early", ["a1"], component="service:shop/frontend")])  # before f1 began
    r.now = at(10)
    r.inject("f1")
    r.now = at(12)
    r.alert("a1", "f1")
    r.now = at(20)
    r.step([finding("inc", ["a1"], component=CART), finding("other", [], component="node:worker-b2")])
    assert only(finish(r), "f1").localization_credit == 1.0


def test_spraying_alert_ids_cannot_raise_correlation(tmp_path):
    """The majority rule: a finding with every alert correlates nothing when faults share it,
    and splitting alerts over many findings correlates no more faults than one finding per
    alert does."""
    r = Recorder(tmp_path / "run", [fault("f1", start=10, end=70), fault("f2", service="catalog", start=10, end=70),
                                    fault("f3", service="payments", start=10, end=70)])
    r.now = at(10)
    for fid in ("f1", "f2", "f3"):
        r.inject(fid)
    r.now = at(12)
    for a, fid in (("a1", "f1"), ("a2", "f1"), ("b1", "f2"), ("b2", "f2")):
        r.alert(a, fid)
    everything = ["a1", "a2", "b1", "b2"]
    r.now = at(20)
    r.step([finding("all", everything, component=CART)])
    r.now = at(25)
    r.step([finding(f"spray-{i}", everything[i:] + everything[:i][:1], component=CART) for i in range(4)])
    r.now = at(70)
    for fid in ("f1", "f2", "f3"):
        r.cleanup(fid)
    r.end()
    s = score_events(r.events)
    assert not only(s, "f3").correlated  # no alert of f3 exists: nothing to correlate it by
    assert s.correlated <= 2  # at most the faults that have alerts, as one finding per alert gives


# --------------------------------------------------------------------------- collateral

def test_collateral_lists_benign_reverts_healthy_restarts_and_cordons(tmp_path):
    r = run(tmp_path, impact=("shop/cart", "shop/frontend"))
    r.now = at(20)
    benign = r.action("shop", verb="revert", target="pipeline/shop/changes/benign-9")
    own = r.action("shop", verb="revert", target="pipeline/shop/changes/c1")
    restart_sick = r.action("shop", channel="kube", verb="patch", target="kube/shop/deployments/cart")
    r.effect(restart_sick, "Deployment/shop/cart", "template")
    restart_healthy = r.action("shop", channel="kube", verb="patch", target="kube/shop/deployments/catalog")
    r.effect(restart_healthy, "Deployment/shop/catalog", "template")
    scale = r.action("shop", channel="kube", verb="patch", target="kube/shop/deployments/payments/scale")
    r.effect(scale, "Deployment/shop/payments", "replicas")
    cordon = r.action(None, channel="kube", verb="patch", target="kube/nodes/worker-a1")
    r.effect(cordon, "Node/-/worker-a1", "unschedulable")
    r.step([])
    s = finish(r)
    c = s.collateral
    assert [x["action"] for x in c["benign_reverts"]] == [benign] and own not in str(c["benign_reverts"])
    assert [x["object"] for x in c["healthy_restarts"]] == ["Deployment/shop/catalog"]
    assert [x["object"] for x in c["healthy_scales"]] == ["Deployment/shop/payments"]
    assert [x["object"] for x in c["cordons_without_node_fault"]] == ["Node/-/worker-a1"]
    assert s.score == 0 or s.faults  # never folded into the score
    table = format_table(s)
    assert "1 benign changes reverted, 1 healthy workloads restarted" in table


def test_collateral_does_not_change_the_score(tmp_path):
    def scored(with_collateral: bool) -> float:
        r = run(tmp_path / str(with_collateral))
        r.now = at(20)
        r.step([finding("inc", ["a1"], component=CART)])
        if with_collateral:
            r.action("shop", verb="revert", target="pipeline/shop/changes/benign-9")
        fix(r)
        return finish(r).score

    assert scored(True) == scored(False) == 100.0


# --------------------------------------------------------------------------- versions

def test_bundle_of_the_old_rules_is_scored_by_them_and_says_so(tmp_path):
    r = run(tmp_path, version=1)
    r.now = at(20)
    r.step([finding("inc", ["a1"], component=c) for c in CANDIDATES])
    finish(r)
    bundle = open_bundle(r.seal())
    s = score_bundle(bundle)
    assert s.scoring_version == 1 and only(s, "f1").localization_credit == 1.0
    assert any("version-1 rules" in n for n in s.notes)
    assert "scoring rules: version 1" in format_table(s)
    assert bundle.manifest["scoring_version"] == 1


def test_new_bundles_record_the_scoring_version(tmp_path):
    r = run(tmp_path)
    finish(r)
    bundle = open_bundle(r.seal())
    assert bundle.manifest["scoring_version"] == 2 and score_bundle(bundle).scoring_version == 2


def test_records_from_before_versioning_are_version_1(tmp_path):
    """Bundles sealed before scoring version 2 have no ``scoring_version`` in run.start."""
    r = run(tmp_path)
    r.now = at(20)
    r.step([finding("inc", ["a1"], component=c) for c in CANDIDATES])
    finish(r)
    old = [e.model_copy(update={"data": {k: v for k, v in e.data.items() if k != "scoring_version"}})
           if e.type == "run.start" else e for e in r.events]
    assert score_events(old).scoring_version == 1 and only(score_events(old), "f1").localization_credit == 1.0
    assert only(score_events(r.events), "f1").localization_credit == pytest.approx(1 / len(CANDIDATES))


def test_a_bundle_of_newer_rules_is_refused_with_one_line(tmp_path):
    from support.cli import run_cli

    r = run(tmp_path, version=3)
    r.now = at(120)
    r.end()
    archive = r.seal()
    with pytest.raises(ValueError, match="scoring version 3, newer than this sremarathon's"):
        score_bundle(open_bundle(archive))
    proc = run_cli("score", str(archive))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "sremarathon score: the run was recorded for scoring version 3, newer than this sremarathon's (2); "
        "score it with the version that ran it"]
