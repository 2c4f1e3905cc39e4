"""`train --test-data`: held-out rows that are also training rows are dropped and counted, and
the card names the split that was made (a separate file), not a fraction and seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.test_training_loop import make_examples, write_csv
from training.__main__ import main
from training.data import Example, drop_seen


def test_drop_seen_matches_texts_as_clean_does() -> None:
    train = [Example("Great  phone", 1), Example("awful shop", 0)]
    test = [Example("GREAT phone", 0), Example("awful\tshop ", 0), Example("new text", 1)]
    kept, dropped = drop_seen(test, train)
    assert kept == [Example("new text", 1)] and dropped == 2


def test_test_rows_also_in_training_are_dropped_and_shown(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = make_examples(60, seed=6)
    data = write_csv(tmp_path / "train.csv", rows)
    # Ten training rows with other case and spacing, and ten rows the model never sees.
    copies = [Example(e.text.upper().replace(" ", "  "), e.label) for e in rows[:10]]
    unseen = make_examples(10, seed=7)
    unseen = [Example(e.text + " unseen", e.label) for e in unseen]
    test = write_csv(tmp_path / "test.csv", copies + unseen)
    out = tmp_path / "out"
    args = ["train", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(out)]
    assert main([*args, "--test-data", str(test), "--max-steps", "1"]) == 0
    assert "10 of its 20 rows are also in --data and were dropped" in capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test_rows"] == 10
    assert metrics["split"] == {
        "rule": "separate test file",
        "test_file": "test.csv",
        "test_rows_in_training_dropped": 10,
    }
    card = (out / "README.md").read_text()
    assert "Split: separate test file `test.csv` (10 of its rows were also training" in card
    assert "60 train / 10 test rows" in card
    assert "test fraction" not in card and "seed 42:" not in card


def test_a_test_file_of_training_rows_only_is_refused(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = make_examples(40, seed=6)
    data = write_csv(tmp_path / "train.csv", rows)
    test = write_csv(tmp_path / "test.csv", rows[:5])
    out = tmp_path / "out"
    args = ["train", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(out)]
    assert main([*args, "--test-data", str(test), "--max-steps", "1"]) == 2
    assert "every row is also in" in capsys.readouterr().err
    assert not out.exists() and not (tmp_path / "out.building").exists()
