"""`python -m training probe` (`make train-probe`): which training settings fit a memory limit.

Measures one training step's peak memory and time over batch x length, AMP off/on and
activation checkpointing off/on (and DDP vs FSDP under torchrun), then says per length the
largest batch that fits `--memory-limit` and the tokens/s it gives. Defaults follow the
device: a small grid on the CPU (a few minutes), a wide one on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from service.cliargs import count, counts, one_of_each, size, whole
from training.distributed import DEVICES
from training.optim import AMP_MODES

DEFAULTS = {
    # batch sizes, lengths, AMP values, largest point (tokens per process and step)
    "cpu": ("1,4", "32,128", "off,bf16", 512),
    "cuda": ("8,16,32,64,128", "128,256,512", "off,auto", 1 << 20),
}


def add_probe_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `probe` sub-command's arguments."""
    p = sub.add_parser(
        "probe",
        help="training memory and speed per batch x length; which settings fit a limit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    model = p.add_mutually_exclusive_group()
    model.add_argument("--model", type=Path, help="local model directory (its weights)")
    model.add_argument(
        "--config", choices=["bert-base", "bert-large"], help="random weights (default bert-base)"
    )
    p.add_argument("--device", choices=DEVICES, default="auto", help="cuda: the LOCAL_RANK GPU")
    p.add_argument(
        "--batch-sizes", type=counts, help="per process, comma-separated (CPU 1,4; GPU 8..128)"
    )
    p.add_argument(
        "--lengths", type=counts, help="tokens, comma-separated (CPU 32,128; GPU 128,256,512)"
    )
    p.add_argument(
        "--amp",
        type=one_of_each(*AMP_MODES),
        help="comma-separated off/auto/bf16/fp16 (CPU off,bf16; GPU off,auto)",
    )
    p.add_argument(
        "--checkpointing",
        type=one_of_each("off", "on"),
        default="off,on",
        help="activation checkpointing values",
    )
    p.add_argument("--strategies", help="ddp and/or fsdp (default: both under torchrun)")
    p.add_argument("--steps", type=count, default=2, help="steps per point (the last is timed)")
    p.add_argument("--max-cell-tokens", type=count, help="skip bigger points (CPU default 512)")
    p.add_argument(
        "--memory-limit", type=size, help="e.g. 40GiB (default: the GPU's size or free RAM)"
    )
    p.add_argument("--threads", type=whole, default=0, help="torch threads (0: default)")
    p.add_argument("--json", type=Path, help="also write cells and advice to this file")


def _items(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _available_memory(device: Any) -> int:
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 8 << 30


def _max_length(args: argparse.Namespace) -> int:
    if args.model is None:
        return 512  # BertConfig's max_position_embeddings
    config = json.loads((args.model / "config.json").read_text())
    return int(config.get("max_position_embeddings", 0))


def run_probe(args: argparse.Namespace) -> int:
    """Measure the grid, print the table and the advice, write JSON; rank 0 reports."""
    import torch
    from tqdm.auto import tqdm

    from service import peakmem
    from training import memprobe, probereport
    from training.distributed import setup_distributed, teardown_distributed
    from training.strategy import STRATEGIES, SetupError

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.model is not None and not (args.model / "config.json").is_file():
        raise SetupError(f"--model {args.model}: no config.json there")
    ctx = setup_distributed(args.device)
    try:
        batches, lengths, amps, cap = DEFAULTS["cuda" if ctx.device.type == "cuda" else "cpu"]
        strategies = _items(args.strategies or ("ddp,fsdp" if ctx.distributed else "ddp"))
        for name in strategies:
            if name not in STRATEGIES:
                raise SetupError(f"unknown strategy {name!r}; use {', '.join(STRATEGIES)}")
        if "fsdp" in strategies and not ctx.distributed:
            raise SetupError("fsdp needs several processes: run the probe under torchrun")
        limit = args.memory_limit or _available_memory(ctx.device)
        settings = [
            memprobe.Setting(strategy, amp, ckpt == "on")
            for strategy in strategies
            for amp in args.amp or _items(amps)
            for ckpt in args.checkpointing
        ]
        grid = memprobe.Grid(
            settings=settings,
            batches=args.batch_sizes or counts(batches),
            lengths=args.lengths or counts(lengths),
            steps=max(2, args.steps),
            max_cell_tokens=args.max_cell_tokens or cap,
            usable_bytes=int(limit * probereport.HEADROOM),
            max_length=_max_length(args),
        )
        total = len(settings) * len(grid.batches) * len(grid.lengths)
        bar = tqdm(total=total, desc="probe", unit="point", disable=not ctx.is_main)

        def progress(cell: memprobe.Cell, done: int, total: int) -> None:
            bar.set_postfix_str(
                f"{cell.strategy} amp {cell.amp} ckpt {'on' if cell.checkpointing else 'off'} "
                f"batch {cell.batch} length {cell.length}: {cell.status}"
            )
            bar.update(1)

        build = memprobe.model_builder(args.model, args.config)
        cells, params = memprobe.run_grid(build, ctx, grid, progress)
        bar.close()
    finally:
        teardown_distributed(ctx)
    if not ctx.is_main:
        return 0
    advice = probereport.advise(cells, limit)
    name = str(args.model) if args.model else f"synthetic {args.config or 'bert-base'}"
    device = torch.cuda.get_device_name(ctx.device) if ctx.device.type == "cuda" else "cpu"
    where = (
        f"{name} ({params / 1e6:.1f}M parameters), {device}, {ctx.world_size} process(es) x "
        f"{torch.get_num_threads()} thread(s), {grid.steps} steps per point"
    )
    print(probereport.format_table(cells, advice, where), flush=True)
    if args.json:
        doc = probereport.report_json(
            cells,
            advice,
            model=name,
            parameters=params,
            device=device,
            world_size=ctx.world_size,
            memory=peakmem.memory_method(ctx.device),
            steps_per_point=grid.steps,
            torch=torch.__version__,
            cores=os.cpu_count(),
        )
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    return 0
