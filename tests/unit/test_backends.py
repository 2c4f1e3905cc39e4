"""ONNX Runtime backends on a real export of a tiny BERT: FP32 parity with torch, the
export's manifest and its weight check, `auto`, and clear errors for what cannot run here.
The INT8 backend's own tests are in test_int8.py."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from transformers import BertForSequenceClassification

from service.__main__ import main
from service.artifacts import (
    current_measurement,
    export_dir,
    file_sha256,
    read_manifest,
    weights_sha256,
    write_manifest,
)
from service.batching import round_up
from service.export import export_onnx
from service.model import ModelLoadError, SentimentModel
from service.modelcore import ModelCore
from service.settings import Settings
from tests.exported import AGREEMENT, probabilities, review_texts
from tests.measured import record_speeds

FP32_BOUND = 1e-3  # max abs difference of probabilities, FP32 backends vs torch FP32


def test_export_sits_beside_the_hf_files_and_records_what_it_was_made_from(
    exported_dir: Path,
) -> None:
    folder = export_dir(exported_dir)
    assert {p.name for p in folder.glob("*.onnx")} == {
        "model.onnx",
        "model-opt.onnx",
        "model-int8.onnx",
    }
    manifest = read_manifest(exported_dir)
    assert manifest["weights_sha256"] == weights_sha256(exported_dir)
    for name, entry in manifest["exports"].items():
        assert entry["sha256"] == file_sha256(folder / name)
        assert {"torch", "onnx", "onnxruntime", "transformers"} <= entry["versions"].keys()
    graph = onnx.load(str(folder / "model.onnx")).graph
    inputs = {i.name: [d.dim_param for d in i.type.tensor_type.shape.dim] for i in graph.input}
    assert inputs == {"input_ids": ["batch", "sequence"], "attention_mask": ["batch", "sequence"]}
    assert [o.name for o in graph.output] == ["logits"]
    # The directory still serves with torch: the HF files are untouched.
    assert SentimentModel.load(exported_dir, device="cpu", backend="torch").classify(["great"])


def test_export_again_is_a_no_op(exported_dir: Path) -> None:
    folder = export_dir(exported_dir)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert all(line.endswith("up to date") for line in export_onnx(exported_dir, "int8"))
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before


def test_onnx_fp32_matches_torch(exported_dir: Path) -> None:
    texts = review_texts()
    ref = probabilities(exported_dir, "torch", texts)
    got = probabilities(exported_dir, "onnx", texts)
    assert ref[:, 1].std() > 0.1  # the model tells texts apart, so agreement means something
    assert np.abs(got - ref).max() <= FP32_BOUND
    assert (got.argmax(1) == ref.argmax(1)).mean() >= AGREEMENT


def test_onnx_on_a_cpu_computes_a_forward_at_its_longest_rows_width(
    exported_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Padding a forward to a multiple of 8 buys ONNX Runtime on a CPU nothing; the answers
    are the same either way, torch keeps the multiple."""
    model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend="onnx")
    torch_model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend="torch")
    assert (model.pad_multiple, torch_model.pad_multiple) == (1, 8)
    widths: list[int] = []
    run = model.backend.logits
    monkeypatch.setattr(
        model.backend, "logits", lambda ids, mask: widths.append(ids.shape[1]) or run(ids, mask)
    )
    rows = [e.ids for e in model.encode(["great phone, fast delivery", "bad"])]
    exact = model.predict(rows).numpy()
    assert widths == [max(map(len, rows))] and widths[0] % 8
    monkeypatch.setattr(SentimentModel, "pad_multiple", 8)
    assert np.abs(model.predict(rows).numpy() - exact).max() <= 1e-6
    assert widths[1] == round_up(widths[0])


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_every_shape_bucket_runs(exported_dir: Path, backend: str) -> None:
    """What the replica's warm-up sends: each padded length at one row and a full forward."""
    model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend=backend)
    assert model.cuts_runs == (backend == "onnx-int8")  # the planner fills its forwards
    seed = model.encode(["great phone fast delivery"])[0].ids
    for width in (8, 16, 32, 64):
        ids = (seed * width)[:width]
        for rows in (1, 512 // round_up(width)):
            assert model.predict([ids] * rows).shape == (rows, 2)


@pytest.mark.parametrize("backend", ["onnx", "onnx-int8"])
def test_a_forwards_padded_tokens_are_what_its_backend_computes(
    exported_dir: Path, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The padding metric's count: onnx-int8 cuts a forward of mixed lengths into runs of
    their own widths, so rows x the longest would overstate its padding many times."""
    model = SentimentModel.load(exported_dir, device="cpu", max_length=64, backend=backend)
    computed: list[int] = []
    run = model.backend._run  # type: ignore[attr-defined]
    monkeypatch.setattr(
        model.backend, "_run", lambda ids, mask: computed.append(ids.size) or run(ids, mask)
    )
    seed = model.encode(["great phone fast delivery, would buy again"])[0].ids
    rows = [seed[:4]] * 40 + [(seed * 8)[:64]] * 6
    model.predict(rows)
    lengths = [len(r) for r in rows]
    assert model.padded_tokens(lengths) == sum(computed)
    if backend == "onnx-int8":
        assert len(computed) > 1 and sum(computed) < 46 * 64 // 2
    else:
        assert computed == [46 * 64]


def test_export_of_other_weights_is_refused(exported_dir: Path, tmp_path: Path) -> None:
    changed = tmp_path / "retrained"
    shutil.copytree(exported_dir, changed)
    model = BertForSequenceClassification.from_pretrained(changed)
    with torch.no_grad():
        model.classifier.bias.add_(1.0)
    model.save_pretrained(changed)
    with pytest.raises(ModelLoadError, match="exported from other weights"):
        SentimentModel.load(changed, device="cpu", backend="onnx")
    assert SentimentModel.load(changed, device="cpu", backend="torch").classify(["fine"])


def test_a_damaged_export_is_refused(exported_dir: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "damaged"
    shutil.copytree(exported_dir, damaged)
    with open(export_dir(damaged) / "model-int8.onnx", "ab") as f:
        f.write(b"\0")
    with pytest.raises(ModelLoadError, match="changed since it was exported"):
        SentimentModel.load(damaged, device="cpu", backend="onnx-int8")


def test_missing_export_says_how_to_make_it(tiny_model_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"python -m service export .* --quantize int8"):
        SentimentModel.load(tiny_model_dir, device="cpu", backend="onnx-int8")


def test_tensorrt_without_its_provider_fails_clearly(exported_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="no TensorrtExecutionProvider"):
        SentimentModel.load(exported_dir, device="cpu", backend="tensorrt")


def _thread_names() -> dict[str, str]:
    """This process's threads: OS thread id -> OS thread name."""
    names = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):  # ended meanwhile
            names[task.name] = (task / "comm").read_text().strip()
    return names


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="thread names need Linux")
def test_intra_op_threads_are_named_as_forward_threads(exported_dir: Path) -> None:
    """ONNX Runtime's intra-op threads compute part of every forward: a model core loads its
    sessions so that they carry the forward threads' name, and /proc counts their CPU as
    forward work (loadtest.cpu), not as the replica's own. The loading thread keeps its name."""
    mine = str(threading.get_native_id())
    before = _thread_names()
    settings = {"model_path": str(exported_dir), "backend": "onnx", "device": "cpu"}
    core = ModelCore({**settings, "torch_threads": 2, "parallel_forwards": 1, "warmup": False})
    assert core.model.backend_name == "onnx"
    started = [name for tid, name in _thread_names().items() if tid not in before]
    assert "forward" in started, started  # two intra-op threads: the caller and one more
    assert _thread_names()[mine] == before[mine]


def test_onnx_refuses_a_dtype_it_does_not_run(exported_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="runs float32"):
        SentimentModel.load(exported_dir, device="cpu", dtype="float16", backend="onnx")


def test_auto_picks_the_fastest_measured_backend(exported_dir: Path, tmp_path: Path) -> None:
    measured = tmp_path / "measured"
    shutil.copytree(exported_dir, measured)
    assert SentimentModel.load(measured, device="cpu", backend="auto").backend_name == "torch"
    speeds = {"torch": 100.0, "onnx": 300.0, "onnx-int8": 400.0}
    record_speeds(measured, speeds, ["torch", "onnx"])  # INT8 was fastest but lost accuracy
    model = SentimentModel.load(measured, device="cpu", backend="auto")
    assert model.backend_name == "onnx" and "measured fastest" in model.backend_reason
    manifest = read_manifest(measured)
    manifest["measurements"]["cpu"]["weights_sha256"] = "0" * 64
    write_manifest(measured, manifest)
    assert SentimentModel.load(measured, device="cpu", backend="auto").backend_name == "torch"


def test_a_new_export_drops_the_parity_measured_on_the_old_files(
    exported_dir: Path, tmp_path: Path
) -> None:
    """`auto` trusts a measurement only for the files it was made on; `make model` re-measures
    only when there is none (loadtest.parity --if-missing)."""
    copy = tmp_path / "remeasured"
    shutil.copytree(exported_dir, copy)
    assert current_measurement(copy, "cpu") is None
    record_speeds(copy, {"torch": 100.0, "onnx-int8": 400.0}, ["torch", "onnx-int8"])
    assert current_measurement(copy, "cpu") and current_measurement(copy, "cuda") is None
    assert SentimentModel.load(copy, device="cpu", backend="auto").backend_name == "onnx-int8"
    export_onnx(copy, "int8", force=True)
    assert current_measurement(copy, "cpu") is None
    assert SentimentModel.load(copy, device="cpu", backend="auto").backend_name == "torch"


def test_backend_setting_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENTIMENT_BACKEND", "onnx-int8")
    assert Settings().backend == "onnx-int8"
    monkeypatch.setenv("SENTIMENT_BACKEND", "tensorflow")
    with pytest.raises(ValueError, match="backend"):
        Settings()


def test_export_command(exported_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "--model-path", str(exported_dir), "--quantize", "int8"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["export", "--model-path", str(exported_dir), "--format", "tensorrt"]) == 2
    assert "TensorRT" in capsys.readouterr().err
    missing = ["--quantize", "int8", "--calibration", str(exported_dir / "nope.txt")]
    assert main(["export", "--model-path", str(exported_dir), *missing]) == 2
    assert "nope.txt: no such file" in capsys.readouterr().err
    manifest = json.loads((export_dir(exported_dir) / "manifest.json").read_text())
    assert "model-int8.onnx" in manifest["exports"]
