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
   fault reads its steady share.
3. **Which latencies.** For each code, the requests are spread over fine latency bins (each
   classic ``le`` bucket split in :data:`SUB_BINS`) as the samples of that cell and code over
   the last :data:`LATENCY_TICKS` ticks fell (falling back to the endpoint's, then to the
   whole window), by systematic sampling (one uniform: each bin gets its expected share,
   rounded up or down); the ``_sum`` adds each bin's count times its samples' mean latency.

Every draw takes its uniforms from the tick's generator (seeded by the run's seed and the
tick), so a run's counts follow from its seed and its events. Service-level numbers (the
``MetricStore`` the alert rules read) are sums of the same draws.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Optional

from .draws import multinomial, poisson, systematic

#: Upper bounds (milliseconds) of the classic histogram buckets: runtime/metrics.py's BUCKETS.
BUCKETS_MS = (1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0)
SUB_BINS = 8  # fine bins per classic bucket (log-spaced; linear in the first)
WINDOW = 60  # ticks of samples the outcome shares are estimated over, at most (30 min at 30 s)
LATENCY_TICKS = 4  # ticks of samples the latency distribution is drawn from (2 min)
K_POD = 2.0  # pseudo-samples shrinking a pod's shares toward its endpoint's
K_ENDPOINT = 2.0  # ... and an endpoint's toward its service's
CHANGE_EVIDENCE = 12.0  # n * KL(recent || older) beyond which the older samples are dropped
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
INF_BINS_FROM = len(BUCKETS_MS) * SUB_BINS  # fine bins past the last finite bucket (le="+Inf")
LAST_BIN = len(BIN_UPPER) - 1


def fine_bin(ms: float) -> int:
    i = bisect_left(BIN_UPPER, ms)
    return i if i <= LAST_BIN else LAST_BIN


def bucket_of(fine: int) -> int:
    """Index of the classic bucket a fine bin belongs to (``len(BUCKETS_MS)`` for +Inf)."""
    return fine // SUB_BINS


# -- the samples of a tick ----------------------------------------------------------------------

Bins = tuple[tuple[int, float, float], ...]  # (fine bin, weight, weight * ms), by bin


class _Tick(NamedTuple):
    """One tick's samples of one (service, endpoint): sample and error counts (the change
    test), the weight that reached a pod, and per (pod, code) the weight, the count and the
    fine bins. Immutable (tuples: once a collection has seen them, the garbage collector
    leaves them alone — a window holds thousands)."""

    tick: int
    n: int
    errors: int
    w: float
    cells: dict[tuple[str, str], tuple[float, int, Bins]]


class _Endpoint:
    """The window of one (namespace, service, endpoint): its ticks, and running totals of
    their samples, errors and weight. While the window holds no error (nearly always), every
    pod's share is all 200s and nothing else is summed."""

    __slots__ = ("ring", "n", "errors", "w")

    def __init__(self) -> None:
        self.ring: deque[_Tick] = deque()
        self.n = 0
        self.errors = 0
        self.w = 0.0

    def push(self, t: _Tick) -> None:
        self.ring.append(t)
        self.n += t.n
        self.errors += t.errors
        self.w += t.w

    def _pop_oldest(self) -> None:
        t = self.ring.popleft()
        self.n -= t.n
        self.errors -= t.errors
        self.w -= t.w

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
            evidence = n_r * _kl(e_r / n_r, p_o)
            if evidence > best:
                best, keep = evidence, j
        while keep and len(ring) > keep:
            self._pop_oldest()

    def sums(self) -> dict[tuple[str, str], list[float]]:
        """(pod, code) -> [weight, samples] over the window."""
        out: dict[tuple[str, str], list[float]] = {}
        for t in self.ring:
            for key, (w, n, _bins) in t.cells.items():
                acc = out.get(key)
                if acc is None:
                    out[key] = [w, float(n)]
                else:
                    acc[0] += w
                    acc[1] += n
        return out

    def bins(self, tick: int, pod: Optional[str], code: Optional[str],
             ticks: int = LATENCY_TICKS) -> list[tuple[int, float, float]]:
        """The fine bins (bin, weight, weight * ms) of the samples of ``pod`` (None: any) with
        ``code`` (None: any) over the last ``ticks`` ticks (0: the whole window), newest first."""
        out: list[tuple[int, float, float]] = []
        for t in reversed(self.ring):
            if ticks and t.tick <= tick - ticks:
                break
            if pod is not None and code is not None:
                cell = t.cells.get((pod, code))
                if cell is not None:
                    out.extend(cell[2])
                continue
            for (p, k), c in t.cells.items():
                if (pod is None or p == pod) and (code is None or k == code):
                    out.extend(c[2])
        return out


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
    code, per classic bucket (not cumulative) and per fine bin, and their summed latency.
    ``pod`` is "" for requests that failed before reaching a pod."""

    __slots__ = ("namespace", "service", "endpoint", "pod", "total", "codes", "buckets", "fine", "seconds")

    def __init__(self, namespace: str, service: str, endpoint: str, pod: str, total: int = 0) -> None:
        self.namespace = namespace
        self.service = service
        self.endpoint = endpoint
        self.pod = pod
        self.total = total
        self.codes: dict[str, int] = {}
        self.buckets = [0] * (len(BUCKETS_MS) + 1)
        self.fine: dict[int, int] = {}
        self.seconds = 0.0

    def __repr__(self) -> str:
        return (f"CellDraw({self.namespace}/{self.service} {self.endpoint} pod={self.pod!r} "
                f"total={self.total} codes={self.codes})")


Sample = tuple[str, str, str, Any, str, str, float, float]
"""(namespace, service, endpoint, pool, pod, code, latency ms, weight): one handler sample.
``pool`` is the list of containers the call chose its pod from (None before routing)."""


class CountModel:
    """The windows of every (service, endpoint) and the draws of each scrape."""

    def __init__(self) -> None:
        self._endpoints: dict[tuple[str, str, str], _Endpoint] = {}
        self._by_service: dict[tuple[str, str], list[_Endpoint]] = {}
        self._tick = 0

    def draw(self, samples: Iterable[Sample], rng: random.Random,
             pod_of: Any = None) -> list[CellDraw]:
        """Ingest one tick's samples and draw the tick's counts for every cell that had
        traffic. ``pod_of(container)`` names a pool member's pod (default: ``.pod_name``)."""
        self._tick += 1
        tick = self._tick
        agg: dict[tuple[str, str, str, str, str, int], list[float]] = {}
        volume: dict[tuple[str, str, str, int], list[Any]] = {}  # -> [pool, weight, pod]
        for ns, svc, ep, pool, pod, code, ms, w in samples:
            b = bisect_left(BIN_UPPER, ms)
            k = (ns, svc, ep, pod, code, b if b <= LAST_BIN else LAST_BIN)
            a = agg.get(k)
            if a is None:
                agg[k] = [w, w * ms, 1.0]
            else:
                a[0] += w
                a[1] += w * ms
                a[2] += 1.0
            vk = (ns, svc, ep, id(pool))
            v = volume.get(vk)
            if v is None:
                volume[vk] = [pool, w, pod]
            else:
                v[1] += w
        per_ep: dict[tuple[str, str, str], dict[tuple[str, str], list[Any]]] = {}
        for (ns, svc, ep, pod, code, b), (w, wl, n) in agg.items():  # (sorted by bin within a cell below)
            cells = per_ep.get((ns, svc, ep))
            if cells is None:
                cells = per_ep[(ns, svc, ep)] = {}
            cell = cells.get((pod, code))
            if cell is None:
                cells[(pod, code)] = [w, n, [(b, w, wl)]]
            else:
                cell[0] += w
                cell[1] += n
                cell[2].append((b, w, wl))
        ticks: dict[tuple[str, str, str], _Tick] = {}
        for key, cells in per_ep.items():
            n_all = errors = 0
            w_pods = 0.0
            frozen: dict[tuple[str, str], tuple[float, int, Bins]] = {}
            for (pod, code), (w, n, bins) in cells.items():
                k = int(n)
                n_all += k
                if code != OK:
                    errors += k
                if pod != NO_POD:
                    w_pods += w
                frozen[(pod, code)] = (w, k, tuple(sorted(bins)))
            ticks[key] = _Tick(tick, n_all, errors, w_pods, frozen)
        for window in self._endpoints.values():
            window.expire(tick)
        for key, t in ticks.items():
            window = self._endpoints.get(key)
            if window is None:
                window = self._endpoints[key] = _Endpoint()
                self._by_service.setdefault(key[:2], []).append(window)
            window.push(t)
            if t.errors or window.errors:
                window.detect_change()
        pods_by_ep: dict[tuple[str, str, str], dict[str, float]] = {}
        name_of = pod_of or _pod_name
        for (ns, svc, ep, _pk), (pool, w, pod) in volume.items():
            pods = pods_by_ep.get((ns, svc, ep))
            if pods is None:
                pods = pods_by_ep[(ns, svc, ep)] = {}
            if pool is None:
                pods[pod] = pods.get(pod, 0.0) + w
                continue
            share = w / len(pool)
            for c in pool:
                name = name_of(c)
                pods[name] = pods.get(name, 0.0) + share
        service_shares: dict[tuple[str, str], dict[str, float]] = {}
        sums: dict[int, dict[tuple[str, str], list[float]]] = {}
        out: list[CellDraw] = []
        for key in sorted(ticks):
            ns, svc, ep = key
            window = self._endpoints[key]
            if not window.errors:
                endpoint_shares = ALL_OK
                own_sums: dict[tuple[str, str], list[float]] = {}
            else:
                shares_s = service_shares.get((ns, svc))
                if shares_s is None:
                    shares_s = service_shares[(ns, svc)] = self._service_shares(ns, svc, sums)
                own_sums = self._sums(window, sums)
                endpoint_shares = _endpoint_shares(own_sums, shares_s)
            pods = pods_by_ep[key]
            latency_cache: dict[tuple[Optional[str], str], list[tuple[int, float, float]]] = {}
            for pod in sorted(pods):
                n = poisson(rng, pods[pod])
                if n <= 0:
                    continue
                cell = CellDraw(ns, svc, ep, pod, total=n)
                if pod == NO_POD:  # failed before routing: what this tick's routing did, nothing else
                    shares = _normalised({code: c[0] for (p, code), c in ticks[key].cells.items() if p == NO_POD})
                elif endpoint_shares is ALL_OK:
                    shares = ALL_OK
                else:
                    shares = _pod_shares(own_sums, pod, endpoint_shares)
                if len(shares) == 1:
                    codes, counts = list(shares), [n]
                else:
                    codes = sorted(shares, key=lambda c: (-shares[c], c))
                    counts = multinomial(rng, n, [shares[c] for c in codes])
                for code, k in zip(codes, counts):
                    if k:
                        cell.codes[code] = k
                        _latencies(rng, window, tick, pod, code, k, cell, latency_cache)
                out.append(cell)
        return out

    # -- estimates ---------------------------------------------------------------------------
    @staticmethod
    def _sums(window: _Endpoint, cache: dict[int, dict[tuple[str, str], list[float]]]) -> dict[tuple[str, str], list[float]]:
        got = cache.get(id(window))
        if got is None:
            got = cache[id(window)] = window.sums()
        return got

    def _service_shares(self, ns: str, svc: str, cache: dict[int, dict[tuple[str, str], list[float]]]) -> dict[str, float]:
        """The weighted share of each code over the service's endpoints' windows."""
        acc: dict[str, float] = {}
        for window in self._by_service[(ns, svc)]:
            if not window.errors:
                acc[OK] = acc.get(OK, 0.0) + window.w
                continue
            for (pod, code), (w, _n) in self._sums(window, cache).items():
                if pod != NO_POD:
                    acc[code] = acc.get(code, 0.0) + w
        return _normalised(acc)


def _endpoint_shares(sums: dict[tuple[str, str], list[float]], service: dict[str, float]) -> dict[str, float]:
    weights: dict[str, float] = {}
    n = 0.0
    for (pod, code), (w, k) in sums.items():
        if pod != NO_POD:
            weights[code] = weights.get(code, 0.0) + w
            n += k
    return _shrunk(_normalised(weights), n, service, K_ENDPOINT)


def _pod_shares(sums: dict[tuple[str, str], list[float]], pod: str, endpoint: dict[str, float]) -> dict[str, float]:
    weights: dict[str, float] = {}
    n = 0.0
    for (p, code), (w, k) in sums.items():
        if p == pod:
            weights[code] = w
            n += k
    return _shrunk(_normalised(weights), n, endpoint, K_POD)


_DEFAULT_BINS = [(0, 1.0, 0.0)]


def _latencies(rng: random.Random, window: _Endpoint, tick: int, pod: str, code: str, k: int, cell: CellDraw,
               cache: dict[tuple[Optional[str], str], list[tuple[int, float, float]]]) -> None:
    """Spread ``k`` requests of ``pod`` and ``code`` over fine bins as the recent samples of
    that pod and code fell; else of that code at any pod; else of that code over the whole
    window; else of any code recently."""
    bins = window.bins(tick, pod, code)
    if not bins:
        got = cache.get((None, code))
        if got is None:
            got = cache[(None, code)] = (window.bins(tick, None, code) or window.bins(tick, None, code, 0)
                                         or window.bins(tick, None, None) or _DEFAULT_BINS)
        bins = got
    counts = systematic(rng, k, [w for _b, w, _wl in bins]) if len(bins) > 1 else [k]
    buckets, fine = cell.buckets, cell.fine
    ms = 0.0
    for (b, w, wl), c in zip(bins, counts):
        if c:
            buckets[b // SUB_BINS] += c
            fine[b] = fine.get(b, 0) + c
            ms += c * (wl / w if w > 0 else BIN_UPPER[b])
    cell.seconds += ms / 1000.0


def _pod_name(c: Any) -> str:
    return str(c.pod_name)


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
