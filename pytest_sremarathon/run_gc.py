"""The cycle collector's schedule while a marathon runs in the host process.

A marathon's heap is mostly long-lived: the cluster, the applications' modules, the recorded
series and events. CPython's collector walks every object that survives a young collection at
least once more before it reaches the oldest generation: in the default marathon, 1.2 s of wall
(measured with ``gc.callbacks``: 50 young collections of ~23 ms each, which freed some 10k
cyclic objects a virtual hour). So:

- what the warm-up built is frozen (``gc.freeze()``) when the run starts;
- while it runs, the young generation is collected every 20000 allocations
  (:data:`RUN_GC_THRESHOLD`), so the hundreds of thousands of short-lived objects a tick makes
  (requests, their frames and exceptions, samples) are mostly dead before a collection walks
  them (the default thresholds, every 700, cost ~4 s in ~4000 collections);
- what survives a tick is frozen at its end (an O(1) move of the generations' lists), so no
  collection walks it again; the cycles among it wait for a full pass, made once the heap may
  have grown by :data:`FULL_PASS_GROWTH` objects since the last. The growth is read in O(1)
  from the young generation's count (allocations less deallocations since it was last emptied)
  at each freeze, plus a young generation's worth for each collection during the tick (any
  collection empties it into an older one): an upper bound. ``gc.get_freeze_count()`` would
  be exact, but it walks the frozen list, and a walk of the default marathon's 0.8 M frozen
  objects is all cache misses: 13 walks (one every 120 ticks) took 0.87 s of its wall;
- at the end, everything goes back to the oldest generation and the host's thresholds come
  back, so a host that runs several marathons gets each run's memory back at its next full
  collection (tests/test_host_memory.py).

Nothing recorded depends on when the collector runs: a run records the same events with any
schedule (tests/test_run_gc.py).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Optional

RUN_GC_THRESHOLD = (20_000, 50, 100)  # gc.set_threshold while a marathon runs
# The default marathon's ticks leave ~60k objects a virtual hour behind, a third to a half of them
# cyclic garbage (measured over 12 h: 0.08 -> 0.84 M frozen; peak RSS 313 MB instead of 290).
# A full pass over a heap that size takes ~0.5 s: so one pass every ~16 virtual hours, which
# bounds what waits for one to some 100 MB. The bound tick_done reads overstates the growth by
# about half (1.14 M counted over those 12 h, where the frozen list grew by 0.76 M).
FULL_PASS_GROWTH = 1_500_000


@dataclass
class RunCollector:
    """The collector's settings between :meth:`start` and :meth:`finish` of one run."""

    full_pass_growth: int = FULL_PASS_GROWTH
    full_passes: int = 0  # made during the run (for tests and the curious)
    _host_threshold: Optional[tuple[int, int, int]] = field(default=None, repr=False)
    _grown: int = 0  # at most this many objects frozen since the last full pass
    _collections: int = 0  # made by the interpreter so far, of any generation

    @property
    def running(self) -> bool:
        return self._host_threshold is not None

    def start(self) -> None:
        """The warm-up is done: freeze what it built and take the run's thresholds."""
        if self.running:
            return
        gc.freeze()
        self._restart_growth()
        self._host_threshold = gc.get_threshold()
        gc.set_threshold(*RUN_GC_THRESHOLD)

    def tick_done(self) -> None:
        """A tick's survivors are long-lived: freeze them, and collect the frozen heap's cycles
        once it has grown enough."""
        if not self.running:
            return
        collections = _collections()
        self._grown += gc.get_count()[0] + RUN_GC_THRESHOLD[0] * (collections - self._collections)
        self._collections = collections
        gc.freeze()
        if self._grown >= self.full_pass_growth:
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self._restart_growth()
            self.full_passes += 1

    def _restart_growth(self) -> None:
        """Count the heap's growth from here (the start, or a full pass)."""
        self._grown = 0
        self._collections = _collections()

    def finish(self) -> None:
        """Give the host its collector back. What the run froze is garbage once the run is
        over, and the host's own frozen objects come back to the oldest generation with it, as
        collectable as before they were frozen. Freezing first sends the last tick's survivors
        there too: under the host's thresholds the next young collection would otherwise walk
        them all; the host's next full collection frees what is garbage."""
        if self._host_threshold is None:  # (not running)
            return
        gc.freeze()
        gc.unfreeze()
        gc.set_threshold(*self._host_threshold)
        self._host_threshold = None


def _collections() -> int:
    return sum(generation["collections"] for generation in gc.get_stats())
