"""Labelled text: load and validate, clean and split (batching: training/batches.py).

Errors in user files are reported as `DataError` with the line number and the reason, so a
bad row never surfaces as a shape error deep inside torch.
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.textfile import TextFileError, read_text

LABEL_NAMES = ("negative", "positive")
# Spellings accepted in user data (case-insensitive); everything else is an error.
LABEL_ALIASES: dict[str, int] = {
    "negative": 0,
    "neg": 0,
    "0": 0,
    "-1": 0,
    "positive": 1,
    "pos": 1,
    "1": 1,
}
ACCEPTED_LABELS = "negative/positive, neg/pos, 0/1 or -1/1"
MAX_REPORTED_ERRORS = 10


class DataError(ValueError):
    """A data file is unreadable or has malformed rows; the message names lines and reasons."""


@dataclass(frozen=True)
class Example:
    """One labelled text; `source` names the file or corpus it came from.

    `group` ties rows that must share a side of the split (sentences of one review);
    `max_tokens`, when set, is the row's own token limit in place of the run's (a review
    window trained at the length the service reads long texts in).
    """

    text: str
    label: int
    source: str = ""
    group: str = ""
    max_tokens: int = 0


@dataclass(frozen=True)
class CleanStats:
    """What `clean` removed."""

    rows_in: int
    empty_dropped: int
    duplicates_dropped: int
    conflicting_texts_dropped: int
    rows_out: int


def parse_label(value: object) -> int:
    """Map an accepted label spelling to 0 (negative) or 1 (positive); raise ValueError if not."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"label {value!r} is not one of {ACCEPTED_LABELS}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    key = str(value).strip().lower()
    if key not in LABEL_ALIASES:
        raise ValueError(f"label {value!r} is not one of {ACCEPTED_LABELS}")
    return LABEL_ALIASES[key]


def _raise_collected(path: Path, errors: list[str]) -> None:
    if not errors:
        return
    shown = "\n  ".join(errors[:MAX_REPORTED_ERRORS])
    more = len(errors) - MAX_REPORTED_ERRORS
    tail = f"\n  ... and {more} more" if more > 0 else ""
    raise DataError(f"{path}: {len(errors)} malformed row(s):\n  {shown}{tail}")


def _read_text(path: Path) -> str:
    try:
        return read_text(path)
    except TextFileError as exc:
        raise DataError(str(exc)) from None


def _check_row(text: object, label: object, line: int, errors: list[str]) -> Example | None:
    if not isinstance(text, str):
        errors.append(f"line {line}: text is {type(text).__name__}, expected a string")
        return None
    if not text.strip():
        errors.append(f"line {line}: empty text")
        return None
    try:
        return Example(text, parse_label(label))
    except ValueError as exc:
        errors.append(f"line {line}: {exc}")
        return None


def _load_csv(path: Path, text_col: str, label_col: str, delimiter: str) -> list[Example]:
    reader = csv.DictReader(io.StringIO(_read_text(path), newline=""), delimiter=delimiter)
    header = reader.fieldnames or []
    missing = [c for c in (text_col, label_col) if c not in header]
    if missing:
        raise DataError(
            f"{path}: line 1: header has no column {', '.join(map(repr, missing))} "
            f"(columns: {', '.join(header) or 'none'}); use --text-column/--label-column"
        )
    rows: list[Example] = []
    errors: list[str] = []
    try:
        for row in reader:
            line = reader.line_num
            if None in row or any(v is None for v in row.values()):
                errors.append(f"line {line}: {_field_count(row)} fields, header has {len(header)}")
                continue
            ex = _check_row(row[text_col], row[label_col], line, errors)
            if ex is not None:
                rows.append(ex)
    except csv.Error as exc:
        errors.append(f"line {reader.line_num}: {exc}")
    _raise_collected(path, errors)
    return rows


def _field_count(row: dict[str | Any, Any]) -> int:
    extra = row.get(None) or []
    return sum(v is not None for k, v in row.items() if k is not None) + len(extra)


def _load_jsonl(path: Path, text_col: str, label_col: str) -> list[Example]:
    rows: list[Example] = []
    errors: list[str] = []
    for line, raw in enumerate(_read_text(path).splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(f"line {line}: invalid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(obj, dict):
            errors.append(f"line {line}: expected a JSON object, got {type(obj).__name__}")
            continue
        absent = [k for k in (text_col, label_col) if k not in obj]
        if absent:
            errors.append(f"line {line}: missing key {', '.join(map(repr, absent))}")
            continue
        ex = _check_row(obj[text_col], obj[label_col], line, errors)
        if ex is not None:
            rows.append(ex)
    _raise_collected(path, errors)
    return rows


def load_examples(
    path: Path, text_column: str = "text", label_column: str = "label", source: str | None = None
) -> list[Example]:
    """Read a CSV/TSV (with a header) or JSONL file of (text, label) rows.

    Labels may be spelled negative/positive, neg/pos, 0/1 or -1/1. All malformed rows are
    collected and reported together in one `DataError`.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = _load_jsonl(path, text_column, label_column)
    elif suffix in (".csv", ".tsv"):
        delimiter = "\t" if suffix == ".tsv" else ","
        rows = _load_csv(path, text_column, label_column, delimiter)
    else:
        raise DataError(f"{path}: unknown format {suffix!r}; use .csv, .tsv or .jsonl")
    if not rows:
        raise DataError(f"{path}: no data rows")
    name = source or path.stem
    return [Example(r.text, r.label, name) for r in rows]


def normalize_text(text: str) -> str:
    """Collapse runs of whitespace; the model never benefits from layout."""
    return " ".join(text.split())


def dedupe_key(text: str) -> str:
    """What `clean` counts as the same text: whitespace collapsed, case ignored."""
    return normalize_text(text).casefold()


def clean(examples: Sequence[Example]) -> tuple[list[Example], CleanStats]:
    """Normalize whitespace, drop exact duplicates and every text that carries both labels.

    Duplicates are matched case-insensitively; the first occurrence is kept so the output
    order (and therefore the split) depends only on the input order.
    """
    labels: dict[str, set[int]] = defaultdict(set)
    first: dict[str, Example] = {}
    empty = 0
    for ex in examples:
        text = normalize_text(ex.text)
        if not text:
            empty += 1
            continue
        key = dedupe_key(text)
        labels[key].add(ex.label)
        first.setdefault(key, Example(text, ex.label, ex.source, ex.group))
    conflicts = {k for k, v in labels.items() if len(v) > 1}
    kept = [ex for k, ex in first.items() if k not in conflicts]
    stats = CleanStats(
        rows_in=len(examples),
        empty_dropped=empty,
        duplicates_dropped=len(examples) - empty - len(first),
        conflicting_texts_dropped=len(conflicts),
        rows_out=len(kept),
    )
    return kept, stats


def drop_seen(test: Sequence[Example], train: Sequence[Example]) -> tuple[list[Example], int]:
    """`test` without the rows whose text (as `clean` compares texts) is also in `train`,
    whatever its label there, and how many were dropped: a held-out row must be unseen."""
    seen = {dedupe_key(ex.text) for ex in train}
    kept = [ex for ex in test if dedupe_key(ex.text) not in seen]
    return kept, len(test) - len(kept)


def stratified_split(
    examples: Sequence[Example], test_fraction: float, seed: int
) -> tuple[list[Example], list[Example]]:
    """Split per (source, label) stratum so every corpus and class keeps its share."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test fraction must be in (0, 1), got {test_fraction}")
    strata: dict[tuple[str, int], list[Example]] = defaultdict(list)
    for ex in examples:
        strata[(ex.source, ex.label)].append(ex)
    rng = random.Random(seed)
    train: list[Example] = []
    test: list[Example] = []
    for key in sorted(strata):
        group = strata[key][:]
        rng.shuffle(group)
        n_test = round(len(group) * test_fraction) if len(group) > 1 else 0
        test.extend(group[:n_test])
        train.extend(group[n_test:])
    return train, test


def check_both_labels(examples: Sequence[Example], what: str) -> None:
    """Training a two-class head on one class is a data error, not a torch error."""
    counts = Counter(ex.label for ex in examples)
    if len(counts) < 2:
        present = ", ".join(LABEL_NAMES[k] for k in counts) or "none"
        raise DataError(f"{what} needs both negative and positive rows; found only {present}")
