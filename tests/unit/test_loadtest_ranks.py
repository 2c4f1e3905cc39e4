"""Nearest-rank quantiles: one definition for the Locust timeline, benchmarks and chaos runs."""

from __future__ import annotations

import pytest

from loadtest.httpload import RunResult
from loadtest.outage import Request, figures
from loadtest.ranks import nearest_rank, nearest_rank_value
from loadtest.timeline import BOUNDS_MS, quantile_ms


@pytest.mark.parametrize(
    ("q", "n", "rank"),
    [(0.5, 5, 3), (0.9, 5, 5), (0.99, 1454, 1440), (0.5, 4, 2), (0.0, 3, 1), (1.0, 3, 3)],
)
def test_rank_is_ceil_of_q_times_n(q: float, n: int, rank: int) -> None:
    assert nearest_rank(q, n) == rank


def test_float_noise_does_not_skip_a_rank() -> None:
    assert 0.07 * 100 > 7  # 7.000000000000001
    assert nearest_rank(0.07, 100) == 7


def test_value_of_a_sample() -> None:
    assert nearest_rank_value([5.0, 1.0, 4.0, 2.0, 3.0], 0.5) == 3.0
    assert nearest_rank_value([], 0.5) is None


def test_bench_and_chaos_percentiles_use_nearest_rank() -> None:
    # round(q * n) - 1 gave 2 here: one rank low.
    assert RunResult(latencies=[1.0, 2.0, 3.0, 4.0, 5.0]).percentile(0.5) == 3.0
    assert RunResult().percentile(0.5) == 0.0
    requests = [Request(0.0, float(s), 200) for s in (1, 2, 3, 4, 5)]
    assert figures(requests, kill=10.0, running=[], replicas=1)["p50_latency_s"] == 3.0


def test_timeline_quantile_uses_the_same_rank() -> None:
    # Five samples in buckets 0..4: the p50 is the third.
    assert quantile_ms({i: 1 for i in range(5)}, 0.5) == round(BOUNDS_MS[2], 1)
