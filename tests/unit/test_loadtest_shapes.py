"""Traffic shapes, the review generator and the per-second timeline (pure functions)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from loadtest import corpus
from loadtest.capacity import ASSUMED_ONE, capacity, replica_count, step_results
from loadtest.shapes import ShapeConfig, steps, tick
from loadtest.timeline import BOUNDS_MS, Timeline, quantile_ms


def test_steady_holds_its_users_and_ends_on_time() -> None:
    config = ShapeConfig(shape="steady", base_users=5, duration_s=10)
    assert tick(config, 0) == (5, config.spawn_rate)
    assert tick(config, 9.9) == (5, config.spawn_rate)
    assert tick(config, 10) is None


def test_step_adds_base_users_each_step() -> None:
    config = ShapeConfig(shape="step", base_users=4, step_s=5, steps=3)
    assert [tick(config, t)[0] for t in (0, 4.9, 5, 10, 14.9)] == [4, 4, 8, 12, 12]  # type: ignore[index]
    assert tick(config, 15) is None
    assert [(s.users, s.start_s, s.end_s) for s in steps(config)] == [
        (4, 0, 5),
        (8, 5, 10),
        (12, 10, 15),
    ]


def test_spike_jumps_sharply_then_recovers() -> None:
    config = ShapeConfig(shape="spike", base_users=10, duration_s=30, spike_factor=4)
    before, during, after = tick(config, 5), tick(config, 15), tick(config, 25)
    assert before is not None and during is not None and after is not None
    assert before[0] == after[0] == 10
    assert during[0] == 40
    assert during[1] >= 30  # all 30 extra users within about a second: a spike, not a ramp


def test_soak_runs_for_its_own_length() -> None:
    config = ShapeConfig(shape="soak", base_users=2, soak_s=100)
    assert tick(config, 99) == (2, config.spawn_rate)
    assert tick(config, 100) is None


def test_bad_shape_is_named() -> None:
    with pytest.raises(ValueError, match="shape must be one of"):
        ShapeConfig(shape="tsunami")


def test_generated_reviews_are_repeatable_and_mixed_in_length() -> None:
    texts = corpus.generate(1000, seed=3)
    assert texts == corpus.generate(1000, seed=3)
    words = sorted(len(t.split()) for t in texts)
    assert 15 <= statistics.median(words) <= 45
    assert words[int(0.95 * len(words))] >= 3 * statistics.median(words)  # a long tail
    assert words[0] <= 4  # and titles


def test_corpus_file_is_read_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "texts.txt"
    path.write_text("good\n\n bad \n")
    assert corpus.load(path, 5) == ["good", "bad"]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no texts"):
        corpus.load(empty, 5)


def test_timeline_quantiles_and_worker_merge() -> None:
    worker, master = Timeline(), Timeline()
    for _ in range(99):
        worker.record(1000.2, 10.0, 2, ok=True, rejected=False)
    worker.record(1001.5, 900.0, 1, ok=False, rejected=True)
    master.merge(worker.drain())
    assert worker.seconds == {}  # drained
    total = master.window(0, float("inf"))
    assert (total.requests, total.texts, total.failures, total.rejected) == (100, 198, 1, 1)
    assert 10.0 <= quantile_ms(total.latency, 0.5) <= 10.0 * 1.1
    assert 900.0 <= quantile_ms(total.latency, 1.0) <= 900.0 * 1.1
    assert master.window(1001, 1002).requests == 1
    assert quantile_ms({}, 0.99) == 0.0
    assert sorted(BOUNDS_MS) == BOUNDS_MS


def test_capacity_takes_the_best_step_within_the_slo() -> None:
    timeline = Timeline()
    config = ShapeConfig(shape="step", base_users=1, step_s=10, steps=3)
    start = 5000.0
    # Step 1: 20 texts/s fast; step 2: 40 texts/s fast; step 3: 50 texts/s but slow.
    for second in range(30):
        rate, ms = (20, 50.0) if second < 10 else (40, 80.0) if second < 20 else (50, 900.0)
        for _ in range(rate):
            timeline.record(start + second + 0.5, ms, 1, ok=True, rejected=False)
    results = step_results(timeline, start, steps(config), slo_p99_ms=200, slo_errors=0.01)
    assert [r.meets_slo for r in results] == [True, True, False]
    assert [round(r.texts_per_s) for r in results] == [20, 40, 50]
    plan = capacity(results, replicas=2, peak=200.0, headroom=0.5)
    assert plan.best_texts_per_s == 40
    assert plan.per_replica_texts_per_s == 20
    assert plan.replicas_needed == 20  # 200 / (20 * 0.5)
    assert capacity(results, 1, None, 0.7).replicas_needed is None


def test_the_replica_count_says_where_it_came_from() -> None:
    assert replica_count(3, 2) == (3, "--replicas")
    assert replica_count(0, 2) == (2, "the model replicas' metrics")
    # No count anywhere: per-replica figures are the whole service's, and the summary says so.
    for seen in (None, 0, "2"):
        assert replica_count(0, seen) == (1, ASSUMED_ONE)
