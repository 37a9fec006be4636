"""How many requests a scrape counts: the handler samples of a tick turned into the request
counts, status codes and latencies of the traffic they stand for.

The traffic engine (:mod:`.traffic`) runs a few sampled requests a tick through the apps' real
handlers, each standing for ``weight`` real ones; a low-share endpoint gets about one sample a
tick. Counting each sample ``weight`` times would make a scrape all-or-nothing (an endpoint
failing 75 % of its requests would read 0 % or 100 % errors). Instead, for every
(service, endpoint, pod) cell, each scrape draws:

1. **How many requests.** Poisson with mean the cell's expected volume this tick. The volume
   of a (service, endpoint) is the weighted count of its samples (the Horvitz-Thompson
   estimate: exact for the entry service, whose sample weights are rate × share × dt / n), and
   it is split over pods by the routing the samples saw, not by the pod each happened to pick:
   a call choosing among k ready pods (same zone first) credits each of them 1/k of its weight
   (the Rao-Blackwellised split, so two pods of a one-sample-a-tick service each show about
   half the traffic in every scrape rather than all of it or none). Calls that failed before
   reaching a pod (no ready endpoint, a broken port) form a cell of their own, without a pod.
2. **Which status codes.** Multinomial over the cell's outcome probabilities: the weighted
   share of each code among the cell's samples over a sliding window (up to :data:`WINDOW`
   ticks), shrunk toward the (service, endpoint) shares with :data:`K_POD` pseudo-samples,
   which are shrunk toward the service's with :data:`K_ENDPOINT`. The window restarts at a
   change: when the newest samples' error share is implausible under the older ones' (a
   Chernoff bound on the binomial tail below ``exp(-CHANGE_EVIDENCE)``), the older ticks are
   dropped — a fault shows within a tick or two, a repair within a few minutes, and a steady
   fault reads its steady share. While a window holds no error (nearly always), every share
   is all 200s and nothing is estimated.
3. **Which latencies.** The requests of each code are spread over the latencies of this
   tick's samples of that pod and code (else of that code at the endpoint, else over the
   window) by systematic sampling — one uniform: each sample's latency gets its expected share
   of the requests, rounded up or down — and counted in fine bins (each classic ``le`` bucket
   split in :data:`SUB_BINS`), which the exposition sums into its buckets and the service's
   quantiles interpolate; ``_sum`` adds each request's latency.

Every draw takes its uniforms from the tick's generator (seeded by the run's seed and the
tick), so a run's counts follow from its seed and its events. Service-level numbers (the
``MetricStore`` the alert rules read) are sums of the same draws.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple, Optional

from .draws import multinomial, poisson, systematic

#: Upper bounds (milliseconds) of the classic histogram buckets: runtime/metrics.py's BUCKETS.
BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)
SUB_BINS = 8  # fine bins per classic bucket (log-spaced; linear in the first)
WINDOW = 120  # ticks of samples the outcome shares are estimated over, at most (an hour at 30 s)
K_POD = 2.0  # pseudo-samples shrinking a pod's shares toward its endpoint's
K_ENDPOINT = 2.0  # ... and an endpoint's toward its service's
ROUTING_DECAY = 0.05  # weight of a tick's routing in each pod's share of its endpoint's calls
CHANGE_EVIDENCE = 8.0  # n * KL(recent || older) beyond which the older samples are dropped
CHANGE_MIN_OLDER = 6  # samples the older part needs before a change can be declared
CHANGE_MIN_SHIFT = 0.05  # how far the newest tick's error share must be from the older ones' to test
CHANGE_SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48)  # recent parts tested, in ticks with samples
OK = "200"
NO_POD = ""
ALL_OK: dict[str, float] = {OK: 1.0}


def _edges() -> tuple[list[float], list[float]]:
    """Upper and lower bounds of the fine bins (ms); bin ``i`` is ``(lower[i], upper[i]]``."""
    upper: list[float] = []
    lower: list[float] = []
    lo = 0.0
    for hi in (*BUCKETS_MS, 100000.0):
        for j in range(1, SUB_BINS + 1):
            if lo <= 0.0:
                edge = hi * j / SUB_BINS
            else:
                edge = lo * (hi / lo) ** (j / SUB_BINS)
            lower.append(upper[-1] if upper else 0.0)
            upper.append(edge)
        lo = hi
    return upper, lower


BIN_UPPER, BIN_LOWER = _edges()
_log = math.log
LAST_BIN = len(BIN_UPPER) - 1

Entries = tuple[tuple[float, float], ...]  # (latency ms, weight) of a cell's samples


class _Tick(NamedTuple):
    """One tick's samples of one (service, endpoint): sample and error counts (the change
    test), the weight that reached a pod, and per (pod, code) the weight, the count and the
    samples' latencies. Immutable (tuples: once a collection has seen them, the garbage
    collector leaves them alone — a window holds thousands)."""

    tick: int
    n: int
    errors: int
    w: float
    cells: dict[tuple[str, str], tuple[float, int, Entries]]


# _Tick(...) without the generated __new__'s Python frame (a few thousand ticks a minute):
# ``_new_tick(_Tick, (tick, n, errors, w, cells))`` is the same tuple.
_new_tick = tuple.__new__


class _Endpoint:
    """The window of one (namespace, service, endpoint): its ticks, and running totals of
    their samples, errors and weight; while it holds errors, also per (pod, code)."""

    __slots__ = ("ring", "n", "errors", "w", "_sums", "latest", "routing")

    def __init__(self) -> None:
        self.ring: deque[_Tick] = deque()
        self.n = 0
        self.errors = 0
        self.w = 0.0
        self._sums: Optional[dict[tuple[str, str], list[float]]] = None
        self.latest: dict[str, Entries] = {}  # code -> the latencies of its newest samples (any pod)
        self.routing: dict[str, float] = {}  # pod -> its smoothed share of the endpoint's calls

    def clear(self) -> None:
        """Forget the samples (not the routing)."""
        self.ring.clear()
        self.n = self.errors = 0
        self.w = 0.0
        self._sums = None
        self.latest = {}

    def push(self, t: _Tick) -> None:
        self.ring.append(t)
        self.n += t.n
        self.errors += t.errors
        self.w += t.w
        if self._sums is not None:
            _add_cells(self._sums, t, 1.0)
        latest = self.latest
        if len(t.cells) == 1:  # (most ticks: one pod, one code)
            for (_pod, code), cell in t.cells.items():
                latest[code] = cell[2]
            return
        seen: set[str] = set()
        for (_pod, code), (_w, _n, entries) in t.cells.items():
            latest[code] = latest[code] + entries if code in seen else entries
            seen.add(code)

    def _pop_oldest(self) -> None:
        t = self.ring.popleft()
        self.n -= t.n
        self.errors -= t.errors
        self.w -= t.w
        if self._sums is not None:
            if self.errors:
                _add_cells(self._sums, t, -1.0)
            else:
                self._sums = None  # healthy again: nothing is estimated

    def expire(self, tick: int) -> None:
        ring = self.ring
        while ring and ring[0].tick <= tick - WINDOW:
            self._pop_oldest()

    def detect_change(self) -> None:
        """Drop the older ticks when the newest samples' error share is implausible under
        theirs (see the module docstring). Only a newest tick that departs from the older
        share can add evidence, so the test runs only then."""
        ring = self.ring
        newest = ring[-1]
        n_o = self.n - newest.n
        if n_o < CHANGE_MIN_OLDER:
            return
        p_o = (self.errors - newest.errors + 0.5) / (n_o + 1.0)
        if abs(newest.errors / newest.n - p_o) < CHANGE_MIN_SHIFT:
            return
        best, keep = CHANGE_EVIDENCE, 0
        n_r = e_r = 0
        i = 0
        size = len(ring)
        for j in CHANGE_SPLITS:
            if j >= size:
                break
            while i < j:
                t = ring[size - 1 - i]
                n_r += t.n
                e_r += t.errors
                i += 1
            n_o = self.n - n_r
            if n_o < CHANGE_MIN_OLDER:
                break
            p_o = (self.errors - e_r + 0.5) / (n_o + 1.0)
            a = e_r / n_r  # _kl(a, p_o), inline (the same operations)
            kl = 0.0
            if a > 0.0:
                kl += a * _log(a / p_o)
            if a < 1.0:
                kl += (1.0 - a) * _log((1.0 - a) / (1.0 - p_o))
            evidence = n_r * kl
            if evidence > best:
                best, keep = evidence, j
        while keep and len(ring) > keep:
            self._pop_oldest()

    def sums(self) -> dict[tuple[str, str], list[float]]:
        """(pod, code) -> [weight, samples] over the window (kept up to date from here on)."""
        if self._sums is None:
            self._sums = {}
            for t in self.ring:
                _add_cells(self._sums, t, 1.0)
        return self._sums

    def newest(self) -> list[tuple[float, float]]:
        """The latencies of this tick's samples, any pod, any code."""
        out: list[tuple[float, float]] = []
        for c in self.ring[-1].cells.values():
            out.extend(c[2])
        return out


def _add_cells(sums: dict[tuple[str, str], list[float]], t: _Tick, sign: float) -> None:
    for key, (w, n, _entries) in t.cells.items():
        acc = sums.get(key)
        if acc is None:
            sums[key] = [w, float(n)]
        else:
            acc[0] += sign * w
            acc[1] += sign * n
            if acc[1] <= 0:
                del sums[key]


def _kl(a: float, b: float) -> float:
    """Kullback-Leibler divergence of Bernoulli(a) from Bernoulli(b), 0 < b < 1."""
    out = 0.0
    if a > 0.0:
        out += a * math.log(a / b)
    if a < 1.0:
        out += (1.0 - a) * math.log((1.0 - a) / (1.0 - b))
    return out


# -- what a scrape draws ------------------------------------------------------------------------

class CellDraw:
    """One (namespace, service, endpoint, pod) cell's requests in one scrape: ``total``, per
    code, per classic bucket (not cumulative; ``first`` is the lowest with any, ``last`` one
    past the highest) and per fine bin, and their summed latency (seconds). ``pod`` is "" for
    requests that failed before reaching a pod."""

    __slots__ = ("namespace", "service", "endpoint", "pod", "total", "codes", "buckets", "first", "last", "fine",
                 "seconds")

    def __init__(self, namespace: str, service: str, endpoint: str, pod: str, total: int = 0) -> None:
        self.namespace = namespace
        self.service = service
        self.endpoint = endpoint
        self.pod = pod
        self.total = total
        self.codes: dict[str, int] = {}
        self.buckets = [0] * (len(BUCKETS_MS) + 1)
        self.first = len(BUCKETS_MS)
        self.last = 0
        self.fine: dict[int, int] = {}
        self.seconds = 0.0

    def __repr__(self) -> str:
        return (f"CellDraw({self.namespace}/{self.service} {self.endpoint} pod={self.pod!r} "
                f"total={self.total} codes={self.codes})")


Sample = tuple[str, str, str, Any, str, str, float, float]
"""(namespace, service, endpoint, pool, pod, code, latency ms, weight): one handler sample.
``pool`` is the list of containers the call chose its pod from (None before routing)."""

Groups = dict[tuple[str, str, str, str, str, int], list[Any]]
"""A tick's samples as the traffic engine logs them: (namespace, service, endpoint, pod, code,
``id(pool)``) -> [pool, weight, samples, {latency ms: weight}] (a pod serves most calls of a
tick in the same time: few distinct latencies)."""


def log_sample(groups: Groups, ns: str, svc: str, ep: str, pool: Any, pod: str, code: str, ms: float,
               w: float) -> None:
    """Add one sampled call to a tick's log (the traffic engine inlines this on its hot path)."""
    key = (ns, svc, ep, pod, code, id(pool))
    g = groups.get(key)
    if g is None:
        groups[key] = [pool, w, 1, {ms: w}]
    else:
        g[1] += w
        g[2] += 1
        lat = g[3]
        lat[ms] = lat.get(ms, 0.0) + w


def group_samples(samples: Iterable[Sample]) -> Groups:
    groups: Groups = {}
    for ns, svc, ep, pool, pod, code, ms, w in samples:
        log_sample(groups, ns, svc, ep, pool, pod, code, ms, w)
    return groups


class CountModel:
    """The windows of every (service, endpoint) and the draws of each scrape."""

    def __init__(self, callers: Optional[dict[tuple[str, str], Iterable[str]]] = None) -> None:
        self._endpoints: dict[tuple[str, str, str], _Endpoint] = {}
        self._by_service: dict[tuple[str, str], list[_Endpoint]] = {}
        self._tick = 0
        # (namespace, service) -> the services that (transitively) call it, and the pods each
        # service routed to last tick: a change there is a known change point for the callers.
        self._callers = {key: tuple(names) for key, names in (callers or {}).items()}
        self._routed: dict[tuple[str, str], tuple[str, ...]] = {}

    def reset(self) -> None:
        """Forget every window (the routing shares stay): estimates start again from the next
        samples."""
        for window in self._endpoints.values():
            window.clear()

    def draw(self, samples: Groups | Iterable[Sample], rng: random.Random,
             pod_of: Optional[Callable[[Any], str]] = None,
             routable: Optional[dict[tuple[str, str], list[str]]] = None) -> list[CellDraw]:
        """Ingest one tick's samples (a log, or the samples) and draw the tick's counts for
        every cell that had traffic. ``pod_of(container)`` names a pool member's pod (default:
        ``.pod_name``); ``routable`` the pods each service routes to this tick (default: the
        pods its samples reached)."""
        self._tick += 1
        tick = self._tick
        ticks, pods_by_ep = _ingest(tick, samples if isinstance(samples, dict) else group_samples(samples), pod_of)
        endpoints = self._endpoints
        oldest = tick - WINDOW
        for window in endpoints.values():
            ring = window.ring
            if ring and ring[0].tick <= oldest:  # (the test of expire(), without the call)
                window.expire(tick)
        if routable is not None and self._callers:
            self._forget_upstream_of_changes(routable)
        for key, t in ticks.items():
            found = endpoints.get(key)
            if found is None:
                found = endpoints[key] = _Endpoint()
                self._by_service.setdefault(key[:2], []).append(found)
            found.push(t)
            if t.errors or found.errors:
                found.detect_change()
        # The pods serving now: the shares are estimated from their samples alone (a rollout's
        # old pods, gone, take their failures with them: a revert shows at once). Every pod an
        # endpoint's calls could reach is among its service's.
        alive: dict[tuple[str, str], set[str]] = {}
        for (ns, svc, _ep), pods in pods_by_ep.items():
            serving = alive.get((ns, svc))
            if serving is None:
                alive[(ns, svc)] = set(pods)
            else:
                serving.update(pods)
        if routable is not None:
            for service, names in routable.items():
                serving = alive.get(service)
                if serving is None:
                    alive[service] = set(names)
                else:
                    serving.update(names)
        routed: dict[tuple[str, str], list[str]] = {}  # service -> its pods, sorted (the routing's)
        service_shares: dict[tuple[str, str], dict[str, float]] = {}
        out: list[CellDraw] = []
        append = out.append
        for key in sorted(ticks):
            ns, svc, ep = key
            service = (ns, svc)
            window = endpoints[key]
            cells = ticks[key].cells
            serving = alive[service]
            routing = routed.get(service)
            if routing is None:
                routing = routed[service] = sorted(serving - {NO_POD})
            by_pod: dict[str, tuple[dict[str, float], float]] = {}
            if not window.errors:
                endpoint_shares = ALL_OK
            else:
                shares_s = service_shares.get(service)
                if shares_s is None:
                    shares_s = service_shares[service] = self._service_shares(ns, svc, serving)
                endpoint_shares, by_pod = _window_shares(window.sums(), shares_s, serving)
            fallback: dict[str, Sequence[tuple[float, float]]] = {}
            for pod, mean in _route(window, pods_by_ep[key], routing):
                total = poisson(rng, mean)
                if total <= 0:
                    continue
                drawn = CellDraw(ns, svc, ep, pod, total)
                append(drawn)
                if pod == NO_POD:  # failed before routing: what this tick's routing did, nothing else
                    shares = _normalised({code: c[0] for (p, code), c in cells.items() if p == NO_POD})
                elif endpoint_shares is ALL_OK:
                    # The usual cell: every request a 200, at this tick's latencies of the pod,
                    # most often one (_latencies' first case, inline: this runs for most cells).
                    drawn.codes[OK] = total
                    cell = cells.get((pod, OK))
                    entries = cell[2] if cell is not None else _fallback(window, fallback, OK)
                    if len(entries) != 1:
                        _latencies(rng, entries, total, drawn)
                        continue
                    ms = entries[0][0]
                    b = bisect_left(BIN_UPPER, ms)
                    if b > LAST_BIN:
                        b = LAST_BIN
                    bucket = b // SUB_BINS
                    drawn.buckets[bucket] = total
                    drawn.first = bucket
                    drawn.last = bucket + 1
                    drawn.fine[b] = total
                    drawn.seconds = total * ms / 1000.0
                    continue
                else:
                    own = by_pod.get(pod)
                    shares = _shrunk(_normalised(own[0]), own[1], endpoint_shares, K_POD) if own is not None \
                        else endpoint_shares or ALL_OK
                if len(shares) == 1:
                    codes, counts = list(shares), [total]
                else:
                    codes = sorted(shares, key=lambda c: (-shares[c], c))
                    counts = multinomial(rng, total, [shares[c] for c in codes])
                for code, count in zip(codes, counts):
                    if not count:
                        continue
                    drawn.codes[code] = count
                    cell = cells.get((pod, code))
                    if cell is not None:
                        _latencies(rng, cell[2], count, drawn)
                    else:
                        _latencies(rng, _fallback(window, fallback, code), count, drawn)
        return out

    def _forget_upstream_of_changes(self, routable: dict[tuple[str, str], list[str]]) -> None:
        """A service's callers forget the failures they hold once the pods it routes to change.

        A caller's failures mostly originate downstream (a faulty callee, a callee with no
        endpoints). When the callee's pods change — a revert rolled out, a restart, a scale-up,
        a drain — what caused them may be gone, and the caller's own pods, unchanged, would
        otherwise carry the old share until enough clean samples rule it out (tens of minutes
        for an endpoint sampled once a tick). A change in the pods behind a service is a change
        point the twin knows for certain, so the callers' windows restart there: a repair shows
        as soon as it rolls out, and a failure that persists shows again from the next samples.
        The service's own failures need nothing of this: its shares come from the pods serving
        now."""
        routed = {key: tuple(pods) for key, pods in routable.items()}
        previous, self._routed = self._routed, routed
        if not previous:
            return
        for key in previous.keys() | routed.keys():
            before, now = previous.get(key), routed.get(key)
            # The same pods: the same list (nearly every service, every tick), else the same set.
            if before == now or (before is not None and now is not None and frozenset(before) == frozenset(now)):
                continue
            ns = key[0]
            for caller in self._callers.get(key, ()):
                for window in self._by_service.get((ns, caller), ()):
                    if window.errors:
                        window.clear()

    # -- estimates ---------------------------------------------------------------------------
    def _service_shares(self, ns: str, svc: str, serving: set[str]) -> dict[str, float]:
        """The weighted share of each code over the service's endpoints' windows, at the pods
        serving now."""
        acc: dict[str, float] = {}
        for window in self._by_service[(ns, svc)]:
            if not window.errors:
                acc[OK] = acc.get(OK, 0.0) + window.w
                continue
            for (pod, code), (w, _n) in window.sums().items():
                if pod in serving:
                    acc[code] = acc.get(code, 0.0) + w
        return _normalised(acc)


def _ingest(tick: int, groups: Groups, name_of: Optional[Callable[[Any], str]]) -> tuple[
        dict[tuple[str, str, str], _Tick], dict[tuple[str, str, str], dict[str, float]]]:
    """A tick's log per (service, endpoint) and (pod, code), and each pod's expected requests
    per (service, endpoint): a call's weight split evenly over the pods it chose among (the
    Rao-Blackwellised routing). One pass over the log; the sums are taken in the log's order.
    ``name_of(member)`` names a pool member's pod (None: ``str(member.pod_name)``, inline)."""
    # (ns, svc, ep) -> ({(pod, code): [weight, samples, {ms: weight}]}, {id(pool): [pool, weight, pod]})
    per_ep: dict[tuple[str, str, str], tuple[dict[tuple[str, str], list[Any]], dict[int, list[Any]]]] = {}
    for (ns, svc, ep, pod, code, pk), (pool, w, n, lat) in groups.items():
        key = (ns, svc, ep)
        got = per_ep.get(key)
        if got is None:
            got = per_ep[key] = ({}, {})
        merged, volume = got
        v = volume.get(pk)
        if v is None:
            volume[pk] = [pool, w, pod]
        else:
            v[1] += w
        m = merged.get((pod, code))
        if m is None:
            merged[(pod, code)] = [w, n, lat]
        else:
            m[0] += w
            m[1] += n
            into = m[2] = dict(m[2])  # (the log's own dict is not changed)
            for ms, x in lat.items():
                into[ms] = into.get(ms, 0.0) + x
    ticks: dict[tuple[str, str, str], _Tick] = {}
    pods_by_ep: dict[tuple[str, str, str], dict[str, float]] = {}
    pool_names: dict[int, list[str]] = {}  # id(pool) -> its pods (a service's endpoints share pools)
    for key, (merged, volume) in per_ep.items():
        per: dict[tuple[str, str], tuple[float, int, Entries]] = {}
        n_all = errors = 0
        w_pods = 0.0
        for pc, (w, n, lat) in merged.items():
            per[pc] = (w, n, tuple(lat.items()))
            n_all += n
            if pc[1] != OK:
                errors += n
            if pc[0] != NO_POD:
                w_pods += w
        ticks[key] = _new_tick(_Tick, (tick, n_all, errors, w_pods, per))
        pods: dict[str, float] = {}
        for pk, (pool, w, pod) in volume.items():
            if pool is None:
                pods[pod] = pods.get(pod, 0.0) + w
                continue
            share = w / len(pool)
            names = pool_names.get(pk)
            if names is None:
                names = pool_names[pk] = [str(c.pod_name) for c in pool] if name_of is None \
                    else [name_of(c) for c in pool]
            for name in names:
                pods[name] = pods.get(name, 0.0) + share
        pods_by_ep[key] = pods
    return ticks, pods_by_ep


def _route(window: _Endpoint, pods: dict[str, float], names: list[str]) -> list[tuple[str, float]]:
    """This tick's calls split over the pods the service routes to (``names``, sorted) by their
    smoothed shares, as (pod, expected requests) in pod order. One sampled call reaches the
    pods of one zone, the next maybe the other's: the share each pod gets over time
    (:data:`ROUTING_DECAY` a tick; a new pod starts at an even share) stands for how the calls
    spread, so two pods of a one-sample-a-tick service each count about half the calls in
    every scrape. Calls that reached no pod stay as they are (first: "" sorts first)."""
    if NO_POD in pods:
        out = [(NO_POD, pods[NO_POD])]
        total = sum(v for p, v in pods.items() if p != NO_POD)
    else:  # (most: the same additions in the same order, in one C call)
        out = []
        total = sum(pods.values())
    if not names or total <= 0:
        return out
    old = window.routing
    even = 1.0 / len(names)
    prior = [old.get(p, even) for p in names]
    norm = sum(prior)
    routing: dict[str, float] = {}
    get = pods.get
    for p, share in zip(names, prior):
        routing[p] = share = (1.0 - ROUTING_DECAY) * share / norm + ROUTING_DECAY * get(p, 0.0) / total
        out.append((p, total * share))
    window.routing = routing
    return out


def _latencies(rng: random.Random, entries: Sequence[tuple[float, float]], k: int, cell: CellDraw) -> None:
    """Spread ``k`` requests over the samples' latencies, into fine and classic bins."""
    buckets, fine = cell.buckets, cell.fine
    if len(entries) == 1:  # the usual case (a pod serves a tick's calls in the same time): no draw
        ms = entries[0][0]
        b = bisect_left(BIN_UPPER, ms)
        if b > LAST_BIN:
            b = LAST_BIN
        bucket = b // SUB_BINS
        buckets[bucket] += k
        if bucket < cell.first:
            cell.first = bucket
        if bucket >= cell.last:
            cell.last = bucket + 1
        fine[b] = fine.get(b, 0) + k
        cell.seconds += k * ms / 1000.0
        return
    counts = systematic(rng, k, [w for _ms, w in entries])
    ms_total = 0.0
    first, last = cell.first, cell.last
    for (ms, _w), c in zip(entries, counts):
        if c:
            b = bisect_left(BIN_UPPER, ms)
            if b > LAST_BIN:
                b = LAST_BIN
            bucket = b // SUB_BINS
            buckets[bucket] += c
            if bucket < first:
                first = bucket
            if bucket >= last:
                last = bucket + 1
            fine[b] = fine.get(b, 0) + c
            ms_total += c * ms
    cell.first, cell.last = first, last
    cell.seconds += ms_total / 1000.0


def _fallback(window: _Endpoint, memo: dict[str, Sequence[tuple[float, float]]],
              code: str) -> Sequence[tuple[float, float]]:
    """The latencies for a code the pod had no sample of this tick: the newest of that code
    at the endpoint, else this tick's of any code."""
    got = memo.get(code)
    if got is None:
        got = memo[code] = list(window.latest.get(code) or window.newest() or [(0.0, 1.0)])
    return got


def _window_shares(sums: dict[tuple[str, str], list[float]], service: dict[str, float], serving: set[str]
                   ) -> tuple[dict[str, float], dict[str, tuple[dict[str, float], float]]]:
    """An erring window's code shares at the endpoint (its serving pods' weights, shrunk toward
    the service's) and per pod (its weights and samples, to shrink toward the endpoint's)."""
    weights: dict[str, float] = {}
    n = 0.0
    by_pod: dict[str, tuple[dict[str, float], float]] = {}
    for (pod, code), (w, k) in sums.items():
        if pod in serving and pod != NO_POD:
            weights[code] = weights.get(code, 0.0) + w
            n += k
        own = by_pod.get(pod)
        if own is None:
            by_pod[pod] = ({code: w}, k)
        else:
            own[0][code] = w
            by_pod[pod] = (own[0], own[1] + k)
    return _shrunk(_normalised(weights), n, service, K_ENDPOINT), by_pod


def _normalised(weights: dict[str, float]) -> dict[str, float]:
    total = sum(weights.values())
    if total <= 0:
        return {}
    return {k: v / total for k, v in weights.items() if v > 0}


def _shrunk(own: dict[str, float], n: float, prior: dict[str, float], k: float) -> dict[str, float]:
    """``(n * own + k * prior) / (n + k)``; either side alone when the other is empty."""
    if not prior:
        return own or {OK: 1.0}
    if not own or n <= 0:
        return prior
    if own == prior:
        return own
    total = n + k
    out = {c: n * v / total for c, v in own.items()}
    for c, v in prior.items():
        out[c] = out.get(c, 0.0) + k * v / total
    return out


def quantiles(fine: dict[int, float], qs: Sequence[float]) -> list[float]:
    """Quantiles (ms) of requests counted per fine bin, linear within a bin (the fine bins are
    narrow: a quantile is within a few percent of the samples')."""
    total = sum(fine.values())
    if total <= 0:
        return [0.0 for _ in qs]
    order = sorted(fine)
    out: list[float] = []
    for q in qs:
        rank = q * total
        acc = 0.0
        value = BIN_UPPER[order[-1]]
        for b in order:
            c = fine[b]
            if acc + c >= rank:
                lo, hi = BIN_LOWER[b], BIN_UPPER[b]
                value = lo + (hi - lo) * ((rank - acc) / c if c else 1.0)
                break
            acc += c
        out.append(value)
    return out
