"""The GPU parity pack round trip on the CPU: FP16 weights carried, both references kept."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from loadtest.gpuparity import holds, main, pack, parity_reference

TEXTS = ["great value, works well", "broke after a day, refund please", "fine", "awful smell"]


@pytest.fixture(scope="module")
def packed(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pack")
    made = pack(tiny_model_dir, TEXTS, [1, 0, 1, 0], out)
    assert made["texts"] == len(TEXTS) and made["bytes"] > 0
    return out


def test_pack_carries_fp16_weights_and_both_fp32_references(packed: Path) -> None:
    with safe_open(str(packed / "model" / "model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}  # noqa: SIM118
    assert "torch.float16" in {str(d) for d in dtypes}
    assert "torch.float32" not in {str(d) for d in dtypes}
    doc = json.loads((packed / "heldout.json").read_text())
    assert doc["texts"] == TEXTS and doc["labels"] == [1, 0, 1, 0]
    for ref in doc["reference"].values():
        assert len(ref) == len(TEXTS)
        assert all(abs(sum(row) - 1.0) < 1e-5 for row in ref)


def test_run_on_the_cpu_matches_the_rounded_weights_reference(packed: Path, tmp_path: Path) -> None:
    argv = ["run", "--pack", str(packed), "--device", "cpu", "--dtypes", "float32"]
    argv += ["--parts", "parity", "--speed-texts", "16", "--out", str(tmp_path)]
    assert main(argv) == 0
    doc = json.loads((tmp_path / "parity.json").read_text())
    (row,) = doc["rows"].values()
    # The same FP32 math on the same rounded weights: only summation order can differ.
    assert row["max_abs_diff_vs_fp16_weights_cpu"] < 1e-5
    assert 0.0 <= row["accuracy"] <= 1.0 and row["texts_per_s"] > 0
    assert "| torch float32 on cpu |" in (tmp_path / "parity.md").read_text()


def test_parity_bounds_follow_precision() -> None:
    close = {"max_abs_diff": 5e-3, "label_agreement": 1.0}
    assert holds("float16", close) and not holds("float32", close)
    assert not holds("float16", {"max_abs_diff": 1e-4, "label_agreement": 0.99})


def test_fp32_is_judged_against_the_weights_the_pack_carries(packed: Path, tmp_path: Path) -> None:
    # The original-weights reference moved by 0.01: as the FP16 rounding of a real model's
    # weights moves it by ~1e-3. FP32 on the carried weights still holds parity; its distance
    # from the original stays reported.
    pack_dir = tmp_path / "pack"
    shutil.copytree(packed, pack_dir)
    doc = json.loads((pack_dir / "heldout.json").read_text())
    doc["reference"]["fp32_cpu_original"] = [
        [row[0] + 0.01, row[1] - 0.01] for row in doc["reference"]["fp32_cpu_fp16_weights"]
    ]
    (pack_dir / "heldout.json").write_text(json.dumps(doc))
    argv = ["run", "--pack", str(pack_dir), "--device", "cpu", "--dtypes", "float32"]
    argv += ["--parts", "parity", "--speed-texts", "16", "--out", str(tmp_path / "out")]
    assert main(argv) == 0
    (row,) = json.loads((tmp_path / "out" / "parity.json").read_text())["rows"].values()
    assert row["holds_parity"] is True and row["parity_reference"] == "fp32_cpu_fp16_weights"
    assert row["max_abs_diff"] > 9e-3  # against the original, reported as measured
    assert parity_reference("float16") == parity_reference("bfloat16") == "fp32_cpu_original"


def test_compile_rows_time_the_compiled_forward(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch.compile stood in for by a wrapper that counts its calls: the row must run it.
    calls: list[str] = []

    def compile_(module: Any, **options: Any) -> Any:
        def forward(**inputs: Any) -> Any:
            calls.append(options["mode"])
            return module(**inputs)

        return forward

    monkeypatch.setattr(torch, "compile", compile_)
    argv = ["run", "--pack", str(packed), "--device", "cpu", "--parts", "compile"]
    assert main([*argv, "--speed-texts", "16", "--out", str(tmp_path)]) == 0
    assert calls and set(calls) == {"default"}
