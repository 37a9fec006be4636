"""The draws behind a scrape's counts (twin/draws.py) and the count model that turns a tick's
handler samples into the requests they stand for (twin/counts.py), on synthetic samples."""

from __future__ import annotations

import random
import statistics
from types import SimpleNamespace

import pytest

from pytest_sremarathon.twin.counts import BIN_LOWER, BIN_UPPER, SUB_BINS, CountModel, quantiles
from pytest_sremarathon.twin.draws import binomial, multinomial, poisson, systematic


@pytest.mark.parametrize("mean", [0.3, 4.5, 9.9, 10.0, 55.0, 1800.0])
def test_poisson_draws_have_the_mean_and_variance_of_a_poisson(mean: float) -> None:
    rng = random.Random(7)
    xs = [poisson(rng, mean) for _ in range(20000)]
    se = (mean / len(xs)) ** 0.5
    assert abs(statistics.fmean(xs) - mean) < 5 * se
    assert abs(statistics.pvariance(xs) / mean - 1) < 0.06
    assert min(xs) >= 0


@pytest.mark.parametrize("n, p", [(5, 0.3), (51, 0.75), (55, 0.02), (40, 0.5), (1000, 0.3), (200, 0.97)])
def test_binomial_draws_have_the_mean_and_variance_of_a_binomial(n: int, p: float) -> None:
    rng = random.Random(11)
    xs = [binomial(rng, n, p) for _ in range(20000)]
    var = n * p * (1 - p)
    assert abs(statistics.fmean(xs) - n * p) < 5 * (var / len(xs)) ** 0.5
    assert abs(statistics.pvariance(xs) / var - 1) < 0.06
    assert 0 <= min(xs) and max(xs) <= n


def test_draws_are_the_seeds_and_edge_cases_are_exact() -> None:
    a, b = random.Random(3), random.Random(3)
    assert [poisson(a, 40.0) for _ in range(50)] == [poisson(b, 40.0) for _ in range(50)]
    rng = random.Random(1)
    assert poisson(rng, 0.0) == 0 and binomial(rng, 0, 0.5) == 0
    assert binomial(rng, 9, 0.0) == 0 and binomial(rng, 9, 1.0) == 9
    counts = multinomial(rng, 100, [0.5, 0.3, 0.2, 0.0])
    assert sum(counts) == 100 and counts[3] == 0


def test_systematic_spreads_counts_at_their_expected_shares() -> None:
    rng = random.Random(5)
    totals = [0, 0, 0, 0]
    for _ in range(4000):
        out = systematic(rng, 7, [0.5, 0.2, 0.2, 0.1])
        assert sum(out) == 7 and min(out) >= 0
        assert all(abs(o - 7 * w) < 1 for o, w in zip(out, [0.5, 0.2, 0.2, 0.1]))  # rounded up or down
        totals = [t + o for t, o in zip(totals, out)]
    assert [round(t / 4000, 1) for t in totals] == [3.5, 1.4, 1.4, 0.7]


# -- the count model ------------------------------------------------------------------------------

PODS = [SimpleNamespace(pod_name="checkout-a"), SimpleNamespace(pod_name="checkout-b")]


def _tick(rng: random.Random, failing: float, weight: float = 55.0, latency: float = 30.0) -> list:
    """One sampled call a tick to checkout (two ready pods), failing with probability ``failing``."""
    pod = rng.choice(PODS)
    code = "500" if rng.random() < failing else "200"
    return [("shop", "checkout", "place_order", PODS, pod.pod_name, code, latency, weight)]


def _ratio(cells: list) -> tuple[int, float]:
    total = sum(c.total for c in cells)
    errors = sum(c.total - c.codes.get("200", 0) for c in cells)
    return total, errors / total


def test_one_sample_a_tick_reads_its_failure_share_in_every_scrape() -> None:
    rng, draws, model = random.Random(1), random.Random(2), CountModel()
    ratios, totals = [], []
    for t in range(240):
        cells = model.draw(_tick(rng, 0.75), draws)
        if t >= 60:  # the window has filled
            total, ratio = _ratio(cells)
            totals.append(total)
            ratios.append(ratio)
    # Binomial noise of ~55 requests (sd 0.058) plus the estimate's from 60 one-a-tick samples (0.056)
    assert all(abs(r - 0.75) < 0.3 for r in ratios)
    assert abs(statistics.fmean(ratios) - 0.75) < 0.05
    assert abs(statistics.fmean(totals) - 55) < 2 and min(totals) > 25


def test_the_two_pods_share_the_traffic_in_every_scrape() -> None:
    """The sampled call picks one pod; the counts split it over both (it could have gone to
    either), each near half, not all-or-nothing."""
    rng, draws, model = random.Random(4), random.Random(5), CountModel()
    shares = []
    for _ in range(100):
        cells = model.draw(_tick(rng, 0.0, weight=400.0), draws)
        by_pod = {c.pod: c.total for c in cells}
        assert set(by_pod) == {"checkout-a", "checkout-b"}
        shares.append(by_pod["checkout-a"] / sum(by_pod.values()))
    assert all(0.35 < s < 0.65 for s in shares)


def test_a_fault_shows_within_ticks_and_a_repair_within_minutes() -> None:
    rng, draws, model = random.Random(8), random.Random(9), CountModel()
    for _ in range(60):
        model.draw(_tick(rng, 0.0), draws)
    seen = [_ratio(model.draw(_tick(rng, 1.0), draws))[1] for _ in range(4)]
    assert seen[-1] > 0.9, seen  # the window restarted at the change
    for _ in range(30):
        model.draw(_tick(rng, 1.0), draws)
    after = [_ratio(model.draw(_tick(rng, 0.0), draws))[1] for _ in range(12)]
    assert after[-1] < 0.05, after  # ... and again at the repair, not 30 minutes later


CALLERS = {("shop", "payment"): ["checkout"]}


def _routable(payment_pods: list[str]) -> dict[tuple[str, str], list[str]]:
    return {("shop", "checkout"): [p.pod_name for p in PODS], ("shop", "payment"): payment_pods}


def test_a_caller_forgets_a_callee_caused_share_once_the_callee_s_pods_change() -> None:
    """checkout fails 30% of its calls because payment does; a revert of payment rolls out new
    pods, and checkout's failures stop. A caller sampled once a tick would need tens of minutes
    of clean samples to rule a 30% share out; the change of the pods behind payment is a change
    point the twin knows, so the next scrapes read the repair."""
    rng, draws, model = random.Random(12), random.Random(13), CountModel(callers=CALLERS)
    for _ in range(60):
        model.draw(_tick(rng, 0.3), draws, routable=_routable(["payment-old"]))
    model.draw(_tick(rng, 0.0), draws, routable=_routable(["payment-new"]))  # the revert rolled out
    after = [_ratio(model.draw(_tick(rng, 0.0), draws, routable=_routable(["payment-new"])))[1] for _ in range(4)]
    assert max(after) == 0.0, after


def test_restarting_the_callee_without_repairing_it_does_not_hide_the_callers_failures() -> None:
    """The adversary's move: restart payment (its pods change) while the fault stays. checkout
    forgets what it held, and its share comes back from the next samples: a restart buys a scrape
    or two, not a quiet dashboard."""
    rng, draws, model = random.Random(14), random.Random(15), CountModel(callers=CALLERS)
    for _ in range(60):
        model.draw(_tick(rng, 0.3), draws, routable=_routable(["payment-old"]))
    ratios = [_ratio(model.draw(_tick(rng, 0.3), draws, routable=_routable(["payment-restarted"])))[1]
              for _ in range(40)]
    assert statistics.fmean(ratios[10:]) > 0.15, ratios
    assert sum(r > 0.05 for r in ratios[5:]) >= 25, ratios


def test_calls_that_reach_no_pod_count_without_one_and_latencies_land_in_their_buckets() -> None:
    draws, model = random.Random(3), CountModel()
    samples = [("shop", "cart", "get_cart", None, "", "503", 0.0, 30.0),
               ("shop", "cart", "add_item", PODS, "checkout-a", "200", 42.0, 30.0),
               ("shop", "cart", "add_item", PODS, "checkout-b", "200", 420.0, 30.0)]
    cells = {(c.endpoint, c.pod): c for c in model.draw(samples, draws)}
    none = cells[("get_cart", "")]
    assert set(none.codes) == {"503"} and none.buckets[0] == none.total
    for pod in ("checkout-a", "checkout-b"):
        cell = cells[("add_item", pod)]
        assert sum(cell.buckets) == sum(cell.fine.values()) == cell.total
        for b, n in cell.fine.items():  # each request at 42 or 420 ms, as sampled
            assert BIN_LOWER[b] < 42.0 <= BIN_UPPER[b] or BIN_LOWER[b] < 420.0 <= BIN_UPPER[b]
            assert cell.buckets[b // SUB_BINS] >= n
        assert cell.seconds == pytest.approx(sum(n * (0.042 if BIN_UPPER[b] < 100 else 0.42)
                                                 for b, n in cell.fine.items()))


def test_quantiles_interpolate_within_narrow_bins() -> None:
    fine = {b: 1.0 for b in range(len(BIN_UPPER)) if 20.0 < BIN_UPPER[b] <= 200.0}
    p50, p99 = quantiles(fine, (0.5, 0.99))
    assert 50 < p50 < 80 and 180 < p99 <= 200.0
    one = {next(b for b in range(len(BIN_UPPER)) if BIN_LOWER[b] < 30.0 <= BIN_UPPER[b]): 55.0}
    assert all(abs(q - 30.0) / 30.0 < 0.1 for q in quantiles(one, (0.5, 0.99)))


def test_the_same_samples_and_seed_give_the_same_counts() -> None:
    def run() -> list:
        rng, draws, model = random.Random(1), random.Random(2), CountModel()
        return [(c.pod, c.total, sorted(c.codes.items()), c.buckets) for _ in range(50)
                for c in model.draw(_tick(rng, 0.4), draws)]

    assert run() == run()
