"""The shipped TraceSRE through a whole short marathon (the built-in smoke scenario): it finds
the failing services with PromQL at PROMETHEUS_URL and where each failure began with Jaeger
traces at JAEGER_URL, and that is what localizes the faults."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_sremarathon.agent_host import AgentSpec
from pytest_sremarathon.baselines.observability import deepest_error, slowest_self
from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.marathon import Marathon, MarathonOptions
from pytest_sremarathon.scenario import load_scenario

# Seed 4 of the smoke marathon draws a code exception in a backend service (shop/currency), a
# failure that alerts upstream, at the services calling it, and that only the traces say began
# there; the test checks the draw holds one. (The scenario's own seed 1 draws none since the
# catalogue grew.)
SEED = 4


def test_trace_sre_localizes_the_smoke_marathons_faults_from_promql_and_traces(tmp_path: Path) -> None:
    options = MarathonOptions(agent=AgentSpec.from_options("pytest_sremarathon.baselines:TraceSRE"), seed=SEED,
                              out_dir=tmp_path / "runs")
    result = Marathon(load_scenario(SCENARIOS_DIR / "smoke.yaml"), options).run()
    assert [f for f in result.score.faults
            if f.kind == "code-exception" and not f.component.endswith("/frontend")], result.score.faults
    events = open_bundle(result.bundle).events
    steps = [e.data for e in events if e.type == "agent.step"]
    assert steps and all(s["outcome"] == "ok" for s in steps), [s.get("error") for s in steps]
    notes = "\n".join(s["report"]["notes"] for s in steps)
    assert "promql error ratios: [[" in notes  # it ranked the failing services with PromQL
    # …and followed their traces to where the failures began, upstream of the alerting service
    blamed = re.findall(r"^(\w+)/([\w-]+): service:(\w+)/([\w-]+) \(traces: ", notes, re.M)
    assert blamed
    assert any(alerting != root for _, alerting, _, root in blamed), blamed
    by_trace = {f"service:{ns}/{root}" for _, _, ns, root in blamed}
    findings = {f["component"] for s in steps for f in s["report"]["findings"] if f["confidence"] == 0.8}
    localized = [f for f in result.score.faults if f.localized]
    # the faults localized by a finding whose component the traces named
    assert {f.component for f in localized} & by_trace & findings, (localized, by_trace)
    assert len(localized) >= 3 and result.score.score > 30
    # it reads nothing but the monitoring APIs and the pipeline: no custom telemetry endpoint
    assert not [e for e in events if e.type == "action" and "telemetry" in e.data["target"]]


def _span(sid: str, parent: str | None, process: str, duration: int, **tags: object) -> dict:
    return {"spanID": sid, "references": [{"refType": "CHILD_OF", "spanID": parent}] if parent else [],
            "processID": process, "startTime": 0, "duration": duration,
            "tags": [{"key": _KEYS.get(k, k), "value": v} for k, v in tags.items()]}


_KEYS = {"span_kind": "span.kind", "peer_service": "peer.service", "otel_status_description": "otel.status_description"}


PROCESSES = {"p1": {"serviceName": "frontend.shop"}, "p2": {"serviceName": "checkout.shop"},
             "p3": {"serviceName": "cart.shop"}}


def test_where_a_trace_says_a_failure_began() -> None:
    code_fault = {"processes": PROCESSES, "spans": [
        _span("a", None, "p1", 30, error=True), _span("b", "a", "p2", 20, error=True), _span("c", "b", "p3", 5)]}
    assert deepest_error(code_fault) == "service:shop/checkout"
    unreachable = {"processes": PROCESSES, "spans": [
        _span("a", None, "p1", 30, error=True), _span("b", "a", "p2", 20, error=True),
        _span("c", "b", "p2", 1, error=True, span_kind="client", peer_service="payment.shop",
              otel_status_description="payment: HTTP 503: connection refused")]}
    assert deepest_error(unreachable) == "service:shop/payment"
    external = {"processes": PROCESSES, "spans": [
        _span("a", None, "p2", 30, error=True),
        _span("b", "a", "p2", 8, error=True, span_kind="client", peer_service="payment-provider")]}
    assert deepest_error(external) == "external:payment-provider"
    misconfigured = {"processes": PROCESSES, "spans": [
        _span("a", None, "p2", 30, error=True),
        _span("b", "a", "p2", 2, error=True, span_kind="client", peer_service="payments-gateway.shop",
              otel_status_description="dial tcp: lookup payments-gateway.shop.svc.cluster.local: no such host")]}
    assert deepest_error(misconfigured) == "service:shop/checkout"
    slow = {"processes": PROCESSES, "spans": [
        _span("a", None, "p1", 430), _span("b", "a", "p2", 425), _span("c", "b", "p3", 410)]}
    assert slowest_self(slow) == "service:shop/cart" and deepest_error(slow) is None
