"""Time is not free (issue 14): what the agent's thinking and the deploy pipeline cost.

End to end through ``sremarathon run`` on the embedded twin, one change fault (a code exception
in social at 00:20, seed 1) and a small agent that reverts it:

* per-request: a request-heavy step lets the fault's symptoms grow before the fix lands (the
  cluster runs while the agent reads), each mutation lands at its own virtual time, and a step
  longer than the cadence delays the next one (no overlap, the overrun recorded);
  per-request runs are byte-identical for the same seed;
* wall: the step's wall time x FACTOR passes in the cluster; frozen: none does;
* builds: a faulty change becomes active when the rollout of its build starts; the agent's
  revert is queued, built and rolled out before it is live, is shown in flight by
  ``pipeline.status``, and is still credited to the agent's action once it lands;
* provenance: an agent write followed by ticks inside the same step is the agent's.
"""

from __future__ import annotations

import json
import math
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.cli import events_bytes, run_cli, run_json

from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.clock import parse_iso
from pytest_sremarathon.pipeline.builds import BuildTimes
from pytest_sremarathon.scenario import ScenarioFile
from pytest_sremarathon.thinktime import ThinkTime, is_free, parse_think_time

ONE_FAULT = {"faults": 1, "families": {"change": 1}, "benign_per_faulty": 0, "warmup": "10m", "quiet_tail": "30m",
             "duration_min": "40m"}
INSTANT = {"builds": "instant"}


def records(result: dict[str, Any], type_: str) -> list[tuple[Any, dict[str, Any]]]:
    return [(parse_iso(e.t), e.data) for e in open_bundle(result["bundle"]).events if e.type == type_]


def steps(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(d, ended=t) for t, d in records(result, "agent.step")]


# Seed 5 draws, for the one fault, a code exception in social at 00:35: it pages within minutes
# and one revert repairs it (test_the_one_fault_is_a_quick_code_exception checks this stays so).
SEED = 5


def run(write_scenario, tmp_path: Path, agent: str, think: str, *, name: str = "time", seed: int = SEED,
        **overrides: Any) -> dict[str, Any]:
    scenario = write_scenario(name, **{"duration": "90m", "schedule": ONE_FAULT, **overrides})
    return run_json("--agent", f"marathon_agents_time:{agent}", "--scenario", str(scenario), "--seed", str(seed),
                    "--think-time", think, "--out", str(tmp_path / f"{name}-{agent}"), "--quiet")


def test_the_one_fault_is_a_quick_code_exception(write_scenario) -> None:
    scenario = write_scenario("time", duration="90m", schedule=ONE_FAULT)
    proc = run_cli("schedule", "--json", "--scenario", str(scenario), "--seed", str(SEED), "--svg", os.devnull)
    assert proc.returncode == 0, proc.stderr
    (fault,) = json.loads(proc.stdout)["faults"]
    assert fault["kind"] == "code-exception", fault


# --------------------------------------------------------------------------- the models

def test_think_time_models_parse_to_their_canonical_spelling() -> None:
    assert parse_think_time("frozen") == ThinkTime("frozen")
    assert str(parse_think_time("per-request:10")) == "per-request:10"
    assert str(parse_think_time("per-request: 2.5s")) == "per-request:2.5"
    assert str(parse_think_time("wall")) == "wall:1" and str(parse_think_time("wall:4")) == "wall:4"
    for bad in ("", "slow", "per-request", "per-request:0", "wall:0", "frozen:3", "wall:2s"):
        with pytest.raises(ValueError):
            parse_think_time(bad)
    assert ScenarioFile.model_validate({"name": "x", "apps": ["shop"]}).agent.think_time == "per-request:10"
    with pytest.raises(ValueError, match="not a think-time model"):
        ScenarioFile.model_validate({"name": "x", "apps": ["shop"], "agent": {"think_time": "later"}})


def test_discovery_is_free_and_everything_else_is_charged() -> None:
    for path in ("/version", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/openapi/v2",
                 "/openapi/v3/apis/apps/v1?hash=1"):
        assert is_free("GET", path), path
    for method, path in (("GET", "/api/v1/pods"), ("GET", "/apis/apps/v1/namespaces/shop/deployments"),
                         ("GET", "/sremarathon/v1/pipeline/shop/changes"), ("POST", "/api"),
                         ("GET", "/sremarathon/v1/telemetry/metrics?app=shop")):
        assert not is_free(method, path), path


def test_the_build_durations_fit_circleci_and_are_drawn_per_app_and_seed() -> None:
    pipeline = ScenarioFile.model_validate({"name": "x", "apps": ["shop"]}).pipeline
    mu, sigma = pipeline.build_ln_minutes_mu, pipeline.build_ln_minutes_sigma
    # CircleCI, State of Software Delivery 2020: 50% of workflows < 4 min, 75% < 11, 95% < 35
    for z, minutes in ((0.0, 4), (0.6745, 11), (1.6449, 35)):
        assert math.exp(mu + sigma * z) == pytest.approx(minutes, rel=0.1)

    def draw(seed: int) -> BuildTimes:
        return BuildTimes(seed, ["shop", "hotel", "social"], mu=mu, sigma=sigma, low=60, high=900, jitter=0.15)

    a, b = draw(1), draw(1)
    assert a.base == b.base and [a.duration("shop") for _ in range(5)] == [b.duration("shop") for _ in range(5)]
    assert draw(2).base != a.base
    many = [BuildTimes(s, ["shop"], mu=mu, sigma=sigma, low=60, high=900, jitter=0.15).base["shop"]
            for s in range(400)]
    assert min(many) == 60 and max(many) == 900  # clipped to the run's scale
    assert 3.0 * 60 <= sorted(many)[200] <= 5.5 * 60  # the median build: about four minutes


# --------------------------------------------------------------------------- per-request

def _revert(result: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    [(t, action)] = [(t, a) for t, a in records(result, "action") if a["verb"] == "revert"]
    return t, action


def _mitigated(result: dict[str, Any], fault: str = "F01") -> Any:
    return next(t for t, m in records(result, "truth.mitigation") if m["fault"] == fault and m["mitigated"])


def test_a_request_heavy_step_lets_the_symptoms_grow_before_the_fix_lands(tmp_path: Path, write_scenario) -> None:
    quick = run(write_scenario, tmp_path, "QuickReverter", "per-request:10", pipeline=INSTANT)
    slow = run(write_scenario, tmp_path, "SlowReverter", "per-request:10", pipeline=INSTANT)
    for result, requests in ((quick, 2), (slow, 32)):  # (30 reads +) the change list + the revert
        t_revert, action = _revert(result)
        step = next(s for s in steps(result) if "reverted=" in s["report"]["notes"])
        started = parse_iso(step["started"])
        # the revert is served after the requests before it: at its own virtual time
        assert t_revert == started + timedelta(seconds=10 * requests)
        assert step["virtual_seconds"] >= 10 * requests and step["requests"] >= requests
        assert step["ended"] == started + timedelta(seconds=step["virtual_seconds"])
    (fault_start, fault), = records(slow, "truth.fault")
    # the cluster ran while the slow agent read: ticks, SLI samples and alerts inside its step
    step = next(s for s in steps(slow) if "reverted=" in s["report"]["notes"])
    inside = [t for t, _ in records(slow, "sli") if parse_iso(step["started"]) < t < step["ended"]]
    assert len(inside) >= 4
    # … so the fault stayed live longer, and its symptoms grew: more erroring SLI samples
    late, early = _mitigated(slow) - fault_start, _mitigated(quick) - fault_start
    assert late - early >= timedelta(seconds=300)

    def erroring(result: dict[str, Any]) -> int:
        until = _mitigated(result)
        return sum(1 for t, d in records(result, "sli") if fault_start <= t < until
                   and any(v[1] > 0 for k, v in d["services"].items() if k.startswith("social/")))

    assert erroring(slow) > erroring(quick)
    for result in (quick, slow):
        assert next(m for _, m in records(result, "truth.mitigation") if m["mitigated"])["by"] == "agent"


def test_a_step_longer_than_the_cadence_delays_the_next(tmp_path: Path, write_scenario) -> None:
    busy = run(write_scenario, tmp_path, "Busy", "per-request:10", pipeline=INSTANT, duration="40m",
               schedule={"faults": 0})
    ss = steps(busy)
    assert all(s["requests"] == 40 and s["virtual_seconds"] == 400 for s in ss[:-1])
    for before, after in zip(ss, ss[1:]):
        started = parse_iso(after["started"])
        assert started >= before["ended"]  # never overlapping …
        assert started - before["ended"] <= timedelta(seconds=30)  # … the next starts at the next tick
        assert parse_iso(after["due"]) < started  # … later than it was due …
        # … by how far the step before ran past the cadence (a cadence point it overran entirely
        # is not made up: the next is due at the last one before the step ended)
        next_due = parse_iso(before["due"]) + timedelta(minutes=5)
        assert before["overrun_seconds"] == (before["ended"] - next_due).total_seconds() > 0
        assert parse_iso(after["due"]) <= before["ended"] < parse_iso(after["due"]) + timedelta(minutes=5)
    assert len(ss) < 40 * 60 / 300  # fewer steps than the cadence would give
    frozen = run(write_scenario, tmp_path, "Busy", "frozen", pipeline=INSTANT, duration="40m", schedule={"faults": 0})
    fs = steps(frozen)
    assert len(fs) == 40 * 60 / 300
    assert all(s["virtual_seconds"] == 0 and s["requests"] is None and s["overrun_seconds"] == 0 for s in fs)
    assert [s["started"] for s in fs] == [s["due"] for s in fs]


def test_per_request_runs_are_byte_identical_for_the_same_seed(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario("same", duration="2h", schedule={"faults": 5})
    runs = [run_json("--agent", "pytest_sremarathon.baselines:RollbackAgent", "--scenario", str(scenario),
                     "--seed", "7", "--think-time", "per-request:7", "--out", str(tmp_path / str(i)), "--quiet")
            for i in range(2)]
    assert runs[0]["think_time"] == "per-request:7"
    assert any(s["virtual_seconds"] > 0 for s in steps(runs[0]))  # the steps did cost time
    assert events_bytes(runs[0]["bundle"]) == events_bytes(runs[1]["bundle"])


# --------------------------------------------------------------------------- wall

def test_wall_time_times_the_factor_passes_in_the_cluster(tmp_path: Path, write_scenario) -> None:
    result = run(write_scenario, tmp_path, "WallSleeper", "wall:60", pipeline=INSTANT, duration="30m",
                 schedule={"faults": 0})
    ss = steps(result)
    assert result["think_time"] == "wall:60" and len(ss) >= 4
    for s in ss[:-1]:
        assert 115 <= s["virtual_seconds"] <= 240, s  # 2 wall seconds x 60 (+ the host's own overhead)
    step = ss[0]
    inside = [t for t, _ in records(result, "sli") if parse_iso(step["started"]) < t < step["ended"]]
    assert inside  # the cluster ran meanwhile


# --------------------------------------------------------------------------- builds

def test_a_revert_is_live_only_once_its_build_and_rollout_land_and_is_credited_to_the_agent(
        tmp_path: Path, write_scenario) -> None:
    result = run(write_scenario, tmp_path, "QuickReverter", "per-request:10")
    (fault_start, fault), = records(result, "truth.fault")
    # the faulty change arrived at 00:20 and queued for its build: active when its rollout started
    committed = next(t for t, c in records(result, "pipeline.change") if c["change"]["id"] == fault["change"])
    deploy = next(t for t, d in records(result, "pipeline.deploy") if d["actor"] == "orchestrator" and t >= committed)
    assert committed < fault_start == deploy and fault_start - committed >= timedelta(minutes=1)
    assert parse_iso(fault["planned_end"]) - fault_start == timedelta(minutes=40)  # the window, as scheduled
    # the agent's revert: queued, built, deployed, rolled out — not live before the build is done
    t_revert, action = _revert(result)
    builds = [(t, b) for t, b in records(result, "pipeline.build") if b["action"] == action["id"]]
    states = [b["state"] for _, b in builds]
    assert states[0] == "queued" and "building" in states and states[-2:] == ["deploying", "deployed"]
    built = next(t for t, b in builds if b["state"] == "deploying")
    seconds = next(b["seconds"] for _, b in builds if b["state"] == "building")
    assert built - t_revert >= timedelta(seconds=seconds) >= timedelta(minutes=1)
    mitigations = [(t, m) for t, m in records(result, "truth.mitigation") if m["fault"] == "F01"]
    assert mitigations and all(t >= built for t, m in mitigations if m["mitigated"])
    t_fixed, fixed = next((t, m) for t, m in mitigations if m["mitigated"])
    # … and then it is the agent's repair, credited with the revert's action id
    assert fixed["by"] == "agent" and fixed["actions"] == [action["id"]]
    assert result["faults"][0]["repaired"] and result["faults"][0]["repair_actions"] == [action["id"]]
    # pipeline.status showed the fix in flight, then done (the agent reports it every step)
    seen = []
    for s in steps(result):
        for part in (s["report"] or {}).get("notes", "").split("|"):
            if part.startswith("status="):
                seen += [x.split(":")[1] for x in part.split(":", 1)[1].split(",") if x]
    assert seen and seen[-1] == "deployed"
    assert {"queued", "building", "deploying"} & set(seen[:-1]) or seen[0] != "deployed"


def test_an_agent_write_followed_by_ticks_in_the_same_step_is_the_agents(tmp_path: Path, write_scenario) -> None:
    result = run(write_scenario, tmp_path, "ScaleThenRead", "per-request:10", duration="20m", schedule={"faults": 0})
    [(t, scale)] = [(t, a) for t, a in records(result, "action") if a["verb"] in ("patch", "update")]
    step = steps(result)[0]
    ticks_after = [u for u, _ in records(result, "sli") if t < u < step["ended"]]
    assert ticks_after  # the orchestrator's phase of later ticks ran before the step ended …
    effects = [e for _, e in records(result, "truth.effect")]
    # … and the write is still the agent's action (not the orchestrator's)
    assert {"action": scale["id"], "object": "Deployment/shop/frontend", "aspect": "replicas"} in effects
