"""Fine-tune an encoder on prepared examples, evaluate, and write the served model directory.

Shared by `python -m training train` and the default-model build. Every rank trains; rank 0
alone evaluates and writes the model, `metrics.json` and the model card.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, PreTrainedModel
from transformers.utils import logging as hf_logging

from service.modeldir import has_tokenizer_files
from training.batches import TokenizedDataset, encode_texts
from training.card import render_card
from training.data import LABEL_NAMES, CleanStats, Example, check_both_labels
from training.longeval import chunked_predictions
from training.loop import (
    DistContext,
    TrainConfig,
    barrier,
    predict,
    seed_everything,
    setup_distributed,
    teardown_distributed,
    train,
)
from training.strategy import SetupError, servable_model

ID2LABEL = dict(enumerate(LABEL_NAMES))
LABEL2ID = {name: i for i, name in ID2LABEL.items()}


@dataclass
class RunSpec:
    """Everything a fine-tuning run needs besides the data."""

    model_path: Path
    out: Path
    cfg: TrainConfig = field(default_factory=TrainConfig)
    max_length: int = 128
    eval_batch_size: int = 128
    device: str = "auto"
    threads: int = 0  # 0 keeps torch's default (torchrun sets 1 thread per process)
    resume: Path | None = None
    keep_checkpoint: bool = False
    title: str = "Sentiment classifier"
    sources: list[str] = field(default_factory=list)  # one line per data source, for the card
    extra: dict[str, Any] = field(default_factory=dict)  # merged into metrics.json
    groups: dict[str, str] = field(default_factory=dict)  # source -> group (e.g. language)
    # Sources whose held-out texts are read as served: in windows, averaged (see longeval).
    chunked_sources: frozenset[str] = frozenset()


def classification_metrics(labels: Sequence[int], preds: Sequence[int]) -> dict[str, float]:
    """Accuracy and macro-F1 over the two classes (F1 of an absent class counts as 0)."""
    n = len(labels)
    correct = sum(int(a == b) for a, b in zip(labels, preds, strict=True))
    f1s = []
    for cls in (0, 1):
        tp = sum(1 for a, b in zip(labels, preds, strict=True) if a == cls and b == cls)
        fp = sum(1 for a, b in zip(labels, preds, strict=True) if a != cls and b == cls)
        fn = sum(1 for a, b in zip(labels, preds, strict=True) if a == cls and b != cls)
        f1s.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return {"n": n, "accuracy": correct / n if n else 0.0, "macro_f1": sum(f1s) / 2}


def grouped_metrics(
    examples: Sequence[Example], preds: Sequence[int]
) -> dict[str, dict[str, float]]:
    """Metrics per data source, so one weak corpus cannot hide inside the overall figure."""
    by_source: dict[str, tuple[list[int], list[int]]] = {}
    for ex, pred in zip(examples, preds, strict=True):
        gold, got = by_source.setdefault(ex.source, ([], []))
        gold.append(ex.label)
        got.append(pred)
    return {src: classification_metrics(g, p) for src, (g, p) in sorted(by_source.items())}


def describe_hardware(ctx: DistContext) -> str:
    """One line for the model card: what the run actually used."""
    if ctx.device.type == "cuda":
        return f"{ctx.world_size} x {torch.cuda.get_device_name(ctx.device)} (CUDA)"
    cpu = platform.processor() or platform.machine()
    with_name = Path("/proc/cpuinfo")
    if with_name.is_file():
        for line in with_name.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return (
        f"{ctx.world_size} CPU process(es) x {torch.get_num_threads()} thread(s) on "
        f"{os.cpu_count()} logical cores ({cpu})"
    )


def check_encoder_dir(path: Path) -> None:
    """Fail with what is missing when `path` is not a local encoder directory."""
    if not (path / "config.json").is_file():
        raise SetupError(f"--model {path}: no config.json there (a local encoder directory)")
    if not has_tokenizer_files(path):
        raise SetupError(f"--model {path}: no tokenizer files there (tokenizer.json or vocab.txt)")


def load_for_training(path: Path) -> tuple[PreTrainedModel, Any]:
    """Load an encoder (with or without a classification head) as a two-label classifier."""
    check_encoder_dir(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModelForSequenceClassification.from_pretrained(
            path,
            local_files_only=True,
            num_labels=2,
            id2label=ID2LABEL,
            label2id=LABEL2ID,
            ignore_mismatched_sizes=True,  # an existing head with other labels is replaced
            dtype=torch.float32,  # train in FP32 weights; autocast handles mixed precision
        )
    except (OSError, ValueError) as exc:  # no tokenizer files, weights cut short, ...
        raise SetupError(f"--model {path}: cannot load it: {exc}") from exc
    return model, tokenizer


def fine_tune(
    spec: RunSpec,
    train_examples: Sequence[Example],
    test_examples: Sequence[Example],
    clean_stats: CleanStats | None = None,
) -> dict[str, Any] | None:
    """Train, evaluate on `test_examples`, write the model directory; rank 0 returns metrics."""
    check_both_labels(train_examples, "the training split")
    ctx = setup_distributed(spec.device)
    try:
        return _run(spec, ctx, train_examples, test_examples, clean_stats)
    finally:
        teardown_distributed(ctx)


def _run(
    spec: RunSpec,
    ctx: DistContext,
    train_examples: Sequence[Example],
    test_examples: Sequence[Example],
    clean_stats: CleanStats | None,
) -> dict[str, Any] | None:
    if spec.threads > 0:
        torch.set_num_threads(spec.threads)
    if not ctx.is_main:
        hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # one copy of the load report is enough
    seed_everything(spec.cfg.seed)  # before loading: the new head's init must repeat
    model, tokenizer = load_for_training(spec.model_path)
    pad_id = int(tokenizer.pad_token_id or 0)
    train_ids = encode_rows(tokenizer, train_examples, spec.max_length)
    train_ds = TokenizedDataset(train_ids, [e.label for e in train_examples])
    if ctx.is_main:
        print(
            f"training on {len(train_ds)} rows, {ctx.world_size} process(es) on {ctx.device}, "
            f"max length {spec.max_length} (longest row {max(train_ds.lengths, default=0)} tokens)",
            flush=True,
        )
    result = train(
        model,
        train_ds,
        spec.cfg,
        ctx,
        pad_id,
        checkpoint_dir=spec.out / "checkpoint",
        resume=spec.resume,
        setup={"max_length": spec.max_length, "model": str(spec.model_path.resolve())},
    )
    served = servable_model(model, ctx)  # FSDP: every rank gathers, rank 0 gets the model
    metrics: dict[str, Any] | None = None
    if served is not None:
        metrics = _evaluate_and_save(spec, ctx, served, tokenizer, pad_id, test_examples)
        metrics.update(
            train_rows=len(train_examples),
            train_steps=result.steps,
            resumed_from_step=result.resumed_from_step,
            train_seconds=round(result.seconds, 1),
            first_loss=_mean(result.losses[:20]),
            last_loss=_mean(result.losses[-20:]),
            hardware=describe_hardware(ctx),
            world_size=ctx.world_size,
            torch_version=torch.__version__,
            config={**asdict(spec.cfg), "max_length": spec.max_length},
            base_model=str(spec.extra.pop("base_model", spec.model_path)),
            cleaning=asdict(clean_stats) if clean_stats else None,
            **spec.extra,
        )
        (spec.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
        (spec.out / "README.md").write_text(render_card(spec.title, metrics, spec.sources))
        if not spec.keep_checkpoint:
            shutil.rmtree(spec.out / "checkpoint", ignore_errors=True)
    barrier(ctx)
    return metrics


def encode_rows(tokenizer: Any, rows: Sequence[Example], max_length: int) -> list[list[int]]:
    """Token ids per row, in order: each cut at its own `max_tokens` if set, else `max_length`."""
    by_limit: dict[int, list[int]] = {}
    for i, e in enumerate(rows):
        by_limit.setdefault(e.max_tokens or max_length, []).append(i)
    ids: list[list[int]] = [[] for _ in rows]
    for limit, idx in by_limit.items():
        cut = encode_texts(tokenizer, [rows[i].text for i in idx], limit)
        for i, row in zip(idx, cut, strict=True):
            ids[i] = row
    return ids


def _predict_held_out(
    spec: RunSpec,
    ctx: DistContext,
    model: PreTrainedModel,
    tokenizer: Any,
    pad_id: int,
    test_examples: Sequence[Example],
    metrics: dict[str, Any],
) -> list[int]:
    """Labels for the held-out rows: short texts cut at `max_length`, chunked sources in
    serving windows (the windows they used are counted in `metrics`)."""
    preds = [0] * len(test_examples)
    long_idx = [i for i, e in enumerate(test_examples) if e.source in spec.chunked_sources]
    short_idx = [i for i, e in enumerate(test_examples) if e.source not in spec.chunked_sources]
    if short_idx:
        texts = [test_examples[i].text for i in short_idx]
        ids = encode_texts(tokenizer, texts, spec.max_length)
        ds = TokenizedDataset(ids, [test_examples[i].label for i in short_idx])
        probs = predict(model, ds, ctx.device, pad_id, spec.eval_batch_size, spec.cfg.amp)
        for i, p in zip(short_idx, probs, strict=True):
            preds[i] = int(p[1] > p[0])
    if long_idx:
        texts = [test_examples[i].text for i in long_idx]
        got = chunked_predictions(model, spec.out, texts, ctx.device, pad_id, amp=spec.cfg.amp)
        for i, label in zip(long_idx, got.preds, strict=True):
            preds[i] = label
        metrics["chunked_eval"] = {"sources": sorted(spec.chunked_sources), **got.describe()}
    return preds


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _evaluate_and_save(
    spec: RunSpec,
    ctx: DistContext,
    model: PreTrainedModel,
    tokenizer: Any,
    pad_id: int,
    test_examples: Sequence[Example],
) -> dict[str, Any]:
    model.config.id2label = ID2LABEL
    model.config.label2id = LABEL2ID
    spec.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(spec.out)
    tokenizer.save_pretrained(spec.out)
    metrics: dict[str, Any] = {"test_rows": len(test_examples)}
    if test_examples:
        preds = _predict_held_out(spec, ctx, model, tokenizer, pad_id, test_examples, metrics)
        metrics.update(classification_metrics([e.label for e in test_examples], preds))
        metrics["per_source"] = grouped_metrics(test_examples, preds)
        if spec.groups:  # e.g. per language, over all of its sources together
            regrouped = [Example(e.text, e.label, spec.groups[e.source]) for e in test_examples]
            metrics["per_group"] = grouped_metrics(regrouped, preds)
        print(
            f"held-out accuracy {metrics['accuracy']:.4f}, macro-F1 {metrics['macro_f1']:.4f} "
            f"on {len(test_examples)} rows",
            flush=True,
        )
    return metrics
