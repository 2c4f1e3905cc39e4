"""The card's split line counts the split's rows; rows as trained (chunks) stand apart."""

from __future__ import annotations

from training.card import render_card


def test_split_line_counts_split_rows_and_rows_trained_on_separately() -> None:
    # As in models/default: 29,634 + 4,065 = 33,699 rows kept; reviews cut into chunks make
    # 33,229 rows trained on.
    metrics = {
        "train_rows": 33229,
        "test_rows": 4065,
        "split": {
            "rule": "per source",
            "test_fraction": 0.1,
            "seed": 7,
            "train": {"tweets": {"negative": 20000, "positive": 8434}, "reviews": {"x": 1200}},
            "test": {"tweets": {"negative": 3000, "positive": 765}, "reviews": {"x": 300}},
            "train_rows_as_trained": {"tweets": {"negative": 20000, "positive": 8434}},
        },
    }
    card = render_card("T", metrics, [])
    assert "seed 7: 29634 train / 4065 test rows." in card
    assert "Rows trained on: 33229 (the 29634 training rows, long texts cut into chunks)." in card


def test_without_chunks_there_is_no_second_figure() -> None:
    metrics = {"train_rows": 90, "test_rows": 10, "split": {"test_fraction": 0.1, "seed": 3}}
    card = render_card("T", metrics, [])
    assert "test fraction 0.1, seed 3: 90 train / 10 test rows." in card
    assert "Rows trained on:" not in card


def test_a_resumed_run_says_its_loss_and_time_cover_the_later_steps() -> None:
    card = render_card("T", {"resumed_from_step": 40, "train_steps": 100}, [])
    assert "Resumed from a checkpoint at step 40" in card
