"""User traffic on real services: the twin's request mix, sent as real HTTP requests.

:class:`LoadGenerator` draws requests from an app's ``traffic:`` section (endpoints by weight,
parameters as the twin draws them) and sends them at a rate (requests per second, re-read
continuously so the diurnal curve and traffic surges apply) through a ``send`` function — a
POST to the entry service: directly on loopback for local runtime processes
(:func:`http_sender`), or through the API server's service proxy on a real cluster
(:func:`service_proxy_sender`, no ingress controller needed). Arrivals are Poisson; requests
that cannot start within a second because every worker is busy are shed and counted.
"""

from __future__ import annotations

import http.client
import json
import queue
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional
from urllib.parse import urlsplit

from ..apps import AppSpec
from .api import KubeApi

Send = Callable[[str, dict], int]  # (endpoint, payload) -> HTTP status (0: no answer)


def http_sender(base_url: str, timeout: float = 10.0) -> Send:
    parts = urlsplit(base_url)
    host = parts.hostname
    if host is None:
        raise ValueError(f"no host in {base_url!r}")
    local = threading.local()

    def send(endpoint: str, payload: dict) -> int:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection(host, parts.port, timeout=timeout)
        try:
            conn.request("POST", f"{parts.path.rstrip('/')}/{endpoint}", json.dumps(payload),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.will_close:
                conn.close()
                local.conn = None
            return resp.status
        except (OSError, http.client.HTTPException):
            conn.close()
            local.conn = None
            return 0

    return send


def service_proxy_sender(api: KubeApi, namespace: str, service: str, port: int = 8080, timeout: float = 10.0) -> Send:
    """POST through ``/api/v1/namespaces/{ns}/services/{svc}:{port}/proxy/{endpoint}``."""
    base = f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy"

    def send(endpoint: str, payload: dict) -> int:
        try:
            status, _ = api.request("POST", f"{base}/{endpoint}", json.dumps(payload).encode(),
                                    {"Content-Type": "application/json"}, timeout=timeout)
            return status
        except (OSError, http.client.HTTPException):
            return 0

    return send


@dataclass
class LoadGenerator:
    app: AppSpec
    send: Send
    rate: Callable[[], float]  # requests per second, read continuously
    seed: int = 0
    workers: int = 4
    statuses: Counter = field(default_factory=Counter)
    by_endpoint: Counter = field(default_factory=Counter)
    shed: int = 0

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._queue: "queue.Queue[Optional[tuple[str, dict]]]" = queue.Queue(maxsize=self.workers * 4)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        mixes = self.app.traffic.requests
        self._mixes, self._weights = mixes, [m.weight for m in mixes]

    def draw(self) -> tuple[str, dict]:
        """One request of the app's mix: (endpoint, parameters)."""
        mix = self._rng.choices(self._mixes, self._weights)[0]
        return mix.endpoint, self.app.traffic.params(mix, self._rng)

    def start(self) -> "LoadGenerator":
        self._stop.clear()
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"loadgen-{self.app.namespace}-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        t = threading.Thread(target=self._arrivals, name=f"loadgen-{self.app.namespace}", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for _ in range(self.workers):
            try:
                self._queue.put_nowait(None)
            except queue.Full:
                pass
        for t in self._threads:
            t.join(timeout=15)
        self._threads.clear()

    @property
    def sent(self) -> int:
        return sum(self.statuses.values())

    def _arrivals(self) -> None:
        while not self._stop.is_set():
            rps = max(0.0, float(self.rate()))
            if rps <= 0:
                self._stop.wait(0.5)
                continue
            self._stop.wait(self._rng.expovariate(rps))
            if self._stop.is_set():
                break
            try:
                self._queue.put(self.draw(), timeout=1.0)
            except queue.Full:
                with self._lock:
                    self.shed += 1

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            endpoint, payload = item
            status = self.send(endpoint, payload)
            with self._lock:
                self.statuses[status] += 1
                self.by_endpoint[(endpoint, status)] += 1
            if self._stop.is_set() and self._queue.empty():
                return

    def wait_for(self, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.sent < n and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.sent >= n
