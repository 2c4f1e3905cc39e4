"""The training throughput measurement runs the real loop and reports consistent figures."""

from __future__ import annotations

from pathlib import Path

from training.throughput import ThroughputSpec, load_model, measure, synthetic_rows


def test_synthetic_rows_have_the_asked_length_and_both_labels() -> None:
    ds = synthetic_rows(40, 16, 400, seed=1)
    assert len(ds) == 40
    assert {len(ids) for ids in ds.ids} == {16}
    assert all(0 < i < 400 for ids in ds.ids for i in ids)
    assert set(ds.labels) == {0, 1}


def test_measure_times_the_training_loop(tiny_model_dir: Path) -> None:
    spec = ThroughputSpec(steps=2, warmup_steps=1, batch_size=2, grad_accum=2, seq_len=8)
    result = measure(load_model(tiny_model_dir), spec)
    assert result is not None
    assert result["samples"] == 2 * 2 * 2
    assert result["samples_per_s"] > 0 and result["seconds"] > 0
    assert result["world_size"] == 1 and result["amp_dtype"] == "off"
    assert result["device"] == "cpu" and result["gpu_peak_bytes"] == 0
