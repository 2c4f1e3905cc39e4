"""Warm-up calibration: the line fit, the shapes it runs, and a real tiny model measured."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from service.batchconfig import BatchConfig
from service.batching import plan_micro_batches, round_up
from service.calibration import Calibration, calibrate, fit, graph_shapes, shapes
from service.model import SentimentModel


def test_fit_recovers_a_line() -> None:
    samples = [(t, 0.004 + 2e-6 * t) for t in (8, 64, 512, 4096)]
    fixed, per_token = fit(samples)
    assert fixed == pytest.approx(0.004)
    assert per_token == pytest.approx(2e-6)
    assert Calibration(fixed, per_token, 4).overhead_tokens == 2000
    assert Calibration(fixed, per_token, 4).seconds(1000) == pytest.approx(0.006)


def test_fit_never_goes_negative() -> None:
    # Noise can tilt the line either way; a negative cost would make the planner misbehave.
    fixed, per_token = fit([(8, 0.010), (4096, 0.009)])
    assert per_token == 0.0
    assert fixed == pytest.approx(0.0095)
    assert Calibration(fixed, per_token, 2).overhead_tokens is None  # the default applies
    fixed, per_token = fit([(8, 0.0), (4096, 0.5)])
    assert fixed >= 0.0


def test_fit_needs_two_token_counts() -> None:
    with pytest.raises(ValueError):
        fit([(64, 0.1)])
    with pytest.raises(ValueError):
        fit([(64, 0.1), (64, 0.2)])


def test_shapes_cover_every_bucket_once_at_one_row_and_a_full_micro_batch() -> None:
    assert shapes(32, 256) == [(8, 1), (8, 32), (16, 1), (16, 16), (32, 1), (32, 8)]
    # The last bucket is the maximum length itself, even when it is not a power of two.
    assert shapes(40, 80)[-2:] == [(40, 1), (40, 2)]


def test_calibrating_a_real_model(tiny_model_dir: Path) -> None:
    model = SentimentModel.load(tiny_model_dir, device="cpu", max_length=64)
    found = calibrate(model, micro_batch_tokens=512)
    assert found.shapes == len(shapes(64, 512))
    # The figures depend on the machine; only their sense is fixed.
    assert found.fixed_s >= 0.0 and found.per_token_s >= 0.0
    assert found.overhead_tokens is None or found.overhead_tokens >= 0


def test_configured_overhead_wins_over_the_measured_one() -> None:
    assert BatchConfig().overhead_for("cpu", measured=700) == 700
    assert BatchConfig(forward_overhead_tokens=50).overhead_for("cpu", measured=700) == 50
    assert BatchConfig().overhead_for("cuda") == 2048  # nothing measured: the default


def test_a_backend_that_cuts_its_own_runs_gets_forwards_filled_to_the_budget() -> None:
    config = BatchConfig(micro_batch_tokens=2048)
    assert config.overhead_for("cpu", measured=30, cuts_runs=True) == 2048
    assert config.overhead_for("cpu", measured=30) == 30
    configured = BatchConfig(forward_overhead_tokens=50)
    assert configured.overhead_for("cpu", measured=30, cuts_runs=True) == 50
    # 64 texts of mixed lengths: as measured, the planner cuts them by length; filled, the
    # fewest forwards the budget allows.
    lengths = [10 + (i * 37) % 120 for i in range(64)]
    as_measured = plan_micro_batches(lengths, 2048, 30)
    filled = plan_micro_batches(lengths, 2048, config.overhead_for("cpu", 30, cuts_runs=True))
    assert len(filled) < len(as_measured)
    assert len(filled) == len(plan_micro_batches(lengths, 2048, 10**9))


def test_a_one_row_micro_batch_leaves_the_default_in_force(tiny_model_dir: Path) -> None:
    # max length = micro-batch budget: every shape has one row, so there is no line to fit.
    model = SentimentModel.load(tiny_model_dir, device="cpu", max_length=8)
    found = calibrate(model, micro_batch_tokens=8)
    assert found.overhead_tokens is None
    assert BatchConfig().overhead_for("cpu", found.overhead_tokens) == 192


class _GraphModel:
    """A stand-in for a model that records CUDA graphs: counts the shapes it is run with."""

    max_length = 40
    records_graphs = True

    def __init__(self) -> None:
        self.runs: list[tuple[int, int]] = []

    def encode(self, texts: list[str]) -> list[Any]:
        return [SimpleNamespace(ids=[101, 7, 102])]

    def predict(self, batch: list[list[int]]) -> None:
        self.runs.append((round_up(max(map(len, batch))), len(batch)))


def test_a_model_that_records_graphs_runs_every_shape_twice_in_the_warm_up() -> None:
    model = _GraphModel()
    found = calibrate(model, micro_batch_tokens=96)  # type: ignore[arg-type]
    every = graph_shapes(40, 96)
    # Each width a multiple of 8, each row count a bucket, up to the bucket of a full
    # micro-batch (96 // 24 = 4 rows; 96 // 16 = 6; 96 // 40 = 2).
    assert [rows for width, rows in every if width == 8] == [1, 2, 3, 4, 6, 8, 12]
    assert [rows for width, rows in every if width == 16] == [1, 2, 3, 4, 6]
    assert [rows for width, rows in every if width == 24] == [1, 2, 3, 4]
    assert [rows for width, rows in every if width == 40] == [1, 2]
    assert {w for w, _ in every} == {8, 16, 24, 32, 40}
    assert all(model.runs.count(shape) >= 2 for shape in every)
    assert found.shapes == len(shapes(40, 96)) + len(every)
