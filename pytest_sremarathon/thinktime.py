"""What the agent's thinking costs in virtual time (README: Time is not free; docs/INTERNALS.md: Time): the think-time models and the
coordinator that charges for them while a step runs.

Models (``agent.think_time`` in the scenario, ``sremarathon run --think-time MODE``,
``pytest --marathon-think-time MODE``, ini ``marathon_think_time``):

* ``frozen`` — virtual time stops while the agent thinks (the behaviour before issue 14);
* ``per-request:SECONDS`` — every request the agent makes to the Kubernetes API, the pipeline
  or telemetry advances virtual time by SECONDS before it is served; discovery (``/version``,
  ``/api``, ``/apis``, their group/version documents and ``/openapi/*``) is free. The same seed
  and the same agent decisions give the same record;
* ``wall[:FACTOR]`` — virtual time advances with the step's wall-clock time × FACTOR (default
  1): the cluster runs while the agent thinks, as on a live cluster.

In the charged modes the cluster keeps running during the step. The marathon thread, which
waits for the step to end, is the only thread that runs ticks (they are not thread-safe); the
API server's request threads go through :meth:`StepClock.gate`, which serialises the agent's
requests with the ticks:

* per-request: a request takes the world lock, asks the marathon thread to advance virtual time
  by SECONDS (running every tick that falls due meanwhile) and waits, then is served at the new
  virtual time, then releases the lock — so each mutation takes effect at its own virtual time
  and later requests see the later state;
* wall: the marathon thread advances virtual time to ``start + elapsed wall × FACTOR`` every few
  milliseconds, holding the world lock for each advance; requests take the lock to be served.

Outside steps the marathon thread holds the world lock while it simulates, so a request the
agent makes between steps (a background thread of its own) waits for the next step and is
charged there. ``frozen`` installs no gate at all: requests are served at once, as before.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Optional

from .errors import ConfigError

Kind = Literal["frozen", "per-request", "wall"]

_MODE = re.compile(r"^\s*(frozen|per-request|wall)\s*(?::\s*([0-9]+(?:\.[0-9]+)?)\s*(s)?\s*)?$")
#: Paths that are API discovery, never charged (and any path under ``/openapi/``).
FREE_PATHS = frozenset({"/version", "/api", "/apis", "/", "/healthz", "/livez", "/readyz"})


@dataclass(frozen=True)
class ThinkTime:
    kind: Kind = "frozen"
    seconds: float = 0.0  # per-request: virtual seconds per request
    factor: float = 1.0  # wall: virtual seconds per wall second

    @property
    def charged(self) -> bool:
        return self.kind != "frozen"

    @property
    def deterministic(self) -> bool:
        return self.kind != "wall"

    def __str__(self) -> str:
        if self.kind == "per-request":
            return f"per-request:{self.seconds:g}"
        if self.kind == "wall":
            return f"wall:{self.factor:g}"
        return "frozen"


def parse_think_time(value: object) -> ThinkTime:
    """``frozen``, ``per-request:SECONDS`` (``10`` or ``10s``) or ``wall[:FACTOR]``."""
    if isinstance(value, ThinkTime):
        return value
    m = _MODE.match(str(value)) if isinstance(value, str) else None
    if m is None:
        raise ValueError(f"{value!r} is not a think-time model; write frozen, per-request:SECONDS (e.g. "
                         f"per-request:10) or wall[:FACTOR] (e.g. wall or wall:2)")
    kind, number, unit = m.group(1), m.group(2), m.group(3)
    if kind == "frozen":
        if number is not None:
            raise ValueError("frozen takes no number")
        return ThinkTime("frozen")
    if kind == "per-request":
        if number is None:
            raise ValueError("per-request needs the virtual seconds each request costs, e.g. per-request:10")
        if float(number) <= 0:
            raise ValueError("per-request:SECONDS needs SECONDS > 0 (frozen charges nothing)")
        return ThinkTime("per-request", seconds=float(number))
    if unit:
        raise ValueError("wall:FACTOR is a plain number (virtual seconds per wall second), e.g. wall:2")
    factor = float(number) if number is not None else 1.0
    if factor <= 0:
        raise ValueError("wall:FACTOR needs FACTOR > 0")
    return ThinkTime("wall", factor=factor)


def think_time_option(value: Optional[str], where: str) -> Optional[ThinkTime]:
    """A command-line or ini value, with the option's name in the error."""
    if value is None or value == "":
        return None
    try:
        return parse_think_time(value)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def is_free(method: str, path: str) -> bool:
    """API discovery: ``/version``, ``/api``, ``/api/v1``, ``/apis``, ``/apis/<g>``,
    ``/apis/<g>/<v>``, ``/openapi/...``, health checks."""
    if method not in ("GET", "HEAD"):
        return False
    p = path.split("?", 1)[0].rstrip("/") or "/"
    if p in FREE_PATHS or p.startswith("/openapi/") or p == "/openapi":
        return True
    parts = p.strip("/").split("/")
    return (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and 2 <= len(parts) <= 3)


@dataclass
class StepCharge:
    """What one step cost: recorded on its ``agent.step`` record."""

    started: datetime
    ended: datetime
    requests: int = 0  # requests charged (per-request), or served during the step (wall)

    @property
    def seconds(self) -> float:
        return (self.ended - self.started).total_seconds()


class _Held:
    """The world lock held by one request; :meth:`release` lets it go early (a watch that
    streams on after its first answer)."""

    __slots__ = ("_lock", "_held")

    def __init__(self, lock: Optional[threading.Lock]) -> None:
        self._lock = lock
        self._held = lock is not None

    def release(self) -> None:
        if self._held:
            self._held = False
            assert self._lock is not None
            self._lock.release()

    def __enter__(self) -> _Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_NOT_HELD = _Held(None)


class StepClock:
    """The coordinator between the request threads and the marathon thread (see the module
    docstring). ``advance(target)`` is the marathon's: run every tick due up to ``target`` and
    set the clock to it; it is only ever called on the marathon thread."""

    def __init__(self, model: ThinkTime, clock: Any, advance: Callable[[datetime], None],
                 limit: Callable[[], datetime], actors: tuple[str, ...] = ("agent",)) -> None:
        self.model = model
        self.clock = clock
        self.advance = advance
        self.limit = limit  # virtual time the run ends at: no tick beyond it
        self.actors = actors
        self.world = threading.Lock()
        self._in_step = False
        self._closed = False
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._requests = 0
        self._held_by_marathon = False
        self.simulated = 0.0  # wall seconds spent advancing the cluster during the current step

    # -- the request side (API server and policy-proxy threads) ----------------------------
    def gate(self, actor: Optional[str], method: str, path: str) -> _Held:
        """Enter before serving a request; the returned handle is released when the answer is
        complete (or earlier, for a stream). Discovery, other actors and a frozen model pass."""
        if not self.model.charged or actor not in self.actors or is_free(method, path) or self._closed:
            return _NOT_HELD
        self.world.acquire()
        if self._closed:
            self.world.release()
            return _NOT_HELD
        held = _Held(self.world)
        self._requests += 1
        if self.model.kind == "per-request" and self._in_step:
            done = threading.Event()
            self._inbox.put(("charge", done))
            while not done.wait(0.5):
                if self._closed or not self._in_step:
                    break
        return held

    # -- the marathon side -----------------------------------------------------------------
    def hold(self) -> None:
        """The marathon simulates outside a step: requests wait (charged modes only)."""
        if self.model.charged and not self._held_by_marathon and not self._closed:
            self.world.acquire()
            self._held_by_marathon = True

    def unhold(self) -> None:
        if self._held_by_marathon:
            self._held_by_marathon = False
            self.world.release()

    def run_step(self, call: Callable[[], Any]) -> tuple[Any, StepCharge]:
        """Run ``call`` (the agent's step, blocking) while charging for it; returns its result
        and what the step cost. Must be called on the marathon thread."""
        started = self.clock.now
        if not self.model.charged:
            result = call()
            return result, StepCharge(started, self.clock.now, 0)
        box: dict[str, Any] = {}

        def worker() -> None:
            try:
                box["result"] = call()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the marathon thread
                box["error"] = exc
            finally:
                self._inbox.put(("done", None))

        self._requests = 0
        self.simulated = 0.0
        self._in_step = True
        self.unhold()
        thread = threading.Thread(target=worker, name="agent-step", daemon=True)
        t0 = time.monotonic()
        thread.start()
        try:
            if self.model.kind == "per-request":
                self._serve_charges()
            else:
                self._run_wall(t0, started)
        finally:
            self._in_step = False
            self._drain()
            thread.join()
            self.hold()
        if "error" in box:
            raise box["error"]
        return box.get("result"), StepCharge(started, self.clock.now, self._requests)

    def _serve_charges(self) -> None:
        seconds = self.model.seconds
        while True:
            kind, done = self._inbox.get()
            if kind == "done":
                return
            target = min(self.clock.now + _td(seconds), max(self.limit(), self.clock.now))
            t0 = time.monotonic()
            try:
                self.advance(target)
            finally:
                self.simulated += time.monotonic() - t0
                done.set()

    def _run_wall(self, t0: float, started: datetime) -> None:
        factor = self.model.factor
        while True:
            try:
                kind, _ = self._inbox.get(timeout=0.02)
            except queue.Empty:
                kind = None
            target = min(started + _td((time.monotonic() - t0) * factor), max(self.limit(), self.clock.now))
            with self.world:
                if target > self.clock.now:
                    t1 = time.monotonic()
                    self.advance(target)
                    self.simulated += time.monotonic() - t1
            if kind == "done":
                return

    def _drain(self) -> None:
        while True:
            try:
                kind, done = self._inbox.get_nowait()
            except queue.Empty:
                return
            if kind == "charge":
                done.set()

    def close(self) -> None:
        """The run is over: every waiting request is served (uncharged), none waits again."""
        self._closed = True
        self._drain()
        self.unhold()


def _td(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)
