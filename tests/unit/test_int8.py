"""The INT8 backend on a real export of a tiny BERT: which nodes it quantizes, the smoothing
that keeps FP32's function, forwards run in small runs at their own widths, close answers
rechecked in FP32, its parity bound, and the VNNI guard."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from service.artifacts import (
    CALIBRATION_FILE,
    export_dir,
    file_sha256,
    read_manifest,
    write_manifest,
)
from service.export import FUSED, calibration_rows, export_onnx
from service.int8 import channel_maxima, int8_nodes, smooth
from service.model import ModelLoadError, SentimentModel
from tests.exported import AGREEMENT, probabilities, review_texts
from tests.measured import record_speeds

# Dynamic INT8 moves probabilities more than FP32 backends do: on this model's retrainings a
# mean of 0.0002-0.0015 and a 99th percentile of 0.002-0.03. The single largest move, on one
# borderline text, ranged from 0.02 to 0.37 across CPUs (ONNX Runtime picks INT8 kernels by
# instruction set), so it is reported, not bounded; broken quantization moves most texts far
# more.
INT8_MEAN_BOUND, INT8_P99_BOUND = 0.01, 0.1


def test_int8_leaves_the_head_and_the_lowest_feed_forward_output_in_fp32(
    exported_dir: Path,
) -> None:
    chosen = int8_nodes(export_dir(exported_dir) / FUSED, num_layers=2)
    # Two layers: the lowest third is layer 0, whose feed-forward output projection stays FP32.
    assert not [n for n in chosen if "pooler" in n or "classifier" in n]
    assert not [n for n in chosen if "layer.0/output/dense" in n]
    assert [n for n in chosen if "layer.1/output/dense" in n]
    assert [n for n in chosen if "layer.0/intermediate/dense" in n]
    assert len([n for n in chosen if n.startswith("Attention")]) == 2


def test_smoothing_keeps_the_fp32_function(exported_dir: Path, tmp_path: Path) -> None:
    """Activations divided per channel, weight rows multiplied: the same logits in FP32."""
    import onnxruntime as ort

    fused = export_dir(exported_dir) / FUSED
    nodes = int8_nodes(fused, num_layers=2)
    rows = calibration_rows(exported_dir, exported_dir / CALIBRATION_FILE)
    maxima = channel_maxima(fused, nodes, rows)
    smooth(fused, tmp_path / "smoothed.onnx", nodes, maxima)
    graph = onnx.load(str(tmp_path / "smoothed.onnx")).graph
    assert len([n for n in graph.node if n.name.endswith("/smooth")]) == len(nodes)
    scales = [np.max(m) / max(np.min(m), 1e-5) for m in maxima.values()]
    assert max(scales) > 2  # uneven channels, so the rescaling is not the identity
    ids = np.array([rows[0][:6], rows[1][:6]], dtype=np.int64)
    mask = np.ones_like(ids)
    ids[1, 3:], mask[1, 3:] = 0, 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    plain = ort.InferenceSession(str(fused), providers=["CPUExecutionProvider"]).run(None, feeds)
    smoothed = ort.InferenceSession(
        str(tmp_path / "smoothed.onnx"), providers=["CPUExecutionProvider"]
    ).run(None, feeds)
    assert np.abs(plain[0] - smoothed[0]).max() <= 1e-4


def test_int8_export_records_its_calibration_and_redoes_when_it_changes(
    exported_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "recalibrated"
    shutil.copytree(exported_dir, copy)
    options = read_manifest(copy)["exports"]["model-int8.onnx"]["options"]["int8"]
    assert options["calibration_sha256"] == file_sha256(copy / CALIBRATION_FILE)
    assert options["smoothing_alpha"] > 0
    (copy / CALIBRATION_FILE).write_text("\n".join(review_texts(32, seed=8)) + "\n")
    lines = export_onnx(copy, "int8")
    assert "model-int8.onnx: exported" in lines[-1] and "smoothed on" in lines[-1]
    (copy / CALIBRATION_FILE).unlink()
    assert "not smoothed" in export_onnx(copy, "int8")[-1]
    assert (
        read_manifest(copy)["exports"]["model-int8.onnx"]["options"]["int8"]["calibration_sha256"]
        is None
    )


def test_int8_forwards_run_in_small_runs(exported_dir: Path) -> None:
    """A big forward is run INT8_RUN_TOKENS at a time, in order, so its texts share their
    activation scale with few neighbours; FP32 runs whole."""
    from service.backends import INT8_RUN_TOKENS, OrtBackend, load_ort

    loaded = load_ort("onnx-int8", exported_dir, torch.device("cpu"), threads=1)
    assert loaded.run_tokens == INT8_RUN_TOKENS
    assert load_ort("onnx", exported_dir, torch.device("cpu"), threads=1).run_tokens == 0
    backend = OrtBackend("onnx-int8", loaded.session, INT8_RUN_TOKENS)  # without rechecks
    model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend="torch")
    rows = [(e.ids * 16)[:16] for e in model.encode(review_texts(100, seed=3))]
    ids = np.array(rows, dtype=np.int64)
    mask = np.ones_like(ids)
    step = INT8_RUN_TOKENS // 16
    runs = [
        backend.session.run(
            ["logits"], {"input_ids": ids[i : i + step], "attention_mask": mask[i : i + step]}
        )[0]
        for i in range(0, len(ids), step)
    ]
    assert len(runs) > 2
    assert np.array_equal(backend.logits(ids, mask).numpy(), np.concatenate(runs))


def _padded(rows: list[list[int]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids and mask, as the service builds a forward."""
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for r, row in enumerate(rows):
        ids[r, : len(row)], mask[r, : len(row)] = row, 1
    return ids, mask


def test_int8_runs_are_cut_to_their_own_longest_row(exported_dir: Path) -> None:
    """Short rows sorted before long ones run at their own width, not the forward's, and not
    rounded up to a multiple of 8 either (ONNX Runtime on a CPU gains nothing from it)."""
    from service.backends import INT8_RUN_TOKENS, OrtBackend, load_ort

    loaded = load_ort("onnx-int8", exported_dir, torch.device("cpu"), threads=1)
    backend = OrtBackend("onnx-int8", loaded.session, INT8_RUN_TOKENS)  # without rechecks
    model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend="torch")
    seeds = [e.ids for e in model.encode(review_texts(24, seed=9))]
    rows = [(r * 7)[:7] for r in seeds[:20]] + [(r * 61)[:61] for r in seeds[20:]]
    ids, mask = _padded(rows, 61)
    assert [(sorted(g), w) for g, w in backend._runs(mask)] == [
        (list(range(20)), 7),
        (list(range(20, 24)), 61),
    ]
    got = backend.logits(ids, mask).numpy()
    # 20 rows of 7 tokens fit one run of INT8_RUN_TOKENS; the 21st row (61 tokens) would not.
    short = {"input_ids": ids[:20, :7], "attention_mask": mask[:20, :7]}
    assert np.array_equal(got[:20], loaded.session.run(["logits"], short)[0])
    long = {"input_ids": ids[20:], "attention_mask": mask[20:]}
    assert np.array_equal(got[20:], loaded.session.run(["logits"], long)[0])


def test_int8_runs_keep_short_rows_apart_when_the_padding_costs_more_than_a_run(
    exported_dir: Path,
) -> None:
    """Ten rows of 8 tokens and five of 40: filled up to the budget in sorted order, the ten
    short rows would share a run with two long ones at width 40 (480 tokens), paying 32 tokens
    of padding each. Planned, they run apart, each group at its own width, in whatever order
    the rows came."""
    from service.backends import INT8_RUN_TOKENS, OrtBackend, load_ort

    loaded = load_ort("onnx-int8", exported_dir, torch.device("cpu"), threads=1)
    backend = OrtBackend("onnx-int8", loaded.session, INT8_RUN_TOKENS)  # without rechecks
    model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend="torch")
    seeds = [e.ids for e in model.encode(review_texts(15, seed=5))]
    rows = [(r * 40)[:40] for r in seeds[:5]] + [(r * 8)[:8] for r in seeds[5:]]  # long first
    ids, mask = _padded(rows, 40)
    assert [(sorted(g), w) for g, w in backend._runs(mask)] == [
        (list(range(5, 15)), 8),
        (list(range(5)), 40),
    ]
    got = backend.logits(ids, mask).numpy()
    short = {"input_ids": ids[5:, :8], "attention_mask": mask[5:, :8]}
    assert np.array_equal(got[5:], loaded.session.run(["logits"], short)[0])
    long = {"input_ids": ids[:5], "attention_mask": mask[:5]}
    assert np.array_equal(got[:5], loaded.session.run(["logits"], long)[0])


def test_int8_answers_too_close_to_call_are_recomputed_in_fp32(
    exported_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows whose INT8 top-two margin is below INT8_RECHECK_MARGIN get the FP32 graph's
    logits; the others keep INT8's, untouched. The trained tiny model is sure of nearly every
    text, so the margin is set to the median one: half the rows are rechecked."""
    from service import backends
    from service.backends import INT8_RUN_TOKENS, OrtBackend, load_ort

    cpu = torch.device("cpu")
    backend = load_ort("onnx-int8", exported_dir, cpu, threads=1)
    plain = OrtBackend("onnx-int8", backend.session, INT8_RUN_TOKENS)
    fp32 = load_ort("onnx", exported_dir, cpu, threads=1)
    model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend="torch")
    rows = [e.ids for e in model.encode(review_texts(120, seed=5))]
    ids, mask = _padded(rows, max(map(len, rows)))
    raw = plain.logits(ids, mask).softmax(-1).numpy()
    top2 = np.sort(raw, axis=1)[:, -2:]
    margins = top2[:, 1] - top2[:, 0]
    monkeypatch.setattr(backends, "INT8_RECHECK_MARGIN", float(np.median(margins)))
    close = margins < backends.INT8_RECHECK_MARGIN
    assert 0 < close.sum() < len(rows)  # both kinds, or the test proves nothing
    got = backend.logits(ids, mask).numpy()
    assert np.array_equal(got[~close], plain.logits(ids, mask).numpy()[~close])
    np.testing.assert_allclose(got[close], fp32.logits(ids, mask).numpy()[close], atol=1e-5)
    assert backend.rechecked == close.sum()


def test_onnx_int8_stays_within_its_bound(exported_dir: Path) -> None:
    texts = review_texts()
    ref = probabilities(exported_dir, "torch", texts)
    got = probabilities(exported_dir, "onnx-int8", texts)
    moved = np.abs(got - ref)[:, 1]
    largest = f"largest move {moved.max():.3f}"
    assert moved.mean() <= INT8_MEAN_BOUND, largest
    assert np.quantile(moved, 0.99) <= INT8_P99_BOUND, largest
    assert (got.argmax(1) == ref.argmax(1)).mean() >= AGREEMENT


def test_int8_made_for_vnni_is_refused_on_a_cpu_without_it(
    exported_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8-bit weights can saturate in AVX2 kernels without VNNI: such an export (and a parity
    record that says it is fastest) must not be run there, and `auto` falls back."""
    copy = tmp_path / "vnni"
    shutil.copytree(exported_dir, copy)
    manifest = read_manifest(copy)
    manifest["exports"]["model-int8.onnx"]["options"]["int8"]["reduce_range"] = False
    write_manifest(copy, manifest)
    record_speeds(copy, {"torch": 100.0, "onnx-int8": 400.0}, ["torch", "onnx-int8"])
    monkeypatch.setattr("service.int8.reduce_range", lambda: True)  # a CPU without VNNI
    with pytest.raises(ModelLoadError, match="lacks VNNI"):
        SentimentModel.load(copy, device="cpu", backend="onnx-int8")
    model = SentimentModel.load(copy, device="cpu", backend="auto")
    assert model.backend_name == "torch" and "lacks VNNI" in model.backend_reason
    monkeypatch.setattr("service.int8.reduce_range", lambda: False)  # one with VNNI
    assert SentimentModel.load(copy, device="cpu", backend="auto").backend_name == "onnx-int8"


def test_the_warm_up_times_int8_forwards_without_the_fp32_recheck(
    exported_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-up's rows are copies of one text; when that text is close to call, every row
    of a forward is rechecked, which real traffic rarely needs: timed so, the default model's
    forwards read 2.5 times their cost, and admission took its first bursts for that much
    more work. Each shape's first run still rechecks (it warms the FP32 graph up too); the
    timed runs do not, and afterwards close answers are rechecked again."""
    from service import backends
    from service.calibration import calibrate, shapes

    monkeypatch.setattr(backends, "INT8_RECHECK_MARGIN", 1.01)  # every answer is close
    model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend="onnx-int8")
    calibrate(model, micro_batch_tokens=256)
    assert model.rechecked_texts == sum(rows for _, rows in shapes(64, 256))  # first runs only
    model.predict([model.encode(["fine"])[0].ids])
    assert model.rechecked_texts == sum(rows for _, rows in shapes(64, 256)) + 1
