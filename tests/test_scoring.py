"""Marathon-Score (SCORING.md): every stage rule, the side metrics, determinism."""

from __future__ import annotations

import json

import pytest
from support.recording import Recorder, at, close_all, fault, finding, marathon, only

from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.scoring import HOLD_SECONDS, WEIGHTS, MarathonScore, format_table, score_bundle, score_events


@pytest.fixture(autouse=True)
def _close_writers():
    yield
    close_all()

CART = "service:shop/cart"


def stages(score: MarathonScore, fid: str) -> tuple[bool, bool, bool, float]:
    r = only(score, fid)
    return r.correlated, r.localized, r.repaired, r.points


@pytest.fixture()
def rec(tmp_path) -> Recorder:
    """f1: shop/cart code bug from change c1, active 10–70 min; f2: bank/ledger, 20–80 min.
    Alerts: a1–a4 from f1, b1–b3 from f2, n1–n6 noise, all fired at minute 12/22."""
    r = Recorder(tmp_path / "run", [fault("f1", change="c1", start=10, end=70),
                                    fault("f2", app="bank", service="ledger", kind="oom", start=20, end=80)])
    r.now = at(10)
    r.inject("f1")
    r.now = at(12)
    for a in ("a1", "a2", "a3", "a4"):
        r.alert(a, "f1")
    for a in ("n1", "n2", "n3", "n4", "n5", "n6"):
        r.alert(a)
    r.now = at(20)
    r.inject("f2")
    r.now = at(22)
    for a in ("b1", "b2", "b3"):
        r.alert(a, "f2", app="bank")
    return r


def finish(r: Recorder, end_f1: float = 70, end_f2: float = 80, run_end: float = 240) -> MarathonScore:
    for fid, t in sorted((("f1", end_f1), ("f2", end_f2)), key=lambda x: x[1]):
        r.now = at(t)
        r.cleanup(fid)
    r.now = at(run_end)
    r.end()
    return score_events(r.events)


# --------------------------------------------------------------------------- correlation

def test_correlation_needs_a_strict_majority_of_attributed_alerts(rec):
    rec.now = at(30)
    rec.step([
        finding("x", ["a1", "a2", "b1", "n1", "n2", "n3", "n4"]),  # f1 2 of 3 attributed: majority
        finding("y", ["b1", "b2", "a3", "a4"]),                    # 2 of 4 each: no majority
    ])
    s = finish(rec)
    assert stages(s, "f1")[:1] == (True,)
    assert only(s, "f1").t_correlate == 20 * 60
    assert not only(s, "f2").correlated


def test_noise_and_unknown_ids_do_not_count_against_correlation(rec):
    rec.now = at(30)
    rec.step([finding("x", ["b1", "n1", "n2", "n3", "n4", "n5", "n6", "zz-made-up", "b1"])])
    s = finish(rec)
    assert only(s, "f2").correlated and not only(s, "f1").correlated


def test_noise_only_finding_correlates_nothing(rec):
    rec.now = at(30)
    rec.step([finding("x", ["n1", "n2"], component=CART)])
    s = finish(rec)
    assert s.correlated == 0 and s.score == 0


def test_an_alert_shared_by_two_faults_counts_for_both(tmp_path):
    r = Recorder(tmp_path / "run", [fault("f1", start=10), fault("f2", service="checkout", start=10)])
    r.now = at(10)
    r.inject("f1")
    r.inject("f2")
    r.now = at(12)
    r.alert("s1", "f1", "f2")
    r.alert("a1", "f1")
    r.now = at(20)
    r.step([finding("x", ["s1"]), finding("y", ["s1", "a1"])])
    r.now = at(30)
    r.end()
    s = score_events(r.events)
    assert only(s, "f1").correlated and only(s, "f2").correlated


def test_correlation_only_counts_while_the_fault_is_active(rec):
    rec.now = at(70)
    rec.cleanup("f1")
    rec.now = at(75)
    rec.step([finding("late", ["a1", "a2"], component=CART)])  # f1 ended at 70
    rec.now = at(80)
    rec.cleanup("f2")
    rec.end()
    s = score_events(rec.events)
    assert not only(s, "f1").correlated and only(s, "f1").points == 0


def test_alert_ids_cannot_be_guessed_ahead_of_time(tmp_path):
    r = Recorder(tmp_path / "run", [fault("f1", start=10)])
    r.now = at(10)
    r.inject("f1")
    r.now = at(11)
    r.step([finding("x", ["a1"], component=CART)])  # a1 fires only at minute 12
    r.now = at(12)
    r.alert("a1", "f1")
    r.end()
    assert score_events(r.events).score == 0


def test_finding_at_the_exact_end_is_too_late(rec):
    rec.now = at(70)
    rec.step([finding("x", ["a1"], component=CART)])
    s = finish(rec, end_f1=70)
    assert not only(s, "f1").correlated


# --------------------------------------------------------------------------- localization

@pytest.mark.parametrize("component, cause, localized", [
    (CART, None, True),                       # the component
    (None, "change:c1", True),                # the change as cause
    ("change:c1", None, True),                # the change as component
    ("service:shop/checkout", None, False),   # wrong component
    (None, "change:c2", False),               # wrong change
    (None, "kind:code-bug", False),           # a kind never localizes
    ("service:shop/cart ", None, False),      # identifiers match exactly
])
def test_localization_by_component_or_change_id(rec, component, cause, localized):
    rec.now = at(30)
    rec.step([finding("x", ["a1", "a2"], component=component, cause=cause)])
    s = finish(rec)
    assert stages(s, "f1") == (True, localized, False, 50.0 if localized else 20.0)


def test_localization_must_come_from_a_finding_that_correlates(rec):
    rec.now = at(30)
    rec.step([finding("x", ["a1", "a2"]),  # correlates f1, names nothing
              finding("y", ["b1", "b2"], component=CART)])  # names f1 but groups f2's alerts
    s = finish(rec)
    assert stages(s, "f1") == (True, False, False, 20.0)
    assert stages(s, "f2") == (True, False, False, 20.0)


def test_fault_without_change_is_localized_by_component_only(rec):
    rec.now = at(30)
    rec.step([finding("x", ["b1"], component="change:None"),
              finding("y", ["b2"], component="service:bank/ledger")])
    s = finish(rec)
    r = only(s, "f2")
    assert r.localized and r.t_localize == 10 * 60


# --------------------------------------------------------------------------- repair

def localize_f1(rec: Recorder, t: float = 30) -> None:
    rec.now = at(t)
    rec.step([finding("inc-1", ["a1", "a2", "a3"], component=CART)])


def test_agent_repair_that_holds_to_the_end(rec):
    localize_f1(rec)
    rec.now = at(40)
    rec.action("shop")
    rec.step([])
    rec.mitigate("f1", True, by="agent")
    s = finish(rec)
    r = only(s, "f1")
    assert (r.correlated, r.localized, r.repaired, r.points) == (True, True, True, 100.0)
    assert r.t_repair == 30 * 60 and r.repair_step == 1
    assert s.score == (100 + 0) / 2


def test_repair_by_the_orchestrator_is_not_credited(rec):
    localize_f1(rec)
    rec.now = at(40)
    rec.mitigate("f1", True, by="orchestrator")
    assert stages(finish(rec), "f1") == (True, True, False, 50.0)


def test_repair_undone_before_ten_minutes_is_not_credited(rec):
    localize_f1(rec)
    rec.now = at(40)
    rec.mitigate("f1", True, by="agent")
    rec.now = at(40 + (HOLD_SECONDS - 60) / 60)
    rec.mitigate("f1", False)
    assert stages(finish(rec), "f1")[2] is False


def test_repair_held_ten_minutes_is_credited_even_if_undone_later(rec):
    localize_f1(rec)
    rec.now = at(40)
    rec.mitigate("f1", True, by="agent")
    rec.now = at(40 + HOLD_SECONDS / 60)
    rec.mitigate("f1", False)
    assert stages(finish(rec), "f1") == (True, True, True, 100.0)


def test_repair_shorter_than_ten_minutes_but_held_to_the_end_is_credited(rec):
    localize_f1(rec)
    rec.now = at(66)
    rec.mitigate("f1", True, by="agent")
    assert stages(finish(rec, end_f1=70), "f1")[2] is True


def test_the_last_mitigation_before_the_end_decides(rec):
    localize_f1(rec)
    rec.now = at(30)
    rec.mitigate("f1", True, by="agent")
    rec.now = at(50)
    rec.mitigate("f1", False)
    rec.now = at(55)
    rec.mitigate("f1", True, by="orchestrator")
    assert stages(finish(rec), "f1")[2] is False


def test_repair_after_the_fault_ended_is_not_credited(rec):
    localize_f1(rec)
    rec.now = at(70)
    rec.cleanup("f1")
    rec.now = at(71)
    rec.mitigate("f1", True, by="agent")
    rec.now = at(80)
    rec.cleanup("f2")
    rec.end()
    assert stages(score_events(rec.events), "f1") == (True, True, False, 50.0)


def test_repair_without_localization_scores_only_correlation(rec):
    rec.now = at(30)
    rec.step([finding("x", ["a1", "a2"])])
    rec.now = at(35)
    rec.mitigate("f1", True, by="agent")
    assert stages(finish(rec), "f1") == (True, False, False, 20.0)


def test_repair_is_credited_even_if_localization_comes_later_in_the_window(rec):
    rec.now = at(25)
    rec.mitigate("f1", True, by="agent")
    localize_f1(rec, t=30)
    assert stages(finish(rec), "f1")[2] is True


# --------------------------------------------------------------------------- whole-run scores

def test_noop_agent_scores_zero(tmp_path):
    rec = marathon(tmp_path / "run", n_faults=6, hours=2, seal=False)
    noop = [e for e in rec.events if not (e.type == "agent.step" or e.type == "truth.mitigation")]
    s = score_events(noop)
    assert s.score == 0 and len(s.faults) == 6
    assert s.correlated == s.localized == s.repaired == 0


def test_no_faults_scores_zero(tmp_path):
    rec = Recorder(tmp_path / "run", [])
    rec.now = at(60)
    rec.step([finding("x", ["a1"], component=CART)], ["x"])
    rec.end()
    s = score_events(rec.events)
    assert s.score == 0 and s.faults == [] and s.unmatched_claims == 1


def test_score_is_the_mean_over_faults_with_the_published_weights(rec):
    assert WEIGHTS == {"correlation": 20, "localization": 30, "repair": 50}
    localize_f1(rec)
    rec.mitigate("f1", True, by="agent")
    rec.step([finding("inc-2", ["b1"])])
    s = finish(rec)
    assert [r.points for r in s.faults] == [100.0, 20.0]
    assert s.score == 60.0
    assert s.weights == WEIGHTS
    assert "weights: correlation 20, localization 30, repair 50" in format_table(s)


def test_fault_still_active_at_run_end_ends_there(rec):
    localize_f1(rec)
    rec.now = at(100)
    rec.cleanup("f2")
    rec.now = at(120)
    rec.end()
    s = score_events(rec.events)
    r = only(s, "f1")
    assert r.still_active and r.end == "2026-01-05T02:00:00Z"
    assert not only(s, "f2").still_active and only(s, "f2").end == "2026-01-05T01:40:00Z"


def test_live_scoring_until_a_time(rec):
    localize_f1(rec)
    rec.now = at(40)
    rec.mitigate("f1", True, by="agent")
    s_live = score_events(rec.events, until=at(45))
    r = only(s_live, "f1")
    assert r.still_active and r.end == "2026-01-05T00:45:00Z" and r.repaired
    assert not s_live.complete and s_live.window_end == "2026-01-05T00:45:00Z"
    # events after `until` are ignored even when present
    rec.now = at(46)
    rec.mitigate("f1", False)
    assert only(score_events(rec.events, until=at(45)), "f1").repaired
    assert not only(score_events(rec.events, until=at(47)), "f1").repaired
    # faults not yet injected at `until` are not in the score
    assert [r.id for r in score_events(rec.events, until=at(15)).faults] == ["f1"]


# --------------------------------------------------------------------------- claims

def test_false_resolution_claims_and_declared_done_gap(rec):
    rec.now = at(30)
    rec.step([finding("inc-1", ["a1", "a2"], component=CART), finding("inc-2", ["b1", "b2"])],
             claims=["inc-2", "ghost"])  # f2 active and unmitigated: false; ghost: unmatched
    rec.now = at(40)
    rec.action("shop")
    rec.mitigate("f1", True, by="agent")
    rec.now = at(41)
    rec.step([], claims=["inc-1"])  # f1 mitigated: a true claim
    s = finish(rec)
    assert (s.claims, s.false_claims, s.unmatched_claims) == (3, 1, 1)
    assert s.false_resolution_rate == pytest.approx(1 / 3)
    assert only(s, "f2").false_claim and only(s, "f2").claimed
    assert not only(s, "f1").false_claim and only(s, "f1").claimed
    # claimed 2 of 2 faults, repaired 1 of 2
    assert (s.claimed_share, s.repaired_share, s.declared_done_gap) == (100.0, 50.0, 50.0)


def test_claim_after_the_fault_ended_is_not_false(rec):
    rec.now = at(30)
    rec.step([finding("inc-2", ["b1", "b2"])])
    rec.now = at(70)
    rec.cleanup("f1")
    rec.now = at(80)
    rec.cleanup("f2")
    rec.now = at(85)
    rec.step([], claims=["inc-2"])  # f2 is over (not repaired by the agent, but not active either)
    rec.end()
    s = score_events(rec.events)
    assert (s.claims, s.false_claims) == (1, 0) and s.false_resolution_rate == 0
    assert only(s, "f2").claimed and not only(s, "f2").false_claim
    assert s.declared_done_gap == 50.0  # claimed 1 of 2 faults, repaired none


def test_claim_uses_the_latest_finding_for_the_incident(rec):
    rec.now = at(30)
    rec.step([finding("inc", ["n1"])])  # maps to nothing
    rec.now = at(31)
    rec.step([finding("inc", ["b1", "b2"])], claims=["inc"])  # now it maps to f2 (active)
    rec.now = at(90)  # both faults over
    s = finish(rec)
    assert (s.claims, s.false_claims, s.unmatched_claims) == (1, 1, 0)
    assert only(s, "f2").false_claim


def test_claim_while_mitigated_by_anyone_is_not_false(rec):
    rec.now = at(30)
    rec.mitigate("f2", True, by="orchestrator")
    rec.step([finding("inc-2", ["b1"])], claims=["inc-2"])
    s = finish(rec)
    assert s.false_claims == 0 and only(s, "f2").claimed
    assert s.declared_done_gap == 50.0  # claimed 1 of 2, repaired none


# --------------------------------------------------------------------------- actions

def test_policy_denials_and_collateral_actions(rec):
    rec.now = at(30)
    rec.action("shop")                        # f1 active on shop: targeted
    rec.action("blog")                        # no fault on blog: collateral
    rec.action("bank", allowed=False)         # denied: counted as a denial only
    rec.action(None)                          # cluster-wide: not attributable, not collateral
    rec.action("blog", actor="orchestrator")  # not the agent's
    rec.now = at(70)
    rec.cleanup("f1")
    rec.action("shop")                        # f1 over (window is [start, end)): collateral
    rec.now = at(79)
    rec.action("bank")                        # f2 still active: targeted
    rec.now = at(80)
    rec.cleanup("f2")
    rec.end()
    s = score_events(rec.events)
    assert s.policy_denials == 1
    assert s.collateral_actions == 2
    assert s.agent_actions == 5


def test_alert_counts_and_step_outcomes(rec):
    rec.now = at(30)
    rec.step([])
    rec.step(outcome="timeout")
    rec.step(outcome="error")
    s = finish(rec)
    assert s.alerts == {"total": 13, "attributed": 7, "noise": 6, "noise_share": pytest.approx(6 / 13)}
    assert s.steps == {"total": 3, "error": 1, "ok": 1, "timeout": 1}


# --------------------------------------------------------------------------- determinism and bundles

def test_same_events_same_score(tmp_path):
    a = marathon(tmp_path / "a" / "run", n_faults=12, hours=4, seed=3)
    b = marathon(tmp_path / "b" / "run", n_faults=12, hours=4, seed=3)
    assert (tmp_path / "a" / "run" / "events.jsonl").read_bytes() == \
        (tmp_path / "b" / "run" / "events.jsonl").read_bytes()
    live = score_events(a.events)
    assert live.to_dict() == score_events(list(a.events)).to_dict() == score_events(b.events).to_dict()
    assert 0 < live.score < 100 and live.repaired and live.claims
    sealed = score_bundle(open_bundle(a.writer.archive))
    assert sealed.to_dict() == live.to_dict()  # the bundle alone gives the live score
    assert json.loads(json.dumps(sealed.to_dict())) == sealed.to_dict()  # JSON-safe
    table = format_table(sealed)
    assert all(r.id in table for r in sealed.faults) and f"{sealed.score:.1f} / 100" in table


def test_ground_truth_attribution_fills_unrecorded_alerts(tmp_path):
    r = Recorder(tmp_path / "run", [fault("f1")])
    r.now = at(10)
    r.inject("f1")
    r.now = at(20)
    r.step([finding("x", ["a-unrecorded"], component=CART)])
    r.now = at(30)
    r.end()
    assert score_events(r.events).score == 0
    assert score_events(r.events, attribution={"a-unrecorded": ["f1"]}).score == 50


def test_cli_score(tmp_path, capsys):
    from pytest_sremarathon.cli import main

    rec = marathon(tmp_path / "run", n_faults=5, hours=2)
    archive = str(rec.writer.archive)
    assert main(["score", archive, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == score_events(rec.events).to_dict()
    assert main(["score", archive]) == 0
    out = capsys.readouterr().out
    assert "Marathon-Score:" in out and "weights: correlation 20, localization 30, repair 50" in out

    unsealed = marathon(tmp_path / "crashed", n_faults=2, hours=0.5, seal=False)
    assert main(["score", str(tmp_path / "crashed")]) != 0
    err = capsys.readouterr().err
    assert "--partial" in err and len(err.strip().splitlines()) == 1
    assert main(["score", str(tmp_path / "crashed"), "--partial", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == score_events(unsealed.events).to_dict()

    (tmp_path / "run" / "wall.json").write_text("{}")  # tampered sealed directory
    assert main(["score", str(tmp_path / "run")]) != 0
    assert "wall.json: digest mismatch" in capsys.readouterr().err
