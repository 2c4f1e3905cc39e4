"""Data loading, validation errors, cleaning, splitting and length-grouped batching."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler

from training.__main__ import main
from training.batches import LengthGroupedBatchSampler, PadCollator, TokenizedDataset
from training.data import (
    DataError,
    Example,
    check_both_labels,
    clean,
    load_examples,
    parse_label,
    stratified_split,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("negative", 0),
        ("Positive", 1),
        ("neg", 0),
        (" pos ", 1),
        ("0", 0),
        ("1", 1),
        ("-1", 0),
        (1, 1),
        (-1, 0),
        (0.0, 0),
    ],
)
def test_accepted_label_spellings(raw: object, expected: int) -> None:
    assert parse_label(raw) == expected


@pytest.mark.parametrize("raw", ["neutral", "2", "", "yes", True, None, 0.5])
def test_other_labels_are_rejected(raw: object) -> None:
    with pytest.raises(ValueError, match="not one of"):
        parse_label(raw)


def test_csv_loads_with_custom_columns(tmp_path: Path) -> None:
    path = tmp_path / "reviews.csv"
    path.write_text('review,stars\n"good, really",pos\nbad,-1\n', encoding="utf-8")
    rows = load_examples(path, text_column="review", label_column="stars")
    assert rows == [Example("good, really", 1, "reviews"), Example("bad", 0, "reviews")]


def test_jsonl_loads(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines = [json.dumps({"text": "fine", "label": 1}), "", json.dumps({"text": "no", "label": "0"})]
    path.write_text("\n".join(lines) + "\n")
    assert [e.label for e in load_examples(path)] == [1, 0]


def test_malformed_csv_rows_name_line_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        "text,label\n"
        "fine text,positive\n"  # line 2: ok
        "what,neutral\n"  # line 3: unknown label
        ",negative\n"  # line 4: empty text
        "too,many,fields\n"  # line 5
        '"multi\nline",pos\n'  # lines 6-7: ok, spans two lines
        "short\n"  # line 8: missing label
    )
    with pytest.raises(DataError) as info:
        load_examples(path)
    msg = str(info.value)
    assert "4 malformed row(s)" in msg
    assert "line 3: label 'neutral' is not one of" in msg
    assert "line 4: empty text" in msg
    assert "line 5: 3 fields, header has 2" in msg
    assert "line 8: 1 fields, header has 2" in msg


def test_malformed_jsonl_rows_name_line_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"text": "ok", "label": "pos"}\n'
        "{not json}\n"
        '["a list"]\n'
        '{"text": "no label"}\n'
        '{"text": 5, "label": 1}\n'
    )
    with pytest.raises(DataError) as info:
        load_examples(path)
    msg = str(info.value)
    assert "line 2: invalid JSON" in msg
    assert "line 3: expected a JSON object, got list" in msg
    assert "line 4: missing key 'label'" in msg
    assert "line 5: text is int, expected a string" in msg


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("a.csv", "body,label\nx,1\n", "line 1: header has no column 'text'"),
        ("a.csv", "text,label\n", "no data rows"),
        ("a.txt", "x", "unknown format '.txt'"),
        ("a.csv", b"text,label\nok,1\nbad \xff byte,0\n", "line 3: not UTF-8"),
    ],
)
def test_file_level_errors(tmp_path: Path, name: str, content: str | bytes, message: str) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(DataError, match=message):
        load_examples(path)


def test_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file"):
        load_examples(tmp_path / "absent.csv")


def test_cli_reports_malformed_data_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("text,label\ngood,positive\nmeh,maybe\n")
    code = main(["train", "--model", str(tmp_path), "--data", str(path), "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "line 3: label 'maybe' is not one of negative/positive" in err


def test_clean_dedupes_and_drops_conflicts() -> None:
    rows = [
        Example("Good  phone", 1),
        Example("good phone", 1),  # duplicate up to case and spacing
        Example("meh", 1),
        Example("Meh", 0),  # labelled both ways: both dropped
        Example("bad", 0),
        Example("   ", 0),
    ]
    kept, stats = clean(rows)
    assert kept == [Example("Good phone", 1), Example("bad", 0)]
    assert (stats.duplicates_dropped, stats.conflicting_texts_dropped) == (2, 1)
    assert (stats.empty_dropped, stats.rows_in, stats.rows_out) == (1, 6, 2)


def test_stratified_split_is_seeded_and_keeps_shares() -> None:
    rows = [Example(f"t{i}", int(i % 4 == 0), "a" if i < 600 else "b") for i in range(1000)]
    train, test = stratified_split(rows, 0.1, seed=7)
    again, _ = stratified_split(rows, 0.1, seed=7)
    other, _ = stratified_split(rows, 0.1, seed=8)
    assert train == again and train != other
    assert len(test) == 100 and not {e.text for e in train} & {e.text for e in test}
    assert sum(e.label for e in test) == 25
    assert sum(e.source == "a" for e in test) == 60


def test_single_class_training_data_is_an_error() -> None:
    with pytest.raises(DataError, match="found only positive"):
        check_both_labels([Example("a", 1), Example("b", 1)], "the training split")


def test_length_grouped_batches_cover_each_rank_once() -> None:
    lengths = [(i * 37) % 61 + 3 for i in range(203)]
    ds = TokenizedDataset([[1] * n for n in lengths], [0] * len(lengths))
    seen: list[int] = []
    for rank in range(2):
        inner = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=3)
        sampler = LengthGroupedBatchSampler(inner, ds.lengths, batch_size=8, seed=3, group_factor=4)
        sampler.set_epoch(1)
        batches = list(sampler)
        assert len(batches) == len(sampler) == 13  # 102 rows per rank (padded), 8 per batch
        seen += [i for b in batches for i in b]
        # Sorting within mega-chunks keeps the spread inside a batch far below the data's.
        spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches)
        assert spread / len(batches) < 20  # random batches of 8 here span ~45 tokens
    assert set(seen) == set(range(203))
    epoch_one = list(sampler)
    sampler.set_epoch(2)
    assert list(sampler) != epoch_one


def test_pad_collator_pads_to_batch_longest_rounded_to_eight() -> None:
    batch = PadCollator(pad_id=0)([([5, 6, 7], 1), ([5] * 10, 0)])
    assert batch["input_ids"].shape == (2, 16)
    assert batch["attention_mask"].sum().item() == 13
    assert torch.equal(batch["labels"], torch.tensor([1, 0]))
