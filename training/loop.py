"""The training loop: one code path for 1 CPU process, N CPU processes (gloo) and N GPUs (NCCL).

DistributedDataParallel or FSDP2 (training/strategy.py) with a DistributedSampler, gradient
accumulation (without gradient all-reduce on DDP's inner micro-steps), CUDA mixed precision,
optional activation checkpointing, AdamW with linear warmup and decay, gradient clipping, and
resumable checkpoints. Only rank 0 logs and writes.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler
from tqdm.auto import tqdm

from training.activations import set_activation_checkpointing
from training.batches import LengthGroupedBatchSampler, PadCollator, TokenizedDataset
from training.checkpoints import CHECKPOINT_FILE as CHECKPOINT_FILE
from training.checkpoints import config_changes
from training.checkpoints import load_checkpoint as load_checkpoint
from training.checkpoints import save_checkpoint as save_checkpoint
from training.distributed import DistContext as DistContext
from training.distributed import barrier as barrier
from training.distributed import setup_distributed as setup_distributed
from training.distributed import teardown_distributed as teardown_distributed
from training.optim import freeze, linear_warmup_decay, make_optimizer, resolve_amp
from training.strategy import SetupError, make_strategy


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
    strategy: str = "ddp"  # ddp | fsdp (training/strategy.py)
    gradient_checkpointing: bool = False  # recompute layer activations in the backward


@dataclass
class TrainResult:
    """What a run did: optimizer steps, per-micro-step loss (rank 0), seconds spent."""

    steps: int
    losses: list[float]
    seconds: float
    resumed_from_step: int = 0
    step_seconds: list[float] = field(default_factory=list)  # wall time of each optimizer step


def seed_everything(seed: int) -> None:
    """Seed Python and torch RNGs (CPU and CUDA) so runs repeat exactly on the same hardware."""
    random.seed(seed)
    torch.manual_seed(seed)


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


def train(
    model: torch.nn.Module,
    train_ds: TokenizedDataset,
    cfg: TrainConfig,
    ctx: DistContext,
    pad_id: int,
    checkpoint_dir: Path | None = None,
    resume: Path | None = None,
    progress: bool = True,
    setup: dict[str, Any] | None = None,
) -> TrainResult:
    """Fine-tune `model` in place on `train_ds`; return steps, losses and time.

    Under `--strategy fsdp` the model is sharded in place; `strategy.servable_model` turns it
    back into one plain model for saving. `setup`: settings outside `cfg` that shape the run
    (max length, model), saved in checkpoints with `cfg` and compared on resume.
    """
    run_config = {**asdict(cfg), **(setup or {})}
    amp_dtype = resolve_amp(cfg.amp, ctx.device)
    strategy = make_strategy(cfg.strategy, ctx, amp_dtype)
    set_activation_checkpointing(model, cfg.gradient_checkpointing)
    freeze(model, cfg.freeze_embeddings, cfg.freeze_layers)
    model.to(ctx.device)
    net = strategy.wrap(model)
    loader = make_loader(train_ds, ctx, cfg.batch_size, cfg.seed, pad_id)
    micro_per_epoch = len(loader)
    steps_per_epoch = math.ceil(micro_per_epoch / cfg.grad_accum)
    total = cfg.max_steps or cfg.epochs * steps_per_epoch
    optimizer = make_optimizer(
        model, cfg.lr, cfg.weight_decay
    )  # after wrapping: FSDP replaces the parameters
    scheduler = linear_warmup_decay(optimizer, math.ceil(total * cfg.warmup_ratio), total)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)

    step, epoch, micro_done, start_step = 0, 0, 0, 0
    if resume is not None:
        state = load_checkpoint(resume, mmap=strategy.name == "fsdp")
        if state["num_train"] != len(train_ds) or state["world_size"] != ctx.world_size:
            raise SetupError(
                f"checkpoint {resume} was made with {state['num_train']} rows on "
                f"{state['world_size']} process(es); this run has {len(train_ds)} on "
                f"{ctx.world_size}"
            )
        made_with = state.get("strategy", "ddp")
        if made_with != strategy.name:  # the optimizer state is keyed differently
            raise SetupError(
                f"checkpoint {resume} was made with --strategy {made_with}; resume with it"
            )
        # The restored optimizer, scheduler and batch position only fit the settings they were
        # made with: a new --lr would be ignored, a new batch size would skip the wrong rows.
        changes = config_changes(state.get("config") or {}, run_config)
        if changes:
            raise SetupError(
                f"checkpoint {resume} was made with other settings: {', '.join(changes)}; "
                "resume with the checkpoint's settings, or train anew without --resume"
            )
        strategy.load(model, optimizer, state["model"], state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        step, epoch, micro_done = state["step"], state["epoch"], state["micro_in_epoch"]
        start_step = step
        random.setstate(state["py_rng"])
        torch.set_rng_state(state["torch_rng"])

    def snapshot() -> dict[str, Any]:
        model_state, optimizer_state = strategy.state(model, optimizer)  # FSDP: collective
        return {
            "model": model_state,
            "optimizer": optimizer_state,
            "strategy": strategy.name,
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "step": step,
            "epoch": epoch,
            "micro_in_epoch": micro_done,
            "num_train": len(train_ds),
            "world_size": ctx.world_size,
            "config": run_config,
            "py_rng": random.getstate(),
            "torch_rng": torch.get_rng_state(),
        }

    def checkpoint() -> None:
        state = snapshot()
        if ctx.is_main:
            save_checkpoint(checkpoint_dir, state)  # type: ignore[arg-type]
        barrier(ctx)

    show = progress and ctx.is_main
    bar = tqdm(
        total=total, initial=step, desc="train", unit="step", disable=not show, smoothing=0.1
    )
    losses: list[float] = []
    step_seconds: list[float] = []
    began = step_began = time.perf_counter()
    net.train()
    while step < total:
        loader.batch_sampler.set_epoch(epoch)  # type: ignore[union-attr]
        batches: Iterator[dict[str, torch.Tensor]] = islice(iter(loader), micro_done, None)
        for micro, batch in enumerate(batches, start=micro_done):
            group_start = (micro // cfg.grad_accum) * cfg.grad_accum
            group_size = min(cfg.grad_accum, micro_per_epoch - group_start)
            boundary = micro - group_start == group_size - 1
            batch = {k: v.to(ctx.device, non_blocking=True) for k, v in batch.items()}
            with strategy.micro_step(boundary):
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
            if ctx.device.type == "cuda":
                torch.cuda.synchronize(ctx.device)  # so the step's time is its own
            step_seconds.append(time.perf_counter() - step_began)
            bar.update(1)
            recent = losses[-20 * cfg.grad_accum :]
            bar.set_postfix(loss=f"{sum(recent) / max(len(recent), 1):.4f}", epoch=epoch)
            if checkpoint_dir and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                checkpoint()
            step_began = time.perf_counter()
            if step >= total:
                break
        else:
            epoch, micro_done = epoch + 1, 0
            if checkpoint_dir and cfg.checkpoint_each_epoch:
                checkpoint()
    bar.close()
    return TrainResult(step, losses, time.perf_counter() - began, start_step, step_seconds)


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
