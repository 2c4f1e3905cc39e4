"""The training loop: one code path for 1 CPU process, N CPU processes (gloo) and N GPUs (NCCL).

DistributedDataParallel with a DistributedSampler, gradient accumulation (without gradient
all-reduce on the inner micro-steps), CUDA mixed precision, AdamW with linear warmup and decay,
gradient clipping, and resumable checkpoints. Only rank 0 logs and writes.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler
from tqdm.auto import tqdm

from training.data import LengthGroupedBatchSampler, PadCollator, TokenizedDataset

CHECKPOINT_FILE = "training_state.pt"


@dataclass
class TrainConfig:
    """Optimisation settings; `batch_size` is per process and per micro-step."""

    epochs: int = 1
    max_steps: int = 0  # optimizer steps; 0 means "run `epochs` full epochs"
    batch_size: int = 32
    grad_accum: int = 1
    lr: float = 5e-5
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    seed: int = 42
    amp: str = "auto"  # auto | bf16 | fp16 | off
    freeze_embeddings: bool = False  # word embeddings only
    freeze_layers: int = 0  # the embedding block and this many lowest encoder layers
    checkpoint_every: int = 0  # optimizer steps; 0 disables step checkpoints
    checkpoint_each_epoch: bool = True


@dataclass
class DistContext:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


@dataclass
class TrainResult:
    """What a run did: optimizer steps, per-step mean loss (rank 0), seconds spent."""

    steps: int
    losses: list[float]
    seconds: float
    resumed_from_step: int = 0


def setup_distributed(device: str = "auto") -> DistContext:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), else run alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} was asked for but no CUDA GPU is visible")
    dev = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistContext(rank, world, local, dev)


def teardown_distributed() -> None:
    """Leave the process group cleanly (avoids a warning and a hang at exit)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def barrier(ctx: DistContext) -> None:
    """Wait for all ranks; a no-op when running alone."""
    if ctx.distributed and dist.is_initialized():
        dist.barrier()


def seed_everything(seed: int) -> None:
    """Seed Python and torch RNGs (CPU and CUDA) so runs repeat exactly on the same hardware."""
    random.seed(seed)
    torch.manual_seed(seed)


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for full precision. `auto` is bf16/fp16 on CUDA, off on CPU."""
    if amp == "off":
        return None
    if amp == "auto":
        if device.type != "cuda":
            return None  # CPU autocast is slower than FP32 on most CPUs without AMX
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise ValueError("--amp fp16 needs a CUDA GPU; use bf16 or off on the CPU")
        return torch.float16
    raise ValueError(f"unknown --amp {amp!r}; use auto, bf16, fp16 or off")


def make_loader(
    ds: TokenizedDataset, ctx: DistContext, batch_size: int, seed: int, pad_id: int
) -> DataLoader[Any]:
    """A DistributedSampler (also for one process: same code path) wrapped in length grouping."""
    sampler: DistributedSampler[tuple[list[int], int]] = DistributedSampler(
        ds, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=seed
    )
    batches = LengthGroupedBatchSampler(sampler, ds.lengths, batch_size, seed=seed)
    # A private generator: creating the loader iterator must not draw from the global RNG,
    # or a resumed run's dropout masks would drift from the uninterrupted run's.
    gen = torch.Generator().manual_seed(seed)
    return DataLoader(ds, batch_sampler=batches, collate_fn=PadCollator(pad_id), generator=gen)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, DistributedDataParallel) else model


def _optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    # No weight decay on biases and LayerNorm weights: decaying them only hurts.
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=cfg.lr)


def freeze(model: torch.nn.Module, embeddings: bool, layers: int) -> None:
    """Stop training the word embeddings and/or the embedding block plus the lowest layers.

    Word embeddings are half of a small BERT: freezing them halves the optimizer's work on the
    CPU. Freezing the lowest layers also stops the backward pass early. Both cost little
    accuracy when the data are small.
    """
    if embeddings:
        emb = getattr(model, "get_input_embeddings", lambda: None)()
        if isinstance(emb, torch.nn.Module):
            emb.requires_grad_(False)
    if layers <= 0:
        return
    base = getattr(model, "base_model", model)
    blocks = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(blocks, torch.nn.ModuleList) or layers > len(blocks):
        raise ValueError(f"cannot freeze {layers} layers: the encoder has no such layer list")
    stem = getattr(base, "embeddings", None)
    if isinstance(stem, torch.nn.Module):
        stem.requires_grad_(False)
    for block in blocks[:layers]:
        block.requires_grad_(False)


def linear_warmup_decay(
    optimizer: torch.optim.Optimizer, warmup: int, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning rate rises linearly from 0 over `warmup` steps, then falls linearly to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a crash mid-save must not destroy the previous checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(state, tmp / CHECKPOINT_FILE)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint directory written by `save_checkpoint`."""
    file = Path(path) / CHECKPOINT_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint directory ({CHECKPOINT_FILE} missing)")
    state: dict[str, Any] = torch.load(file, map_location="cpu", weights_only=True)
    return state


def train(
    model: torch.nn.Module,
    train_ds: TokenizedDataset,
    cfg: TrainConfig,
    ctx: DistContext,
    pad_id: int,
    checkpoint_dir: Path | None = None,
    resume: Path | None = None,
) -> TrainResult:
    """Fine-tune `model` in place on `train_ds`; return steps, losses and time."""
    freeze(model, cfg.freeze_embeddings, cfg.freeze_layers)
    model.to(ctx.device)
    net: torch.nn.Module = model
    ddp: DistributedDataParallel | None = None
    if ctx.distributed:
        ids = [ctx.device.index] if ctx.device.type == "cuda" else None
        net = ddp = DistributedDataParallel(model, device_ids=ids)
    loader = make_loader(train_ds, ctx, cfg.batch_size, cfg.seed, pad_id)
    micro_per_epoch = len(loader)
    steps_per_epoch = math.ceil(micro_per_epoch / cfg.grad_accum)
    total = cfg.max_steps or cfg.epochs * steps_per_epoch
    optimizer = _optimizer(model, cfg)
    scheduler = linear_warmup_decay(optimizer, math.ceil(total * cfg.warmup_ratio), total)
    amp_dtype = resolve_amp(cfg.amp, ctx.device)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)

    step, epoch, micro_done, start_step = 0, 0, 0, 0
    if resume is not None:
        state = load_checkpoint(resume)
        if state["num_train"] != len(train_ds) or state["world_size"] != ctx.world_size:
            raise ValueError(
                f"checkpoint {resume} was made with {state['num_train']} rows on "
                f"{state['world_size']} process(es); this run has {len(train_ds)} on "
                f"{ctx.world_size}"
            )
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        step, epoch, micro_done = state["step"], state["epoch"], state["micro_in_epoch"]
        start_step = step
        random.setstate(state["py_rng"])
        torch.set_rng_state(state["torch_rng"])

    def snapshot() -> dict[str, Any]:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "step": step,
            "epoch": epoch,
            "micro_in_epoch": micro_done,
            "num_train": len(train_ds),
            "world_size": ctx.world_size,
            "config": asdict(cfg),
            "py_rng": random.getstate(),
            "torch_rng": torch.get_rng_state(),
        }

    bar = tqdm(
        total=total, initial=step, desc="train", unit="step", disable=not ctx.is_main, smoothing=0.1
    )
    losses: list[float] = []
    began = time.perf_counter()
    net.train()
    while step < total:
        loader.batch_sampler.set_epoch(epoch)  # type: ignore[union-attr]
        batches: Iterator[dict[str, torch.Tensor]] = islice(iter(loader), micro_done, None)
        for micro, batch in enumerate(batches, start=micro_done):
            group_start = (micro // cfg.grad_accum) * cfg.grad_accum
            group_size = min(cfg.grad_accum, micro_per_epoch - group_start)
            boundary = micro - group_start == group_size - 1
            batch = {k: v.to(ctx.device, non_blocking=True) for k, v in batch.items()}
            # Skip the gradient all-reduce on inner micro-steps; it happens once per group.
            sync = ddp.no_sync() if ddp is not None and not boundary else contextlib.nullcontext()
            with sync:
                with torch.autocast(
                    ctx.device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None
                ):
                    loss = net(**batch).loss / group_size
                scaler.scale(loss).backward()
            if ctx.is_main:
                losses.append(loss.detach().item() * group_size)
            if not boundary:
                continue
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            micro_done = micro + 1
            bar.update(1)
            recent = losses[-20 * cfg.grad_accum :]
            bar.set_postfix(loss=f"{sum(recent) / max(len(recent), 1):.4f}", epoch=epoch)
            if checkpoint_dir and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                if ctx.is_main:
                    save_checkpoint(checkpoint_dir, snapshot())
                barrier(ctx)
            if step >= total:
                break
        else:
            epoch, micro_done = epoch + 1, 0
            if checkpoint_dir and cfg.checkpoint_each_epoch:
                if ctx.is_main:
                    save_checkpoint(checkpoint_dir, snapshot())
                barrier(ctx)
    bar.close()
    return TrainResult(step, losses, time.perf_counter() - began, start_step)


@torch.inference_mode()
def predict(
    model: torch.nn.Module,
    ds: TokenizedDataset,
    device: torch.device,
    pad_id: int,
    batch_size: int = 128,
    amp: str = "auto",
    show_progress: bool = True,
) -> list[list[float]]:
    """Class probabilities per row, in dataset order; rows are batched by length for speed."""
    model.eval()
    amp_dtype = resolve_amp(amp, device)
    order = sorted(range(len(ds)), key=lambda i: len(ds.ids[i]))
    collate = PadCollator(pad_id)
    probs: list[list[float]] = [[] for _ in range(len(ds))]
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc="eval", unit="batch", disable=not show_progress):
        idx = order[start : start + batch_size]
        batch = collate([ds[i] for i in idx])
        with torch.autocast(
            device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None
        ):
            logits = model(
                input_ids=batch["input_ids"].to(device),
                attention_mask=batch["attention_mask"].to(device),
            ).logits
        for i, row in zip(idx, logits.float().softmax(-1).cpu().tolist(), strict=True):
            probs[i] = row
    return probs
