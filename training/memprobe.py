"""Training-memory probe: peak memory and time of real training steps over a grid.

Each grid point runs `training.loop.train` for `steps` optimizer steps (2 by default) on
synthetic rows of exactly `length` tokens: the first step creates the AdamW state, so the peak
over both steps is the steady-state peak (weights, gradients, optimizer moments and the
activations of one micro-batch); the time is the last step's.

Peak memory per point (service/peakmem.py): the torch allocator's peak on a GPU, the
process's resident-set high-water mark on the CPU. A point that runs out of GPU memory is
recorded as `oom`; bigger points of the same setting (at least that batch and length) are
then marked `too-big` without running, as are those above a point whose peak exceeded the
usable memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from service.peakmem import peak_memory, trim_heap
from training.distributed import DistContext
from training.loop import TrainConfig, train
from training.optim import resolve_amp
from training.throughput import load_model, synthetic_bert, synthetic_rows


@dataclass(frozen=True)
class Setting:
    """How to train: strategy, AMP (`off`, `bf16`, `fp16` or `auto`), checkpointing."""

    strategy: str
    amp: str
    checkpointing: bool


@dataclass(frozen=True)
class Grid:
    """The points to measure, and when not to bother."""

    settings: list[Setting]
    batches: list[int]  # per process
    lengths: list[int]
    steps: int = 2
    max_cell_tokens: int = 1 << 20  # per process and step; bigger points are skipped
    usable_bytes: int = 0  # when > 0, a point whose peak exceeds it also stops bigger ones
    max_length: int = 0  # the model's position limit (0: unknown)


@dataclass
class Cell:
    """One measured (or skipped) point; memory figures are per process (the max over ranks)."""

    strategy: str
    amp: str  # resolved: off, bf16 or fp16
    checkpointing: bool
    batch: int  # per process
    length: int
    world_size: int = 1
    status: str = "ok"  # ok | oom | too-big (a smaller point did not fit) | skipped
    note: str = ""
    step_seconds: float = 0.0
    samples_per_s: float = 0.0  # all processes together
    tokens_per_s: float = 0.0
    peak_bytes: int = 0
    base_bytes: int = 0  # in use before the point: model, runtime
    reserved_bytes: int = 0  # GPU: the allocator's reserved peak


def amp_name(amp: str, device: torch.device) -> str:
    """What an `--amp` value means on this device: off, bf16 or fp16."""
    dtype = resolve_amp(amp, device)
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "off") if dtype else "off"


def _agree(ctx: DistContext, values: list[float]) -> list[float]:
    """The max over ranks (the slowest step, the biggest peak, any rank's OOM)."""
    if not ctx.distributed:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


def _cell(setting: Setting, ctx: DistContext, batch: int, length: int, **outcome: Any) -> Cell:
    """A grid point of `setting`, measured or not (`outcome`: status and note when skipped)."""
    amp = amp_name(setting.amp, ctx.device)
    return Cell(
        setting.strategy, amp, setting.checkpointing, batch, length, ctx.world_size, **outcome
    )


def measure_cell(
    model: torch.nn.Module, ctx: DistContext, setting: Setting, batch: int, length: int, steps: int
) -> Cell:
    """Train `steps` steps of `batch` rows x `length` tokens; peak memory and last step's time."""
    cell = _cell(setting, ctx, batch, length)
    cfg = TrainConfig(
        max_steps=steps,
        batch_size=batch,
        amp=setting.amp,
        strategy=setting.strategy,
        gradient_checkpointing=setting.checkpointing,
        warmup_ratio=0.0,
        checkpoint_each_epoch=False,
        seed=0,
    )
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 30522))
    rows = synthetic_rows(steps * batch * ctx.world_size, length, vocab, seed=batch + length)
    oom, seconds = 0.0, 0.0
    with peak_memory(ctx.device) as memory:
        try:
            seconds = train(model, rows, cfg, ctx, pad_id=0, progress=False).step_seconds[-1]
        except torch.OutOfMemoryError:
            oom = 1.0
    model.zero_grad(set_to_none=True)
    oom, seconds, peak, reserved, base = _agree(
        ctx, [oom, seconds, memory["peak"], memory.get("reserved", 0), memory["base"]]
    )
    if oom:
        cell.status, cell.note = "oom", "out of memory"
    else:
        cell.step_seconds = round(seconds, 4)
        cell.samples_per_s = round(batch * ctx.world_size / seconds, 2)
        cell.tokens_per_s = round(batch * length * ctx.world_size / seconds, 1)
    cell.peak_bytes, cell.reserved_bytes, cell.base_bytes = int(peak), int(reserved), int(base)
    return cell


def _skip(grid: Grid, failed: list[Cell], batch: int, length: int) -> tuple[str, str]:
    """(status, why) for a point not worth running, or ("", "")."""
    for cell in failed:
        if batch >= cell.batch and length >= cell.length:
            return "too-big", f"batch {cell.batch} x length {cell.length} did not fit"
    if grid.max_length and length > grid.max_length:
        return "skipped", f"longer than the model's {grid.max_length} positions"
    if batch * length > grid.max_cell_tokens:
        return "skipped", f"over {grid.max_cell_tokens} tokens per step (--max-cell-tokens)"
    return "", ""


def run_grid(
    build: Callable[[], torch.nn.Module],
    ctx: DistContext,
    grid: Grid,
    on_cell: Callable[[Cell, int, int], None] | None = None,
) -> tuple[list[Cell], int]:
    """Measure every point, smallest first per setting; also return the parameter count.

    `on_cell(cell, done, total)` is called after each point (a progress display).
    """
    total = len(grid.settings) * len(grid.batches) * len(grid.lengths)
    cells: list[Cell] = []
    model: torch.nn.Module | None = None
    built_for: tuple[str, str] | None = None
    parameters = 0
    for setting in grid.settings:
        # FSDP fixes its mixed precision when it shards, so each AMP setting needs its own copy.
        key = (setting.strategy, setting.amp if setting.strategy == "fsdp" else "")
        failed: list[Cell] = []
        for length in sorted(grid.lengths):
            for batch in sorted(grid.batches):
                status, why = _skip(grid, failed, batch, length)
                if status:
                    cell = _cell(setting, ctx, batch, length, status=status, note=why)
                else:
                    if model is None or key != built_for:
                        model = None
                        trim_heap()
                        model, built_for = build(), key
                        parameters = sum(p.numel() for p in model.parameters())
                    cell = measure_cell(model, ctx, setting, batch, length, grid.steps)
                    over = grid.usable_bytes and cell.peak_bytes > grid.usable_bytes
                    if cell.status == "oom" or over:
                        failed.append(cell)
                    if cell.status == "oom" and setting.strategy == "fsdp":
                        model = None  # a shard stopped mid-step: start from a fresh copy
                cells.append(cell)
                if on_cell is not None:
                    on_cell(cell, len(cells), total)
    return cells, parameters


def model_builder(model_dir: Path | None, config: str | None) -> Callable[[], torch.nn.Module]:
    """A function that makes a fresh model: a directory's weights, or a random BERT size."""
    if model_dir is not None:
        return lambda: load_model(model_dir)
    name = config or "bert-base"
    return lambda: synthetic_bert(name)
