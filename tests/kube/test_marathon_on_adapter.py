"""A whole marathon through the real backend's code path — the cluster adapter, the mirror,
image publishing, server-side apply, the policy proxy as the agent's API server — with the
twin standing in for the cluster behind it (no Kubernetes here). What only a real cluster can
do (pausing node containers, scraping pods through the pod proxy, real traffic) is covered by
the ``-m kind`` tests; here those faults are skipped and recorded, as on a cluster without
Docker access to its nodes."""

from __future__ import annotations

from pathlib import Path

from support.kube import HookStub, kube_on_twin_factory

from pytest_sremarathon.agent_host import AgentSpec
from pytest_sremarathon.bundle import open_bundle, verify
from pytest_sremarathon.marathon import Marathon, MarathonOptions
from pytest_sremarathon.scenario import load_scenario


def test_a_marathon_runs_on_the_real_backend_adapter(write_scenario, tmp_path: Path) -> None:
    path = write_scenario("adapter", apps=["shop"], duration="40m", segment="40m", cadence="10m",
                          schedule={"faults": 5, "warmup": "2m", "quiet_tail": "5m", "duration_min": "5m",
                                    "duration_max": "15m",
                                    "families": {"change": 0.5, "infrastructure": 0.3, "dependency": 0.2}})
    options = MarathonOptions(agent=AgentSpec.from_options("kube_agents:ActsThroughThePolicyLayer"), seed=11,
                              out_dir=tmp_path / "runs", backend="kube-on-twin")
    marathon = Marathon(load_scenario(path), options, hook=HookStub({"kube-on-twin": kube_on_twin_factory}))
    result = marathon.run()
    assert verify(result.bundle).ok
    events = open_bundle(result.bundle).events
    by_type: dict[str, list] = {}
    for e in events:
        by_type.setdefault(e.type, []).append(e.data)
    assert by_type["run.start"][0]["backend"] == "kube-on-twin"
    assert by_type["run.end"][0]["reason"] == "completed"
    deploys = by_type["pipeline.deploy"]
    assert set(deploys[0]["artifacts"]) >= {"frontend", "cart", "currency", "checkout"}
    injected = by_type.get("truth.fault", [])
    skipped = by_type.get("truth.fault_skipped", [])
    assert len(injected) + len(skipped) >= 3
    for s in skipped:  # infrastructure without docker access, dependency knobs without a counterpart
        assert "cannot be injected on this cluster" in s["reason"] or "not there any more" in s["reason"]
    assert any(f["change"] for f in injected)  # change faults went through the pipeline onto the adapter
    steps = [d for d in by_type["agent.step"] if d.get("outcome") == "ok"]
    assert steps, by_type["agent.step"]
    assert all("delete-namespace=403" in d["report"]["notes"] for d in steps)
    actions = by_type["action"]
    denied = [a for a in actions if not a["allowed"]]
    allowed = [a for a in actions if a["allowed"] and a["verb"] == "patch"]
    assert denied and all(a["rule"] == "no-delete-namespace" and a["status"] == 403 for a in denied)
    assert len(allowed) == len(steps) + 1 and all(a["status"] == 200 for a in allowed)
    # provenance through the mirror: the restart changed cart's pod template, the annotations
    # on email changed nothing a mitigation condition reads
    restart = next(a["id"] for a in allowed if a["target"].endswith("/deployments/cart"))
    effects = [(e["action"], e["object"], e["aspect"]) for e in by_type.get("truth.effect", [])]
    assert effects == [(restart, "Deployment/shop/cart", "template")]
    slis = by_type["sli"]
    assert slis and set(slis[-1]["services"]) >= {"shop/frontend", "shop/cart-cache"}
    assert 0 <= result.score.score <= 100 and result.score.complete
