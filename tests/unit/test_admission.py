"""Admission by rows and by time: the pace it learns and the 429 it gives a request that
would only wait out its deadline."""

from __future__ import annotations

import math

import pytest

from service.admission import TIME_SHARE, Admission, Pace
from service.errors import Behind, Overloaded


def test_the_pace_starts_from_the_models_estimate_until_a_call_is_timed() -> None:
    pace = Pace(weight=0.5)
    assert pace.seconds(100) is None  # nothing known: no prediction
    pace.seed(1000.0)
    assert pace.seconds(500) == pytest.approx(0.5)
    pace.observe(200, 1.0)  # the first timed call replaces the estimate
    assert pace.tokens_per_s == pytest.approx(200.0)
    pace.seed(1000.0)  # a later readiness check does not undo the measurement
    assert pace.tokens_per_s == pytest.approx(200.0)
    pace.observe(400, 1.0)
    assert pace.tokens_per_s == pytest.approx(300.0)  # a running mean, half the newest
    pace.observe(0, 1.0)
    pace.observe(100, 0.0)
    assert pace.tokens_per_s == pytest.approx(300.0)  # nothing to learn from those


def test_a_small_call_answered_with_a_big_one_does_not_drag_the_pace() -> None:
    # The model replica batches calls together: a call of 10 tokens answered 0.05 s after
    # one of 1,000 (0.5 s) shares its time. Both together ran 1,010 tokens in 0.55 s.
    pace = Pace(weight=0.3)
    for _ in range(20):
        pace.observe(1000, 0.5)
        pace.observe(10, 0.05)
    assert pace.tokens_per_s is not None
    # Ratio of sums, not a mean of rates (2,000 and 200 a second: ~1,100-1,500 as they come).
    assert 1700 < pace.tokens_per_s < 2000


def test_a_request_that_would_wait_out_its_deadline_gets_429_now() -> None:
    admission = Admission(limit=100, retry_after_s=2)
    admission.pace.observe(100, 1.0)  # 100 tokens a second
    with admission.hold(1) as first:
        first.resize(1, 500, 10.0)  # nothing ahead of it: admitted
        with admission.hold(1) as second:
            second.resize(1, 200, 10.0)  # 700 tokens are 7 s, within TIME_SHARE of 10 s
            assert TIME_SHARE * 10.0 >= 7.0
            assert admission.pending_tokens == 700
        with admission.hold(1) as third, pytest.raises(Behind) as late:
            assert TIME_SHARE * 8.0 < 7.0
            third.resize(1, 200, 8.0)  # 7 s needed
        assert admission.pending == 1 and admission.pending_tokens == 500
    assert admission.pending == 0 and admission.pending_tokens == 0
    error = late.value
    assert isinstance(error, Overloaded) and error.status == 429
    assert error.reason == "behind" and error.headers == {"Retry-After": "2"}  # at least 2
    assert "7.0s" in error.message and "8.0s left" in error.message


def test_retry_after_says_when_the_work_ahead_would_have_shrunk_enough() -> None:
    admission = Admission(limit=100, retry_after_s=1)
    admission.pace.observe(100, 1.0)
    with admission.hold(1) as first:
        first.resize(1, 2_000, 30.0)  # 20 s of work
        with pytest.raises(Behind) as late, admission.hold(1) as second:
            second.resize(1, 100, 10.0)  # 21 s needed, 8 s allowed
    assert late.value.headers == {"Retry-After": str(math.ceil(21.0 - TIME_SHARE * 10.0))}


def test_a_request_alone_is_admitted_however_slow_the_pace() -> None:
    admission = Admission(limit=100, retry_after_s=1)
    admission.pace.observe(1, 10.0)
    with admission.hold(3) as held:
        held.resize(3, 10_000, 1.0)  # nothing ahead: it gets its chance
        assert admission.pending_tokens == 10_000


def test_without_a_pace_only_the_row_bound_refuses() -> None:
    admission = Admission(limit=4, retry_after_s=1)
    with admission.hold(2) as held:
        held.resize(2, 10**9, 0.001)
        with admission.hold(2) as other:
            other.resize(2, 10**9, 0.001)
            with pytest.raises(Overloaded) as full, admission.hold(1):
                pass
    assert full.value.reason == "overloaded"  # the row bound


def test_work_ahead_that_alone_outlasts_the_time_left_refuses_before_tokenizing() -> None:
    admission = Admission(limit=100, retry_after_s=1)
    admission.pace.observe(100, 1.0)
    with admission.hold(1) as first:
        first.resize(1, 1_000, 30.0)  # 10 s of work
        with pytest.raises(Behind), admission.hold(1, time_left_s=10.0):
            pass  # 8 s allowed: refused before its own tokens are known
        with admission.hold(1, time_left_s=20.0) as second:
            assert admission.pending == 2 and admission.pending_tokens == 1_000
            second.resize(1, 100, 20.0)
    assert admission.pending == 0 and admission.pending_tokens == 0
