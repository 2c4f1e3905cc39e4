"""Training throughput: samples/s of the real training loop on synthetic labelled rows.

Times `training.loop.train` itself (DDP when launched by torchrun, AMP, gradient accumulation,
clipping, the scheduler), so the figure is what a fine-tuning run gets. Rows are random token
ids of exactly `seq_len` tokens, the usual shape of published BERT fine-tuning figures (e.g.
320 samples/s for BERT-base at length 128 on one A100). A few untimed steps go first, so CUDA
start-up and kernel selection stay out of the figure.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from training.batches import TokenizedDataset
from training.loop import (
    DistContext,
    TrainConfig,
    seed_everything,
    setup_distributed,
    teardown_distributed,
    train,
)
from training.optim import resolve_amp

if TYPE_CHECKING:
    from transformers import BertForSequenceClassification


@dataclass(frozen=True)
class ThroughputSpec:
    """What to time: `steps` optimizer steps after `warmup_steps` untimed ones."""

    steps: int = 30
    warmup_steps: int = 3
    batch_size: int = 32  # per process and micro-step
    grad_accum: int = 1
    seq_len: int = 128
    amp: str = "auto"
    device: str = "auto"
    seed: int = 0


# BertConfig's defaults are BERT-base; BERT-large differs in these.
SYNTHETIC: dict[str, dict[str, Any]] = {
    "bert-base": {},
    "bert-large": {
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
    },
}


def synthetic_bert(name: str, vocab_size: int = 30522) -> BertForSequenceClassification:
    """A BERT-base or BERT-large sized two-label classifier with random weights."""
    from transformers import BertConfig, BertForSequenceClassification

    if name not in SYNTHETIC:
        raise ValueError(f"unknown --config {name!r}; use one of {', '.join(SYNTHETIC)}")
    labels = {0: "negative", 1: "positive"}
    config = BertConfig(vocab_size=vocab_size, id2label=labels, **SYNTHETIC[name])
    return BertForSequenceClassification(config)


def synthetic_bert_base(vocab_size: int = 30522) -> BertForSequenceClassification:
    """BERT-base (12 layers, 768 wide, 110M parameters) with a random two-label head."""
    return synthetic_bert("bert-base", vocab_size)


def load_model(path: Path) -> torch.nn.Module:
    """A model directory's encoder as a two-label classifier, as `train` loads it."""
    from training.pipeline import load_for_training

    model, _ = load_for_training(path)
    return model


def synthetic_rows(n: int, seq_len: int, vocab_size: int, seed: int) -> TokenizedDataset:
    """`n` rows of `seq_len` random ids framed like a tokenizer's output, random labels."""
    rng = random.Random(seed)
    low = min(1000, vocab_size // 2)  # above the special tokens of a BERT vocabulary
    ids = [
        [101, *(rng.randrange(low, vocab_size) for _ in range(seq_len - 2)), 102] for _ in range(n)
    ]
    return TokenizedDataset(ids, [rng.randrange(2) for _ in range(n)])


def _vocab_size(model: torch.nn.Module) -> int:
    config = getattr(model, "config", None)
    return int(getattr(config, "vocab_size", 30522))


def _run(model: torch.nn.Module, spec: ThroughputSpec, ctx: DistContext, steps: int) -> float:
    cfg = TrainConfig(
        max_steps=steps,
        batch_size=spec.batch_size,
        grad_accum=spec.grad_accum,
        amp=spec.amp,
        seed=spec.seed,
        warmup_ratio=0.0,
        checkpoint_each_epoch=False,
    )
    rows = steps * spec.grad_accum * spec.batch_size * ctx.world_size
    ds = synthetic_rows(rows, spec.seq_len, _vocab_size(model), spec.seed + steps)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    result = train(model, ds, cfg, ctx, pad_id=0)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)
    return result.seconds


def measure(model: torch.nn.Module, spec: ThroughputSpec) -> dict[str, Any] | None:
    """Time the loop; rank 0 returns the figures (other ranks None)."""
    ctx = setup_distributed(spec.device)
    try:
        seed_everything(spec.seed)
        if ctx.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(ctx.device)
        if spec.warmup_steps:
            _run(model, spec, ctx, spec.warmup_steps)
        began = time.perf_counter()
        seconds = _run(model, spec, ctx, spec.steps)
        wall = time.perf_counter() - began
    finally:
        teardown_distributed()
    if not ctx.is_main:
        return None
    samples = spec.steps * spec.grad_accum * spec.batch_size * ctx.world_size
    amp = resolve_amp(spec.amp, ctx.device)
    on_gpu = ctx.device.type == "cuda"
    return {
        **asdict(spec),
        "samples_per_s": round(samples / seconds, 2),
        "samples": samples,
        "seconds": round(seconds, 3),
        "wall_seconds": round(wall, 3),
        "world_size": ctx.world_size,
        "device": torch.cuda.get_device_name(ctx.device) if on_gpu else "cpu",
        "amp_dtype": str(amp).removeprefix("torch.") if amp else "off",
        "parameters": sum(p.numel() for p in model.parameters()),
        "gpu_peak_bytes": torch.cuda.max_memory_allocated(ctx.device) if on_gpu else 0,
        "torch": torch.__version__,
    }
