"""Seeded Poisson, binomial and multinomial draws over a :class:`random.Random`.

The twin's scrape turns a few handler samples into the counts of thousands of requests
(:mod:`.counts`); these are the draws it makes. Python 3.11's ``random`` has no binomial, and
numpy is not a dependency, so they are written here: exact algorithms, O(1) expected time for
large means, every uniform taken from the caller's generator (a run's draws follow from its
seed).

* small means (``mean < 10``): inversion, walking the probability mass function from 0 — one
  uniform a draw, about ``mean`` steps;
* large means: transformed rejection with squeeze, W. Hörmann, "The transformed rejection
  method for generating Poisson random variables" (PTRS, Insurance: Mathematics and Economics
  12, 1993) and "The generation of binomial random variates" (BTRS, J. Statist. Comput. Simul.
  46, 1993) — two uniforms a try, about 1.1 tries a draw.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

_lgamma = math.lgamma
_log = math.log
_sqrt = math.sqrt
_exp = math.exp
_floor = math.floor


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson(mean) variate."""
    if mean <= 0.0:
        return 0
    if mean < 10.0:
        u = rng.random()
        k = 0
        p = _exp(-mean)
        cdf = p
        while u > cdf:
            k += 1
            p *= mean / k
            cdf += p
            if p < 1e-300:  # u within rounding of 1: the tail is exhausted
                break
        return k
    return _ptrs(rng, mean)


def _ptrs(rng: random.Random, lam: float) -> int:
    slam = _sqrt(lam)
    loglam = _log(lam)
    b = 0.931 + 2.53 * slam
    a = -0.059 + 0.02483 * b
    inv_alpha = 1.1239 + 1.1328 / (b - 3.4)
    v_r = 0.9277 - 3.6224 / (b - 2.0)
    random_ = rng.random
    while True:
        u = random_() - 0.5
        v = random_()
        us = 0.5 - abs(u)
        k = _floor((2.0 * a / us + b) * u + lam + 0.43)
        if us >= 0.07 and v <= v_r:
            return k
        if k < 0 or (us < 0.013 and v > us):
            continue
        if _log(v * inv_alpha / (a / (us * us) + b)) <= -lam + k * loglam - _lgamma(k + 1.0):
            return k


def binomial(rng: random.Random, n: int, p: float) -> int:
    """A Binomial(n, p) variate."""
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    if p > 0.5:
        return n - binomial(rng, n, 1.0 - p)
    if n * p < 10.0:
        q = 1.0 - p
        s = p / q
        a = (n + 1) * s
        r = q ** n
        u = rng.random()
        k = 0
        while u > r:
            u -= r
            k += 1
            if k > n:  # rounding left u above the whole mass: the last value
                return n
            r *= a / k - s
        return k
    return _btrs(rng, n, p)


def _btrs(rng: random.Random, n: int, p: float) -> int:
    q = 1.0 - p
    spq = _sqrt(n * p * q)
    b = 1.15 + 2.53 * spq
    a = -0.0873 + 0.0248 * b + 0.01 * p
    c = n * p + 0.5
    v_r = 0.92 - 4.2 / b
    alpha = (2.83 + 5.1 / b) * spq
    lpq = _log(p / q)
    m = _floor((n + 1) * p)
    h = _lgamma(m + 1.0) + _lgamma(n - m + 1.0)
    random_ = rng.random
    while True:
        u = random_() - 0.5
        v = random_()
        us = 0.5 - abs(u)
        k = _floor((2.0 * a / us + b) * u + c)
        if k < 0 or k > n:
            continue
        if us >= 0.07 and v <= v_r:
            return k
        v = _log(v * alpha / (a / (us * us) + b))
        if v <= h - _lgamma(k + 1.0) - _lgamma(n - k + 1.0) + (k - m) * lpq:
            return k


def multinomial(rng: random.Random, n: int, weights: Sequence[float]) -> list[int]:
    """Counts of ``n`` draws over categories with these (unnormalised, non-negative) weights,
    by conditional binomials in the given order (put the heaviest first: the rest are cheap)."""
    out = [0] * len(weights)
    if n <= 0:
        return out
    rest = float(sum(weights))
    if rest <= 0.0:
        out[0] = n
        return out
    last = len(weights) - 1
    for i, w in enumerate(weights):
        if i == last or w >= rest:
            out[i] = n
            break
        if w > 0.0:
            x = binomial(rng, n, w / rest)
            out[i] = x
            n -= x
            if n == 0:
                break
        rest -= w
    return out


def systematic(rng: random.Random, n: int, weights: Sequence[float]) -> list[int]:
    """``n`` draws spread over categories by systematic sampling: one uniform offset, then
    every ``1/n`` of the cumulative weights. Each category gets ``n * share`` in expectation
    (rounded up or down), with less spread than :func:`multinomial` and one uniform in all —
    for splits whose sampling noise does not matter (a request's latency bucket)."""
    out = [0] * len(weights)
    total = float(sum(weights))
    if n <= 0 or total <= 0.0:
        if n > 0:
            out[0] = n
        return out
    u = rng.random()
    acc = 0.0
    taken = 0
    scale = n / total
    for i, w in enumerate(weights):
        acc += w * scale
        upto = min(n, int(acc + u))
        out[i] = upto - taken
        taken = upto
    out[-1] += n - taken
    return out
