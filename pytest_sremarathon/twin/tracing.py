"""Which of the sampled requests are traced: head sampling at the ingress, as production does it.

Tracing every sampled request would cost about half a CPU-second a default marathon and keep
far more traces than anyone reads; a production tracer samples at the head instead (Jaeger's
rate-limiting sampler: a fixed number of traces per second per service). Here: a fixed number
of each app's sampled ingress requests per tick (:data:`TRACES_PER_APP_PER_TICK`), chosen
uniformly among that tick's requests.

The choice and the trace ids come from a stream of their own (``random.Random(f"{seed}:traces")``
where the backend is built), never the traffic's: what the simulation draws, and therefore every
recorded event, is the same with tracing on or off.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Optional

from ..tracing import ActiveTrace, TraceRecorder

TRACES_PER_APP_PER_TICK = 2
# At 2 traces per app per tick, 20,000 traces are the last 56 virtual hours of the default three
# apps: the whole of a default marathon, in about 24 MiB (docs/TRACES-AND-ALERTS.md).
MAX_TRACES = 20_000


class HeadSampler:
    """The traffic engine's tracer: ``tick`` once per app per tick, ``next`` once per sampled
    ingress request (the trace to record it in, or None)."""

    def __init__(self, recorder: TraceRecorder, rng: random.Random, per_tick: int = TRACES_PER_APP_PER_TICK) -> None:
        self.recorder = recorder
        self.rng = rng
        self.per_tick = per_tick
        self._picked: frozenset[int] = frozenset()
        self._index = 0
        self._start_us = 0
        self._step_us = 0

    def tick(self, now: datetime, dt: float, requests: int) -> None:
        """An app's ``requests`` sampled requests of the tick ending at ``now`` are about to be
        sent: choose which are traced. Their traces start spread over the tick, (now - dt, now],
        so none lies after the virtual now the query API answers at."""
        self._picked = frozenset(self.rng.sample(range(requests), min(self.per_tick, requests)))
        self._index = 0
        dt_us = int(dt * 1_000_000)
        self._step_us = dt_us // max(1, requests)
        self._start_us = int(now.timestamp() * 1_000_000) - dt_us

    def next(self) -> Optional[ActiveTrace]:
        """The trace of the app's next sampled request, if it is one of the chosen."""
        i = self._index
        self._index = i + 1
        if i not in self._picked:
            return None
        return self.recorder.begin_trace(self._start_us + (i + 1) * self._step_us)

    def flush(self) -> None:
        self.recorder.flush()
