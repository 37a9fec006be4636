"""What recording traces adds to a run: CPU seconds per default marathon, and bytes per span.

    python benchmarks/bench_tracing.py [--repeat 5]

The default marathon (3 apps, 12 virtual hours, 30-s ticks) makes 677,876 ``ctx.call``s,
counted at ``TrafficEngine._call`` in one run (depths 1-6: 101k, 147k, 219k, 207k, 2.6k, 2.0k),
in about 71,000 sampled requests; readiness probes' calls are among them and are not traced, so
this is an upper bound of the spans a run records.
This benchmark replays request trees of that shape through a stand-in for the engine's call
path twice, without and with the recorder calls the contract (docs/TRACES-AND-ALERTS.md) asks
the engine to make, and reports the difference, scaled to one default marathon. CPU time
(``time.process_time``) and the best of ``--repeat`` runs, so a busy machine inflates it less.
Memory: tracemalloc's count of what the stored traces hold, per span. Queries: the Jaeger API's
answer time over the recorded store (wall time, best of three).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_sremarathon.tracing import ActiveTrace, JaegerQuery, TraceRecorder

REQUESTS = 71_050  # traces one default marathon records (measured)
SPANS_PER_MARATHON = 677_876  # every ctx.call of one default marathon (measured): an upper bound
ENDPOINTS = ("place_order", "get_cart", "get_product", "get_quote", "convert", "charge", "ship_order",
             "send_confirmation", "empty_cart", "list_recommendations", "search_hotels", "nearby")


@dataclass
class Pod:  # the attributes of the kubelet's Container the recorder reads
    pod_uid: str
    pod_name: str
    namespace: str
    service: str
    node: str


class Frame:  # the engine's _Frame
    __slots__ = ("work_ms", "downstream_ms")

    def __init__(self) -> None:
        self.work_ms = 0.0
        self.downstream_ms = 0.0


def make_tree(rng: random.Random, depth: int = 1) -> list:
    """(pod index, endpoint, children): a request's call tree, shaped like the measured one
    (per call at depth 1, 2, 3: 2, 1.5 and 1 calls on average; about 9 spans a request)."""
    low, high = {1: (1, 3), 2: (0, 3), 3: (0, 2)}.get(depth, (0, 0))
    n = rng.randint(low, high)
    return [rng.randrange(30), ENDPOINTS[rng.randrange(len(ENDPOINTS))], [make_tree(rng, depth + 1) for _ in range(n)]]


class Engine:
    """The parts of TrafficEngine._call that touch tracing, with the rest reduced to the
    arithmetic it does anyway, so the two variants differ by the recorder calls only."""

    def __init__(self, pods: list[Pod]) -> None:
        self.pods = pods
        self.stack: list[Frame] = []
        self.trace: Optional[ActiveTrace] = None

    def call(self, node: list) -> float:
        caller = self.stack[-1]
        trace = self.trace
        at_ms = caller.work_ms + caller.downstream_ms + 0.2 if trace is not None else 0.0
        pod, endpoint, children = node
        target = self.pods[pod]  # the engine's chosen endpoint, a local there too
        frame = Frame()
        stack = self.stack
        stack.append(frame)
        frame.work_ms += 1.5  # the handler's ctx.work
        for child in children:
            self.call(child)
        stack.pop()
        latency = frame.work_ms * 1.1 + frame.downstream_ms + 0.4
        if trace is not None:
            trace.span(len(stack), target, endpoint, at_ms, latency - 0.4)
        caller.downstream_ms += latency
        return latency

    def run(self, trees: list[list], recorder: Optional[TraceRecorder]) -> None:
        start_us = 1_767_225_600_000_000
        for i, tree in enumerate(trees):
            self.trace = recorder.begin_trace(start_us + i * 1_875_000) if recorder is not None else None
            self.stack = [Frame()]
            self.call(tree)


def count(tree: list) -> int:
    return 1 + sum(count(c) for c in tree[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    rng = random.Random(7)
    pods = [Pod(f"uid-{i}", f"svc{i % 10}-7d4b9c8f6d-{i:05d}", ("shop", "hotel", "social")[i % 3], f"svc{i % 10}",
                f"node-{i % 4}") for i in range(30)]
    trees = [make_tree(rng) for _ in range(args.requests)]
    spans = sum(count(t) for t in trees)
    engine = Engine(pods)
    base, traced = [], []
    for _ in range(args.repeat):
        t0 = time.process_time()
        engine.run(trees, None)
        base.append(time.process_time() - t0)
        recorder = TraceRecorder(random.Random(1), max_traces=args.requests)
        t0 = time.process_time()
        engine.run(trees, recorder)
        traced.append(time.process_time() - t0)
    per_span_us = (min(traced) - min(base)) / spans * 1e6
    tracemalloc.start()
    recorder = TraceRecorder(random.Random(1), max_traces=args.requests)
    before = tracemalloc.get_traced_memory()[0]
    engine.run(trees, recorder)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(f"requests {args.requests}, spans {spans} ({spans / args.requests:.1f} per trace)")
    print(f"engine stand-in without tracing: {min(base):.3f} s; with: {min(traced):.3f} s")
    print(f"recording: {per_span_us:.2f} µs per span (trace start included) -> "
          f"{per_span_us * SPANS_PER_MARATHON / 1e6:.2f} s per default marathon ({SPANS_PER_MARATHON} spans)")
    print(f"memory: {held / spans:.0f} bytes per stored span (trace overhead included) -> "
          f"{held / args.requests * REQUESTS / 2**20:.0f} MiB if a whole marathon's {REQUESTS} traces were kept, "
          f"{held / args.requests * 20_000 / 2**20:.0f} MiB at the default max_traces=20000")
    recorder.flush()
    q = JaegerQuery(recorder, lambda: 1_767_225_600_000_000 + args.requests * 1_875_000)
    service = pods[1].service + "." + pods[1].namespace
    for label, path, query in [
        ("services", "/api/services", {}),
        ("operations (first, then cached)", f"/api/services/{service}/operations", {}),
        ("search, newest 20", "/api/traces", {"service": [service], "limit": ["20"]}),
        ("search, a tag no trace has (full scan)", "/api/traces",
         {"service": [service], "tags": [json.dumps({"error": "true"})]}),
        ("dependencies, 24 h", "/api/dependencies", {}),
    ]:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            status, _ = q.handle("GET", path, query)
            times.append(time.perf_counter() - t0)
            assert status == 200
        print(f"query {label}: {min(times) * 1000:.1f} ms (first: {times[0] * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
