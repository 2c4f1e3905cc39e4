"""The export's checks against torch (INT8 included), that a failed check replaces no file,
and `auto` falling back to torch when the export it measured can no longer be served."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import BertForSequenceClassification

from service import export
from service.artifacts import MANIFEST, ExportMismatch, export_dir, file_sha256
from service.export import FUSED, INT8, PLAIN, export_onnx
from service.model import ModelLoadError, SentimentModel
from tests.measured import record_speeds


def _retrained(exported_dir: Path, out: Path) -> Path:
    """A copy of `exported_dir` whose weights answer differently (its exports are the old
    model's): the classifier leans far towards one label."""
    shutil.copytree(exported_dir, out)
    model = BertForSequenceClassification.from_pretrained(out)
    with torch.no_grad():
        model.classifier.bias.add_(torch.tensor([3.0, -3.0]))
    model.save_pretrained(out)
    return out


def _files(model_dir: Path) -> dict[str, str]:
    """Every file in the export folder, by name, with its SHA-256."""
    return {p.name: file_sha256(p) for p in sorted(export_dir(model_dir).iterdir())}


def test_an_int8_graph_that_computes_another_model_is_refused(
    exported_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """INT8 gone wrong (here: the old model's graph) must not be recorded and served."""
    old_graph = export_dir(exported_dir) / FUSED
    model_dir = _retrained(exported_dir, tmp_path / "retrained")
    before = _files(model_dir)
    monkeypatch.setattr(export, "quantize_int8", lambda _, out, *a: shutil.copy(old_graph, out))
    with pytest.raises(ExportMismatch, match=rf"{INT8} differs from torch by .*nothing written"):
        export_onnx(model_dir, quantize="int8", force=True)
    assert _files(model_dir) == before


@pytest.mark.parametrize("failing, diff", [(FUSED, 0.5), (INT8, float("nan"))])
def test_a_failed_check_replaces_no_file(
    exported_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
    diff: float,
) -> None:
    """The files checked before the failing one are not swapped in under the old manifest."""
    model_dir = _retrained(exported_dir, tmp_path / "retrained")
    before = _files(model_dir)
    check = export._check

    def fail_one(model: Any, path: Path) -> float:
        return diff if path.name.endswith(failing) else check(model, path)

    monkeypatch.setattr(export, "_check", fail_one)
    with pytest.raises(ExportMismatch, match=f"{failing} differs from torch"):
        export_onnx(model_dir, quantize="int8", force=True)
    assert _files(model_dir) == before  # no file replaced, the manifest as it was, no leftovers
    assert MANIFEST in before and PLAIN in before


@pytest.mark.parametrize(
    "measured, damaged, how, reason",
    [
        ("onnx", FUSED, "delete", "which is missing"),
        ("onnx-int8", INT8, "delete", "which is missing"),
        ("onnx-int8", FUSED, "change", "rechecks close answers .* changed since it was exported"),
    ],
)
def test_auto_serves_torch_when_the_measured_export_is_unusable(
    exported_dir: Path, tmp_path: Path, measured: str, damaged: str, how: str, reason: str
) -> None:
    """`auto` falls back and says why (/readyz, the serve banner); named, the backend fails."""
    model_dir = tmp_path / "measured"
    shutil.copytree(exported_dir, model_dir)
    record_speeds(model_dir, {"torch": 100.0, measured: 400.0}, ["torch", measured])
    assert SentimentModel.load(model_dir, device="cpu", backend="auto").backend_name == measured
    path = export_dir(model_dir) / damaged
    if how == "delete":
        path.unlink()
    else:
        with open(path, "ab") as f:
            f.write(b"\0")
    model = SentimentModel.load(model_dir, device="cpu", backend="auto")
    assert model.backend_name == "torch"
    assert model.backend_reason.startswith(f"{measured} was measured fastest, but")
    assert damaged in model.backend_reason and re.search(reason, model.backend_reason)
    with pytest.raises(ModelLoadError, match=reason):
        SentimentModel.load(model_dir, device="cpu", backend=measured)
