"""The shop as real processes on loopback, deployed by its real pipeline: every code service
and its datastore run ``python -m pytest_sremarathon.runtime``; user requests fan out over HTTP;
``/metrics`` is scraped into the twin's per-service metrics; a faulty change shipped through the
pipeline shows up as real 500s with a traceback, and reverting it repairs the shop."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.http import get_text, post_json

from pytest_sremarathon.apps import AppSpec, load_app
from pytest_sremarathon.builtin import APPS_DIR
from pytest_sremarathon.clock import VirtualClock
from pytest_sremarathon.faults.catalogue import load_catalogue
from pytest_sremarathon.kube.scrape import PodScrape, ServiceMetrics, parse
from pytest_sremarathon.kube.traffic import LoadGenerator, http_sender
from pytest_sremarathon.pipeline.service import Pipelines
from pytest_sremarathon.runtime.local import LocalCluster

SHOP = APPS_DIR / "shop"


class LocalShop:
    def __init__(self, tmp: Path) -> None:
        self.app: AppSpec = load_app(SHOP)
        self.clock = VirtualClock()
        self.events: list[tuple[str, Any]] = []
        self.cluster = LocalCluster([self.app], tmp / "local")
        self.pipelines = Pipelines([self.app], self.cluster, tmp / "repos", self.clock,  # type: ignore[arg-type]
                                   lambda type_, data: self.events.append((type_, data)))
        self.telemetry = ServiceMetrics()

    def post(self, service: str, endpoint: str, body: dict[str, Any]) -> tuple[int, Any]:
        return post_json(self.cluster.ports[("shop", service)], endpoint, body)

    def get(self, service: str, path: str) -> tuple[int, str]:
        return get_text(self.cluster.ports[("shop", service)], path)

    def scrape(self) -> dict[tuple[str, str], dict[str, float]]:
        """One scrape of every process, recorded like the orchestrator records a cluster's."""
        pods = []
        for svc in self.app.services:
            status, text = self.get(svc, "/metrics")
            pods.append(PodScrape("shop", svc, f"{svc}-local-0", text if status == 200 else None, ready=True))
        self.clock.advance(30)
        return self.telemetry.record(self.clock.now, pods, [("shop", s) for s in self.app.services], dt=30.0)


@pytest.fixture(scope="module")
def shop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalShop]:
    s = LocalShop(tmp_path_factory.mktemp("local-shop"))
    try:
        s.pipelines.deploy("shop", "HEAD", "orchestrator")
        s.cluster.wait_ready(timeout=60)
        yield s
    finally:
        s.cluster.close()


def test_every_service_runs_as_a_process_from_its_built_artifact(shop: LocalShop) -> None:
    status = shop.pipelines.status("shop")
    assert set(shop.cluster.processes) == {("shop", s) for s in shop.app.services}
    for svc, digest in status["services"].items():
        code, body = shop.get(svc, "/")
        assert code == 200
        assert json.loads(body)["digest"] == digest  # the process runs exactly what the build recorded
    assert shop.get("cart-cache", "/readyz") == (200, "ok")
    assert all(shop.get(svc, "/healthz") == (200, "ok") for svc in shop.app.services)


def test_user_requests_fan_out_over_http_and_show_in_metrics(shop: LocalShop) -> None:
    shop.scrape()  # baseline
    assert shop.post("frontend", "add_to_cart", {"user": "u7", "product": "OLJCESPC7Z", "quantity": 2})[0] == 200
    code, cart = shop.post("frontend", "view_cart", {"user": "u7", "currency": "EUR"})
    assert code == 200 and cart["items"] == 1 and cart["total"] > 0
    code, order = shop.post("frontend", "checkout", {"user": "u7", "currency": "USD"})
    assert code == 200 and order["order"].startswith("tx-")
    code, home = shop.post("frontend", "home", {"currency": "JPY"})
    assert code == 200 and len(home["prices"]) == 4
    gen = LoadGenerator(shop.app, http_sender(shop.cluster.url("shop", "frontend")), rate=lambda: 40.0, seed=3)
    gen.start()
    try:
        assert gen.wait_for(60, timeout=30)
    finally:
        gen.stop()
    assert gen.statuses[200] == gen.sent, gen.by_endpoint
    values = shop.scrape()
    for svc in shop.app.services:  # the mix reaches every service, the datastore included
        m = values[("shop", svc)]
        assert m["requests_per_second"] > 0, svc
        assert m["error_ratio"] == 0, svc
        assert m["latency_p99_ms"] > 0 and m["memory_bytes"] > 10 * 2**20 and m["ready_pods"] == 1, svc
    fe = values[("shop", "frontend")]
    assert fe["requests_per_second"] * 30 >= gen.sent  # requests counted at the entry service
    assert shop.telemetry.metrics.latest("shop", "cart-cache", "requests_per_second") > 0  # the datastore too


def test_a_faulty_change_through_the_pipeline_is_a_real_500_with_a_traceback(shop: LocalShop) -> None:
    change = next(c for c in load_catalogue(SHOP) if c.id == "currency-minor-units")
    before = shop.pipelines.status("shop")["services"]["currency"]
    shop.clock.advance(60)
    committed = shop.pipelines.commit_edits("shop", [(e.file, e.find, e.replace) for e in change.edits],
                                            change.message, change.author)
    result = shop.pipelines.deploy("shop", "HEAD", "orchestrator")  # the build runs the unit tests: they pass
    after = result["services"]["currency"]
    assert after != before
    untouched = {s: d for s, d in result["services"].items() if s != "currency"}
    assert all(shop.get(s, "/")[1] and json.loads(shop.get(s, "/")[1])["digest"] == d for s, d in untouched.items())
    shop.cluster.wait_ready(timeout=60)
    assert json.loads(shop.get("currency", "/")[1])["digest"] == after
    assert shop.cluster.processes[("shop", "currency")].starts == 2  # restarted; the others were not
    assert shop.cluster.processes[("shop", "cart")].starts == 1

    shop.scrape()
    assert shop.post("frontend", "home", {"currency": "EUR"})[0] == 200  # EUR has a minor unit
    codes = [shop.post("frontend", "home", {"currency": "JPY"})[0] for _ in range(5)]
    assert codes == [500] * 5
    code, body = shop.post("currency", "convert", {"from": "USD", "to": "JPY", "amount": 10})
    assert code == 500 and body["origin"] == "service:shop/currency"

    log = shop.cluster.log("shop", "currency")
    assert "ERROR convert failed\nTraceback (most recent call last):" in log
    assert 'File "/app/services/currency.py", line 13, in convert' in log
    assert "return {\"amount\": round(eur * RATES_PER_EUR[dst], MINOR_UNITS[dst]), \"currency\": dst}" in log
    assert "KeyError: 'JPY'" in log
    assert "ERROR home: upstream call failed: currency: HTTP 500: Internal Server Error" in \
        shop.cluster.log("shop", "frontend")

    values = shop.scrape()
    assert values[("shop", "currency")]["error_ratio"] > 0
    assert values[("shop", "frontend")]["error_ratio"] > 0
    samples = parse(shop.get("currency", "/metrics")[1])
    errors = sum(x.value for x in samples if x.name == "sremarathon_requests_total" and x.label("code") == "500")
    assert errors >= 6

    # the repair goes through the same pipeline
    shop.clock.advance(60)
    shop.pipelines.revert("shop", committed.id, "agent")
    shop.cluster.wait_ready(timeout=60)
    assert json.loads(shop.get("currency", "/")[1])["digest"] == before
    assert shop.post("frontend", "home", {"currency": "JPY"})[0] == 200
    assert [e for e, _ in shop.events].count("pipeline.deploy") == 3
