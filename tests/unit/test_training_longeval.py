"""Long held-out texts are scored as served: windows, then a length-weighted mean."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification

from service.chunking import WindowEncoder
from tests.tiny_bert import SAMPLE_TEXT, build_tiny_bert
from training.card import render_card
from training.data import Example
from training.longeval import chunked_predictions, serving_window
from training.loop import TrainConfig
from training.pipeline import RunSpec, fine_tune


@pytest.fixture(scope="module")
def spread_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A wide init spreads the probabilities, so window means are told apart from ties.
    return build_tiny_bert(tmp_path_factory.mktemp("long") / "m", seed=3, init_range=0.2)


def _long_texts(n: int, words: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    pool = " ".join(SAMPLE_TEXT).replace(",", "").split()
    return [" ".join(rng.choice(pool) for _ in range(words)) for _ in range(n)]


def test_predictions_are_the_length_weighted_mean_of_the_served_windows(
    spread_model: Path,
) -> None:
    model = AutoModelForSequenceClassification.from_pretrained(spread_model).eval()
    texts = [*_long_texts(6, 300), "great phone"]
    got = chunked_predictions(model, spread_model, texts, torch.device("cpu"), pad_id=0)
    max_seq_len, max_windows, overlap = serving_window()
    # The tiny model has 128 positions: the service would shrink its windows the same way.
    encoder = WindowEncoder.load(spread_model, max_seq_len, max_windows, overlap)
    assert got.max_seq_len == encoder.max_length == 128
    windowed = encoder.encode(texts)
    assert got.windows == windowed.windows.tolist() and max(got.windows) > 2
    expected, row = [], 0
    for count in got.windows:
        probs, weights = [], []
        for _ in range(count):
            ids = torch.tensor([windowed.packed.row(row).tolist()])
            with torch.no_grad():
                probs.append(model(input_ids=ids).logits.softmax(-1)[0].numpy())
            weights.append(ids.shape[1])
            row += 1
        mean = np.average(np.stack(probs), axis=0, weights=weights)
        expected.append(int(mean[1] > mean[0]))
    assert got.preds == expected
    assert got.describe()["mean_windows"] == round(sum(got.windows) / len(texts), 2)


def test_long_texts_are_scored_in_the_runs_precision(
    spread_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.longeval as longeval

    asked: list[str] = []
    predict = longeval.predict

    def spy(*args: Any, amp: str, **kwargs: Any) -> Any:
        asked.append(amp)
        return predict(*args, amp=amp, **kwargs)

    monkeypatch.setattr(longeval, "predict", spy)
    model = AutoModelForSequenceClassification.from_pretrained(spread_model).eval()
    texts = _long_texts(2, 300)
    chunked_predictions(model, spread_model, texts, torch.device("cpu"), pad_id=0, amp="off")
    assert asked == ["off"]  # --amp reaches the long reviews' scoring too


def test_fine_tune_reads_chunked_sources_in_windows_and_reports_groups(
    spread_model: Path, tmp_path: Path
) -> None:
    short = [Example(t, i % 2, "short") for i, t in enumerate(SAMPLE_TEXT * 4)]
    long = [Example(t, i % 2, "long") for i, t in enumerate(_long_texts(4, 300, seed=1))]
    spec = RunSpec(
        model_path=spread_model,
        out=tmp_path / "model",
        cfg=TrainConfig(max_steps=3, batch_size=8, checkpoint_each_epoch=False),
        max_length=32,
        groups={"short": "sentences", "long": "full-reviews"},
        chunked_sources=frozenset({"long"}),
    )
    metrics = fine_tune(spec, short, short[:8] + long)
    assert metrics is not None
    assert metrics["chunked_eval"]["texts"] == 4 and metrics["chunked_eval"]["sources"] == ["long"]
    assert metrics["per_group"]["full-reviews"]["n"] == 4
    assert metrics["n"] == 12
    card = (tmp_path / "model" / "README.md").read_text()
    assert "| held-out set |" in card and "| full-reviews | 4 |" in card
    assert "long read as served: windows of 128 tokens" in card


def test_card_without_groups_keeps_one_table() -> None:
    card = render_card("t", {"n": 1, "accuracy": 1.0, "macro_f1": 1.0}, [])
    assert "| held-out set |" not in card and "| test set |" in card


def test_card_counts_rows_per_source_and_the_chunks_trained_on() -> None:
    split = {
        "train": {"tweets": {"negative": 3, "positive": 2}, "full-reviews": {"positive": 2}},
        "test": {"tweets": {"negative": 1}, "full-reviews": {"negative": 1}},
        "train_rows_as_trained": {
            "tweets": {"negative": 3, "positive": 2},
            "full-reviews": {"positive": 8},
        },
    }
    card = render_card("t", {"n": 2, "accuracy": 1.0, "macro_f1": 1.0, "split": split}, [])
    assert "| full-reviews | 2 | 1 | 8 |" in card and "| tweets | 5 | 1 | 5 |" in card
