"""A twin (the shop alone) with its Prometheus, for the monitoring tests: ticks on the 30 s
grid, a faulty checkout through the pipeline, and HTTP helpers that speak to the agent's
server with the agent's token."""

from __future__ import annotations

import json
import random
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Optional

from support.admission import RecordingAdmission

from pytest_sremarathon.backends.twin import TwinBackend
from pytest_sremarathon.builtin import SCENARIOS_DIR
from pytest_sremarathon.clock import VirtualClock
from pytest_sremarathon.scenario import load_scenario

TOKEN = "agent-token-monitoring-0123"
PROXY = "/api/v1/namespaces/monitoring/services/prometheus:9090/proxy"

# A code fault that fails 75% of checkout's requests: every user whose number is not 1 mod 4
# (45 of u1..u60) gets a 500 with a traceback; the unit tests' u1 passes, so the build ships it.
FAULT_FIND = "def place_order(ctx, req):\n    ctx.work(3)\n"
FAULT_REPLACE = ("def place_order(ctx, req):\n    ctx.work(3)\n"
                 "    if int(req[\"user\"][1:]) % 4 != 1:\n"
                 "        raise RuntimeError(\"card vault unavailable for this shard\")\n")


class Shop:
    """The shop on a twin from 00:00 virtual (checkout at about 1.8 requests/s, falling to
    1.6 by 01:30 on the daily curve)."""

    def __init__(self, tmp: Optional[Path] = None, seed: str = "monitoring", traces: bool = True) -> None:
        self.clock = VirtualClock()
        scenario = load_scenario(SCENARIOS_DIR / "default.yaml")
        scenario.apps = [a for a in scenario.apps if a.namespace == "shop"]
        self.app = scenario.apps[0]
        self.admission = RecordingAdmission()
        self.seed = seed
        self.backend = TwinBackend(scenario, self.clock, emit=lambda *_: None, admission=self.admission,
                                   private_dir=Path(tempfile.mkdtemp(dir=tmp)), tokens={TOKEN: "agent"},
                                   traces=traces)
        self.cluster = self.backend.cluster
        self.db = self.cluster.prometheus
        self.run(300)

    def run(self, seconds: float) -> None:
        for _ in range(int(seconds / 30)):
            self.clock.advance(30)
            self.backend.tick(30, random.Random(f"{self.seed}:{self.clock.now.isoformat()}"))

    def break_checkout(self) -> None:
        """Ship the 75% fault through the pipeline (builds are instant outside a marathon)."""
        self.backend.pipelines.commit_edits("shop", [("services/checkout.py", FAULT_FIND, FAULT_REPLACE)],
                                            "checkout: look the card up in the sharded vault",
                                            "Marco Bianchi <marco@shop.example>")
        self.backend.pipelines.deploy("shop", "HEAD", "orchestrator")

    def checkout_rps(self) -> float:
        return self.cluster.rps(self.app) * 6 / 100  # checkout's share of the shop's requests

    # -- HTTP ---------------------------------------------------------------------------------
    def url(self, path: str = "") -> str:
        return self.backend.server.url + path

    def get(self, path: str, params: Optional[dict[str, Any]] = None, *, token: Optional[str] = TOKEN,
            data: Optional[dict[str, Any]] = None) -> tuple[int, Any]:
        url = self.url(path) + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        body = urllib.parse.urlencode(data, doseq=True).encode() if data is not None else None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        req = urllib.request.Request(url, data=body, headers=headers, method="POST" if body is not None else "GET")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
        try:
            with opener.open(req, timeout=30) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as e:
            raw, status = e.read(), e.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def query(self, expr: str, time: Optional[float] = None) -> list[dict[str, Any]]:
        """An instant query through the service proxy; the result's vector."""
        params: dict[str, Any] = {"query": expr}
        if time is not None:
            params["time"] = time
        status, body = self.get(PROXY + "/api/v1/query", params)
        assert status == 200 and body["status"] == "success", body
        return body["data"]["result"]

    def value(self, expr: str) -> float:
        result = self.query(expr)
        assert len(result) == 1, (expr, result)
        return float(result[0]["value"][1])

    def close(self) -> None:
        self.backend.close()
