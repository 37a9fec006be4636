"""The shipped agents (``pytest_sremarathon.baselines``): what each does, in real short marathons,
and the pure parts of HeuristicSRE's reasoning.

LLMAgent runs against a scripted stub of an OpenAI-compatible endpoint on 127.0.0.1: no
traffic leaves the machine.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import pytest
from support.cli import run_json

from pytest_sremarathon.agent.protocol import Alert, Change, Environment, Observation, ObservationWire, Report
from pytest_sremarathon.agent_tools.server import TOOLS as MCP_TOOLS
from pytest_sremarathon.baselines import LLMAgent, RollbackAgent
from pytest_sremarathon.baselines.heuristic.cluster import Pod, View
from pytest_sremarathon.baselines.heuristic.context import StepContext
from pytest_sremarathon.baselines.heuristic.diagnosis import Diagnosis
from pytest_sremarathon.baselines.heuristic.graph import CallGraph
from pytest_sremarathon.baselines.heuristic.hypothesis import Hypothesis
from pytest_sremarathon.baselines.heuristic.incident import Incident, WatchGroup
from pytest_sremarathon.baselines.heuristic.logs import Evidence, parse_chain
from pytest_sremarathon.baselines.heuristic.state import HeuristicState, LatencyBaseline
from pytest_sremarathon.baselines.heuristic.suspects import suspects as rank_suspects
from pytest_sremarathon.baselines.heuristic.tokens import diff_tokens, tokens
from pytest_sremarathon.baselines.heuristic.tuning import Tuning
from pytest_sremarathon.baselines.journal import Journal
from pytest_sremarathon.bundle import open_bundle, verify
from pytest_sremarathon.scoring import score_bundle

T0 = datetime(2026, 1, 5, 3, 0, tzinfo=timezone.utc)


def agent_steps(bundle: str) -> list[dict[str, Any]]:
    return [e.data for e in open_bundle(bundle).events if e.type == "agent.step"]


def agent_actions(bundle: str) -> list[dict[str, Any]]:
    return [e.data for e in open_bundle(bundle).events if e.type == "action" and e.data["actor"] == "agent"]


# ------------------------------------------------------------------------------ simple baselines


def test_claim_everything_claims_what_it_sees_and_repairs_nothing(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="90m", schedule={"faults": 4})
    result = run_json("--agent", "pytest_sremarathon.baselines:ClaimEverything", "--scenario", str(scenario),
                      "--out", str(tmp_path))
    steps = agent_steps(result["bundle"])
    findings = [f for s in steps for f in s["report"]["findings"]]
    claims = [c for s in steps for c in s["report"]["claims"]]
    assert findings and [f["incident"] for f in findings] == [c["incident"] for c in claims]
    assert all(len(f["alerts"]) == 1 and f["component"] is None for f in findings)
    assert agent_actions(result["bundle"]) == []
    score = score_bundle(open_bundle(result["bundle"]))
    assert score.repaired == 0 and score.localized == 0
    assert score.claimed_share > 0 and score.declared_done_gap == pytest.approx(score.claimed_share)
    assert result["score"] == pytest.approx(20 * score.correlated / len(score.faults))


def test_restart_agent_restarts_the_deployments_of_alerting_services(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="90m", schedule={"faults": 4})
    result = run_json("--agent", "pytest_sremarathon.baselines:RestartAgent", "--scenario", str(scenario),
                      "--out", str(tmp_path))
    actions = agent_actions(result["bundle"])
    assert actions, "nothing alerted in two hours?"
    assert all(a["channel"] == "kube" and a["verb"] == "patch" and "/deployments/" in a["target"] and a["allowed"]
               for a in actions)
    findings = [f for s in agent_steps(result["bundle"]) for f in s["report"]["findings"]]
    assert all(f["component"].startswith("service:") and f["cause"] is None for f in findings)
    restarted = {a["target"].rsplit("/", 1)[-1] for a in actions}
    assert restarted <= {f["component"].rsplit("/", 1)[-1] for f in findings}
    assert verify(result["bundle"]).ok


def test_heuristic_sre_localizes_and_repairs_change_faults(tmp_path: Path, write_scenario) -> None:
    """Code and configuration faults only: it blames the faults' own changes, reverts them
    through the pipeline and claims nothing it did not repair."""
    scenario = write_scenario(duration="2h", schedule={"faults": 4, "families": {"change": 1.0}})
    # seed 2 draws a memory leak, a pool size cut, a removed setting and an undone hotfix: kinds
    # whose change the alerts point at (seed 1 draws contract breaks and retry storms, whose
    # symptoms sit in other services, and a crash-on-start hidden behind the old pods)
    result = run_json("--agent", "pytest_sremarathon.baselines:HeuristicSRE", "--scenario", str(scenario),
                      "--out", str(tmp_path), "--step-budget", "120", "--seed", "2")
    bundle = open_bundle(result["bundle"])
    assert {s["outcome"] for s in agent_steps(result["bundle"])} == {"ok"}
    score = score_bundle(bundle)
    assert score.localized >= 1 and score.repaired >= 1, [(f.id, f.kind, f.points) for f in score.faults]
    assert score.false_claims == 0 and score.policy_denials == 0
    reverted = [e.data["change"] for e in bundle.events if e.type == "pipeline.change" and e.data["actor"] == "agent"]
    assert reverted and all(c["message"].startswith('Revert "') for c in reverted)
    repaired = [f for f in score.faults if f.repaired]
    causes = {fd["cause"] for s in agent_steps(result["bundle"]) for fd in s["report"]["findings"] if fd["cause"]}
    assert all(f"change:{f.change}" in causes for f in repaired)


# ------------------------------------------------------------------------------ HeuristicSRE parts


@pytest.mark.parametrize("text, names, reason", [
    ("checkout: HTTP 500: payment: HTTP 503: upstream connect error or disconnect/reset before headers. "
     "reset reason: connection failure (no healthy upstream)", ("checkout", "payment"), "unavailable"),
    ("payments-gateway: HTTP 503: dial tcp: lookup payments-gateway.shop.svc.cluster.local: no such host",
     ("payments-gateway",), "nohost"),
    ("payment: HTTP 500: payment-provider: HTTP 503: POST https://api.payments.example.com/v1/charges: "
     "503 Service Unavailable", ("payment", "payment-provider"), "external"),
    ("cart: HTTP 504: deadline exceeded after 4ms", ("cart",), "timeout"),
    ("cart: HTTP 500: cart-cache: WRONGPASS invalid username-password pair or user is disabled.",
     ("cart", "cart-cache"), "auth"),
    ("cart: HTTP 503: dial tcp: lookup cart.shop.svc.cluster.local on 10.96.0.10:53: read udp: i/o timeout",
     ("cart",), "dns"),
    ("currency: HTTP 500: Internal Server Error", ("currency",), "error"),
])
def test_error_chains_end_where_the_failure_starts(text: str, names: tuple[str, ...], reason: str) -> None:
    assert parse_chain(text) == (names, reason)


def _change(id_: str, service: str | None, minutes_before: float, diff: str,
            kind: Literal["code", "config", "manifest"] = "code") -> Change:
    return Change(id=id_, app="shop", service=service, kind=kind, author="Dev <dev@shop.example>",
                  message=f"{service}: a change", time=T0 - timedelta(minutes=minutes_before), diff=diff)


class _Pipeline:
    def __init__(self, changes: list[Change]) -> None:
        self._changes = changes
        self.reverted: list[str] = []

    def changes(self, app: str) -> list[Change]:
        return list(self._changes)

    def revert(self, app: str, change_id: str) -> Change:
        self.reverted.append(change_id)
        return _change("r" + change_id, None, 0, "", "code")

    def deploy(self, app: str, ref: str) -> dict[str, Any]:
        raise AssertionError("nothing under test deploys")

    def status(self, app: str) -> dict[str, Any]:
        raise AssertionError("nothing under test asks for the status")


class _NoTelemetry:
    def metrics(self, app: str, service: str, name: str, since: datetime | None = None) -> list[tuple[datetime, float]]:
        return []


def _environment(pipeline: _Pipeline, workspace: Path = Path("/nonexistent")) -> Environment:
    return Environment(workspace=workspace, kubeconfig=workspace / "kubeconfig", apps=["shop"],
                       cadence=timedelta(minutes=5), pipeline=pipeline, telemetry=_NoTelemetry())


def _observation(env: Environment, step: int = 1, alerts: list[Alert] | None = None) -> Observation:
    """Step ``step`` of a run with a 5-minute cadence whose first step is at T0."""
    return Observation(ObservationWire(time=T0 + timedelta(minutes=5 * (step - 1)), step=step, alerts=alerts or [],
                                       new_alerts=alerts or []), env)


def _context(changes: list[Change] | None = None, edges: dict[str, dict[str, list[str]]] | None = None) -> StepContext:
    """What one step of HeuristicSRE shares, for its pure parts: no cluster."""
    return StepContext(obs=_observation(_environment(_Pipeline(changes or []))),
                       state=HeuristicState(graph=CallGraph(edges)), tuning=Tuning(), apps=["shop"])


def _incident(opened: datetime) -> Incident:
    return Incident(key="service:shop/x", component="service:shop/x", kind="change", app="shop", opened=opened)


def test_suspects_rank_the_change_whose_diff_shows_in_the_errors() -> None:
    """A traceback line from a recent change beats a more recent change without evidence; a
    change to an unrelated service is no suspect at all."""
    changes = [
        _change("aaa", "currency", 30, "+    return {'amount': round(eur * RATES[dst], MINOR_UNITS[dst])}"),
        _change("bbb", "currency", 5, "+# a comment about sorting the supported list"),
        _change("ccc", "email", 2, "+    subject = 'Your order'"),
    ] + [_change(f"n{i}", "ad", 200 + i, f"+ ad copy {i}") for i in range(6)]
    ctx = _context(changes, {"shop": {"frontend": ["currency"], "checkout": ["currency", "email"]}})
    h = Hypothesis(component="service:shop/currency", kind="change", app="shop", fix_service="currency")
    h.tokens = tokens('File "/app/services/currency.py", line 12, in convert\n'
                       "    return {'amount': round(eur * RATES[dst], MINOR_UNITS[dst])}\nKeyError: 'JPY'")
    suspects = rank_suspects(ctx, _incident(T0 - timedelta(minutes=1)), h, {})
    assert [c.id for _, c, _, _ in suspects][:2] == ["aaa", "bbb"]
    assert "ccc" not in [c.id for _, c, _, _ in suspects]
    assert suspects[0][3], "a traceback match is a strong suspect"
    assert "minor_units" in suspects[0][2]


def test_a_timeout_on_a_healthy_callee_blames_only_a_change_with_that_timeout() -> None:
    changes = [_change("t1", "frontend", 3, "-REQUEST_TIMEOUT_MS: '1500'\n+REQUEST_TIMEOUT_MS: '4'", "config"),
               _change("t2", "frontend", 1, "+LOG_LEVEL: warning", "config")]
    h = Hypothesis(component="service:shop/frontend", kind="change", app="shop", fix_service="frontend",
                   require={"4"})
    suspects = rank_suspects(_context(changes), _incident(T0), h, {})
    assert [c.id for _, c, _, _ in suspects] == ["t1"]
    assert "4" in diff_tokens(changes[0].diff)


def test_root_follows_the_error_chain_to_the_failing_callee() -> None:
    """frontend fails because checkout fails because payment has no healthy upstream: the root
    is payment, and both callers are its symptoms."""
    ctx = _context()
    view = View(services={"shop": ["frontend", "checkout", "payment", "payments-gateway-x"]})
    for svc in ("frontend", "checkout", "payment"):
        view.pods.append(Pod("shop", f"{svc}-1", svc, "worker-a1", "zone-a", True, True, "", 0, "", "Running"))
    ev_front, ev_checkout = Evidence(), Evidence()
    ev_front.add_chain(("checkout", "payment"), "unavailable")
    ev_checkout.add_chain(("payment",), "unavailable")
    evidence = {("shop", "frontend"): ev_front, ("shop", "checkout"): ev_checkout, ("shop", "payment"): Evidence()}
    sick = set(evidence)
    for caller in ("frontend", "checkout"):
        h = Diagnosis(ctx, view, {}, sick, evidence).root(("shop", caller))
        assert h is not None and (h.component, h.kind, h.fix_service) == ("service:shop/payment", "change", "payment")
    assert ctx.state.graph.callees("shop", "frontend") == [] and ctx.state.graph.edges == {}  # edges come from logs

    ev = Evidence()
    ev.add_chain(("payment", "payment-provider"), "external")
    h = Diagnosis(ctx, view, {}, {("shop", "checkout")}, {("shop", "checkout"): ev}).root(("shop", "checkout"))
    assert h is not None and (h.component, h.kind, h.fix_service) == ("external:payment-provider", "external", "payment")


# ------------------------------------------------------------------------------ journals


def test_heuristic_state_survives_its_journal(tmp_path: Path) -> None:
    """Everything HeuristicSRE remembers comes back from its journal as it was, so a restarted
    agent process reasons from the same state."""
    state = HeuristicState(graph=CallGraph({"shop": {"frontend": ["cart"]}}))
    inc = Incident(key="node:worker-a1#2", component="node:worker-a1", kind="node", app=None, opened=T0, why="NotReady",
                   alerts=["a1"], onset=T0 - timedelta(minutes=3), services=[("shop", "cart")], nodes=["worker-a1"],
                   hosted=[("shop", "cart"), ("shop", "web")], cause="c1", tried=["c1"], tried_at=[T0],
                   last_action=T0, healthy=1, absent=2, ready_to_claim=True, claimed=True,
                   closed=True, closed_at=T0, restarted=["cart"], scale_targets={"cart": 4}, last_scaled=T0,
                   fallback_key="PAYMENT_FALLBACK", fallback_value="queue", fallback_tried=["queue"],
                   no_fallback_noted=True, no_room_noted=True)
    inc.record(T0 + timedelta(minutes=5), "cordoned worker-a1")
    state.incidents[inc.key] = inc
    state.open[inc.component] = inc.key
    state.generation[inc.component] = 2
    state.baseline["shop/cart"] = LatencyBaseline(p99=12.5, n=3)
    state.reverted.append("c1")
    state.cordoned.append("worker-a1")
    state.owner["a1"] = inc.key
    state.config_edges_for.append("shop")
    state.watch["shop/web"] = WatchGroup(key="watch:shop/web#2", n=2, open=False, alerts=["a2"])

    journal = Journal("heuristic-sre.json")
    assert journal.load(tmp_path) is None
    journal.save(state.to_json())
    loaded = Journal("heuristic-sre.json").load(tmp_path)
    assert loaded is not None
    back = HeuristicState.from_json(loaded)
    assert back.incidents == state.incidents and back.watch == state.watch and back.baseline == state.baseline
    assert back.to_json() == state.to_json()


def test_a_restarted_rollback_agent_carries_on(tmp_path: Path) -> None:
    """A new RollbackAgent process (setup, then the next step) decides as the old one would have."""
    changes = [_change("c1", "cart", 30, "+x"), _change("c2", "web", 20, "+y")]

    firing, resolved = (Alert(id="a1", name="HighErrorRate", status=status, severity="page",
                              labels={"app": "shop", "service": "cart"}, starts_at=T0 - timedelta(minutes=5))
                        for status in ("firing", "resolved"))

    def run(restart: bool, workspace: Path) -> tuple[list[Report], list[str]]:
        workspace.mkdir()
        pipeline = _Pipeline(changes)
        env = _environment(pipeline, workspace)
        agent = RollbackAgent()
        reports = []
        for step, alert in ((1, firing), (2, firing), (3, resolved), (4, resolved)):
            if restart or step == 1:
                agent = RollbackAgent()
                agent.setup(env)
            reports.append(agent.step(_observation(env, step, [alert])))
        return reports, pipeline.reverted

    assert run(True, tmp_path / "restarted") == run(False, tmp_path / "one")
    reports, reverted = run(True, tmp_path / "again")
    assert reverted == ["c1"] and [c.incident for c in reports[2].claims] == ["svc:shop/cart"]
    assert reports[3].findings == []


# ------------------------------------------------------------------------------ LLMAgent


class _StubLLM:
    """A scripted OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1.

    At the marathon's first step it investigates (kubectl, pipeline, alerts: the run's MCP tools),
    repairs (a rollout restart; a revert of the latest change if there is one), tries two things
    it must not (a namespace deletion, which the policy refuses, and another kubeconfig, which the
    kubectl tool refuses), reports a finding and claims it; at later steps it answers without
    tools.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.auth: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append(body)
                stub.auth.append(self.headers.get("Authorization", ""))
                answer = stub.answer(body) if self.path == "/v1/chat/completions" else None
                data = json.dumps({"id": "stub", "object": "chat.completion", "model": body.get("model"),
                                   "choices": [{"index": 0, "message": answer, "finish_reason": "stop"}]}).encode()
                self.send_response(200 if answer else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _StubLLM:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    @staticmethod
    def _call(n: int, name: str, **args: Any) -> dict[str, Any]:
        return {"id": f"call-{n}-{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body["messages"]
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        briefing = messages[last_user]["content"]
        turn = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
        if "(step 1)" not in briefing:
            return {"role": "assistant", "content": "All quiet; nothing to do."}
        if turn == 0:
            return {"role": "assistant", "content": None, "tool_calls": [
                self._call(0, "kubectl", command="get pods -n shop -o wide"),
                self._call(1, "pipeline_changes", app="shop"),
                self._call(8, "alerts", status="all")]}
        if turn == 1:
            changes = json.loads(next(m["content"] for m in messages if m.get("tool_call_id") == "call-1-pipeline_changes"))
            calls = [self._call(2, "kubectl", command="rollout restart deployment/frontend -n shop"),
                     self._call(3, "kubectl", command="delete namespace shop"),
                     self._call(4, "kubectl", command="get pods --kubeconfig=/etc/passwd"),
                     self._call(5, "report_finding", incident="stub-1", alerts=[],
                                component="service:shop/frontend",
                                cause=f"change:{changes[-1]['id']}" if changes else None)]
            if changes:
                calls.append(self._call(6, "pipeline_revert", app="shop", change=changes[-1]["id"]))
            return {"role": "assistant", "content": None, "tool_calls": calls}
        if turn == 2:
            return {"role": "assistant", "content": None, "tool_calls": [self._call(7, "claim_resolved",
                                                                                    incident="stub-1")]}
        return {"role": "assistant", "content": "Restarted the frontend; claimed stub-1."}

    def tool_result(self, call_id: str) -> str:
        for body in self.requests:
            for m in body["messages"]:
                if m.get("role") == "tool" and m.get("tool_call_id") == call_id:
                    return m["content"]
        raise AssertionError(f"no tool result for {call_id}")


def test_llm_agent_uses_its_tools_against_the_real_cluster(tmp_path: Path, write_scenario) -> None:
    scenario = write_scenario(duration="1h", cadence="15m", schedule={"faults": 2})
    with _StubLLM() as stub:
        result = run_json("--agent", "pytest_sremarathon.baselines:LLMAgent", "--scenario", str(scenario),
                          "--out", str(tmp_path), "--step-budget", "120",
                          env={"SREMARATHON_LLM_URL": stub.url, "SREMARATHON_LLM_MODEL": "stub-model",
                               "SREMARATHON_LLM_KEY": "test-key"})
    # the settings reached the agent's (scrubbed) environment
    assert stub.requests and set(stub.auth) == {"Bearer test-key"}
    assert {r["model"] for r in stub.requests} == {"stub-model"}
    # the model is offered exactly the run's MCP tools, with their JSON schemas
    tools = {t["function"]["name"]: t["function"] for t in stub.requests[0]["tools"]}
    assert set(tools) == set(MCP_TOOLS)
    assert "service:<app>/<service>" in tools["report_finding"]["parameters"]["properties"]["component"]["description"]
    system = stub.requests[0]["messages"][0]["content"]
    assert "shop" in system and "rules of the game" in system  # the apps, and the server's rules

    # kubectl really ran against the twin, and refusals come back as text the model can read
    pods = stub.tool_result("call-0-kubectl")
    assert "frontend-" in pods and "Running" in pods
    assert "deployment.apps/frontend restarted" in stub.tool_result("call-2-kubectl")
    denied = stub.tool_result("call-3-kubectl")
    assert "Forbidden" in denied and "no-delete-namespace" in denied
    assert "--kubeconfig is not allowed" in stub.tool_result("call-4-kubectl")
    assert json.loads(stub.tool_result("call-8-alerts"))["step"] == 1

    steps = agent_steps(result["bundle"])
    assert [s["outcome"] for s in steps] == ["ok"] * 4
    first = steps[0]["report"]
    assert [f["incident"] for f in first["findings"]] == ["stub-1"]
    assert first["findings"][0]["component"] == "service:shop/frontend"
    assert [c["incident"] for c in first["claims"]] == ["stub-1"]
    assert all(s["report"]["findings"] == [] and s["report"]["claims"] == [] for s in steps[1:]), \
        "a claimed incident is not reported again"

    actions = agent_actions(result["bundle"])
    assert any(a["allowed"] and a["verb"] == "patch" and a["target"].endswith("deployments/frontend") for a in actions)
    assert any(not a["allowed"] and a["rule"] == "no-delete-namespace" for a in actions)
    changes = json.loads(stub.tool_result("call-1-pipeline_changes"))
    if changes:
        assert any(a["channel"] == "pipeline" and a["verb"] == "revert" and a["allowed"] for a in actions)
    assert verify(result["bundle"]).ok


def test_llm_agent_without_an_endpoint_says_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SREMARATHON_LLM_URL", raising=False)
    with pytest.raises(Exception, match="SREMARATHON_LLM_URL"):
        _ = LLMAgent().endpoint
    assert LLMAgent(url="http://127.0.0.1:9/v1").endpoint == "http://127.0.0.1:9/v1/chat/completions"
    assert "key" not in repr(LLMAgent(url="http://127.0.0.1:9", key="secret-value")).replace("url", "")
    assert "secret-value" not in repr(LLMAgent(url="http://127.0.0.1:9", key="secret-value"))
