"""A short model card (README.md) written next to the weights, from the run's metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _pct(value: object) -> str:
    return f"{100 * float(value):.2f}%" if isinstance(value, (int, float)) else "n/a"


def _score_rows(
    metrics: dict[str, Any], key: str = "per_source", first: str = "test set"
) -> list[str]:
    baseline = metrics.get("baseline") or {}
    base_rows = baseline.get(key, {})
    rows = [f"| {first} | rows | accuracy | macro-F1 | baseline acc. | baseline macro-F1 |"]
    rows.append("|---|---:|---:|---:|---:|---:|")
    rows.append(
        f"| all | {metrics.get('n', 0)} | {_pct(metrics.get('accuracy'))} | "
        f"{_pct(metrics.get('macro_f1'))} | {_pct(baseline.get('accuracy'))} | "
        f"{_pct(baseline.get('macro_f1'))} |"
    )
    for src, m in metrics.get(key, {}).items():
        b = base_rows.get(src, {})
        rows.append(
            f"| {src} | {m['n']} | {_pct(m['accuracy'])} | {_pct(m['macro_f1'])} | "
            f"{_pct(b.get('accuracy'))} | {_pct(b.get('macro_f1'))} |"
        )
    return rows


def _chunked_note(metrics: dict[str, Any]) -> list[str]:
    chunked = metrics.get("chunked_eval")
    if not chunked:
        return []
    return [
        "",
        f"{', '.join(chunked['sources'])} read as served: windows of {chunked['max_seq_len']} "
        f"tokens overlapping by {chunked['overlap']} (at most {chunked['max_windows']} per "
        f"text, {chunked['mean_windows']} on average), {chunked['rule']}. The other sets are "
        f"cut at {metrics.get('config', {}).get('max_length')} tokens, as trained.",
    ]


def _resumed(metrics: dict[str, Any]) -> list[str]:
    step = metrics.get("resumed_from_step")
    if not step:
        return []
    return [
        f"- Resumed from a checkpoint at step {step}: the loss and time below cover later steps"
    ]


def _split_counts(split: dict[str, Any]) -> list[str]:
    """Rows per source on each side of the split, as a table (licences sit with the sources)."""
    train, test = split.get("train") or {}, split.get("test") or {}
    trained = split.get("train_rows_as_trained") or {}
    if not train:
        return []
    rows = ["", "| source | train rows | held-out rows | rows trained on |", "|---|---:|---:|---:|"]
    for src in sorted(set(train) | set(test)):
        n_train = sum(train.get(src, {}).values())
        n_trained = sum(trained.get(src, {}).values()) if trained else n_train
        rows.append(f"| {src} | {n_train} | {sum(test.get(src, {}).values())} | {n_trained} |")
    if trained:
        rows += ["", "Rows trained on differ where long texts were cut into chunks."]
    return rows


def _split_lines(metrics: dict[str, Any], split: dict[str, Any]) -> list[str]:
    """How the held-out rows were chosen, with the split's own row counts; the rows trained
    on (more where long texts were cut into chunks) are a separate, labelled figure."""
    per_source = split.get("train") or {}
    trained = metrics.get("train_rows")
    split_train = sum(sum(c.values()) for c in per_source.values()) if per_source else trained
    if "test_file" in split:  # --test-data: no fraction or seed was involved
        how = (
            f"separate test file `{split['test_file']}` "
            f"({split.get('test_rows_in_training_dropped', 0)} of its rows were also training "
            "rows, ignoring case and spacing, and were dropped)"
        )
    else:
        how = (
            f"{split.get('rule', 'stratified by source and label')}, test fraction "
            f"{split.get('test_fraction')}, seed {split.get('seed')}"
        )
    lines = ["", f"Split: {how}: {split_train} train / {metrics.get('test_rows')} test rows."]
    if trained is not None and trained != split_train:
        lines += [
            "",
            f"Rows trained on: {trained} (the {split_train} training rows, long texts cut into "
            "chunks).",
        ]
    return lines


def render_card(title: str, metrics: dict[str, Any], sources: Sequence[str]) -> str:
    """Markdown: what the model is, what it was trained on, how it was split, how it scores."""
    cfg = metrics.get("config", {})
    cleaning = metrics.get("cleaning") or {}
    split = metrics.get("split") or {}
    lines = [
        f"# {title}",
        "",
        "Binary sentiment classifier (labels `negative`, `positive`), a Hugging Face",
        "`BertForSequenceClassification` directory with its tokenizer; serve it by pointing the",
        "service at this folder.",
        "",
        f"- Base encoder: {metrics.get('base_model', 'n/a')}",
        "",
        "## Data",
        "",
        *[f"- {s}" for s in sources],
    ]
    if cleaning:
        lines += [
            "",
            f"Cleaning{' (training file)' if 'test_file' in split else ''}: "
            f"{cleaning['rows_in']} rows in; {cleaning['duplicates_dropped']} "
            f"duplicates and {cleaning['conflicting_texts_dropped']} texts labelled both ways "
            f"dropped; {cleaning['rows_out']} rows kept.",
        ]
    if split:
        lines += [*_split_lines(metrics, split), *_split_counts(split)]
    lines += ["", "## Results (held-out test split)", ""]
    if metrics.get("per_group"):
        lines += [*_score_rows(metrics, "per_group", "held-out set"), ""]
    lines += [*_score_rows(metrics), *_chunked_note(metrics)]
    if metrics.get("baseline"):
        lines += ["", f"Baseline: {metrics['baseline'].get('name', 'TF-IDF + LR')}."]
    lines += [
        "",
        "## Training",
        "",
        f"- Steps: {metrics.get('train_steps')} optimizer steps, batch {cfg.get('batch_size')} "
        f"x {cfg.get('grad_accum')} accumulation x {metrics.get('world_size')} process(es), "
        f"lr {cfg.get('lr')}, warmup ratio {cfg.get('warmup_ratio')}, max length "
        f"{cfg.get('max_length')}, seed {cfg.get('seed')}, AMP {cfg.get('amp')}, "
        f"{str(cfg.get('strategy', 'ddp')).upper()}"
        + (", gradient checkpointing" if cfg.get("gradient_checkpointing") else ""),
        *_resumed(metrics),
        f"- Training loss: {metrics.get('first_loss')} (first steps) -> "
        f"{metrics.get('last_loss')} (last steps)",
        f"- Training time: {metrics.get('train_seconds')} s"
        + (f" (whole build {metrics['build_seconds']} s)" if "build_seconds" in metrics else ""),
        f"- Hardware: {metrics.get('hardware')}, torch {metrics.get('torch_version')}",
        "",
        "Full figures are in `metrics.json`.",
        "",
    ]
    return "\n".join(lines)
