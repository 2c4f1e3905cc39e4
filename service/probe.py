"""Memory probe: peak memory and speed of one forward over a grid of batch sizes x lengths.

Run before deploying a model on new hardware: it shows what one forward costs and recommends
the batch knobs that fit a memory limit. On a GPU it reads the torch allocator's peak; on the
CPU it reads the process's resident high-water mark (service/peakmem.py).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from service.batching import round_up
from service.model import SentimentModel
from service.peakmem import peak_memory

HEADROOM = 0.9  # leave 10% of the limit for fragmentation and the Ray worker itself


@dataclass(frozen=True)
class Cell:
    """One grid point: `batch` rows of `length` tokens."""

    batch: int
    length: int
    ms_per_forward: float
    texts_per_s: float
    tokens_per_s: float
    peak_bytes: int  # allocator peak (GPU) or resident set peak (CPU) during the forward
    extra_bytes: int  # peak minus the memory in use before the forward


@dataclass(frozen=True)
class Advice:
    """Settings that fit the memory limit, and why."""

    memory_limit_bytes: int
    base_bytes: int
    bytes_per_token: float
    micro_batch_tokens: int
    max_batch_tokens: int
    max_batch_texts: int
    fits: bool


def measure_cell(model: SentimentModel, batch: int, length: int, repeats: int) -> Cell:
    """Time `repeats` forwards of a `batch` x `length` input after one warm-up forward."""
    seed = model.encode(["a solid phone with a bright screen and a battery that lasts"])[0].ids
    ids = (seed * (length // len(seed) + 1))[:length]
    rows = [ids] * batch
    model.predict(rows)
    with peak_memory(model.device) as memory:
        t0 = time.perf_counter()
        for _ in range(repeats):
            model.predict(rows)
        seconds = (time.perf_counter() - t0) / repeats
    padded = round_up(length) * batch
    return Cell(
        batch=batch,
        length=length,
        ms_per_forward=round(seconds * 1000, 2),
        texts_per_s=round(batch / seconds, 1),
        tokens_per_s=round(padded / seconds, 1),
        peak_bytes=memory["peak"],
        extra_bytes=max(0, memory["peak"] - memory["base"]),
    )


def run_grid(
    model: SentimentModel,
    batches: list[int],
    lengths: list[int],
    repeats: int = 2,
    max_cell_tokens: int = 16384,
) -> list[Cell]:
    """Every cell whose padded size is at most `max_cell_tokens`, smallest first."""
    lengths = sorted({min(length, model.max_length) for length in lengths})
    return [
        measure_cell(model, b, length, repeats)
        for length in lengths
        for b in sorted(batches)
        if b * round_up(length) <= max_cell_tokens
    ]


def advise(cells: list[Cell], memory_limit: int, base: int, typical_length: int) -> Advice:
    """Largest per-forward token budget that fits the limit, capped where speed stops growing.

    Memory per padded token is taken as the worst cell's (long inputs pay for attention too),
    so the budget holds whatever lengths a forward mixes.
    """
    per_token = max(c.extra_bytes / (c.batch * round_up(c.length)) for c in cells)
    room = memory_limit * HEADROOM - base
    fit = int(room / per_token) if per_token > 0 else 1 << 20
    # Past the fastest cell, bigger forwards buy no speed, only latency and memory.
    fastest = max(cells, key=lambda c: c.tokens_per_s)
    longest = max(c.length for c in cells)
    budget = max(round_up(longest), min(fit, fastest.batch * round_up(fastest.length)))
    budget = 1 << (budget.bit_length() - 1) if budget >= 1024 else round_up(budget)
    budget = max(budget, round_up(longest))
    return Advice(
        memory_limit_bytes=memory_limit,
        base_bytes=base,
        bytes_per_token=round(per_token, 1),
        micro_batch_tokens=budget,
        max_batch_tokens=4 * budget,
        max_batch_texts=max(1, min(4096, 4 * budget // round_up(typical_length))),
        fits=fit >= round_up(longest),
    )


def available_memory(device: torch.device) -> int:
    """The device's total memory on a GPU; on the CPU, what the kernel says is available."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 << 30


def cell_dicts(cells: list[Cell]) -> list[dict[str, object]]:
    """Cells as plain dicts for JSON."""
    return [asdict(c) for c in cells]


def parse_size(text: str) -> int:
    """`16GiB`, `512MiB`, `2GB` or plain bytes -> bytes."""
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
    lowered = text.strip().lower()
    for suffix, factor in units.items():
        if lowered.endswith(suffix):
            return int(float(lowered.removesuffix(suffix)) * factor)
    return int(lowered)


def format_report(cells: list[Cell], advice: Advice, where: str, typical_length: int) -> str:
    """The grid as a table, then the recommended settings ready to paste."""
    mib = 1 << 20
    lines = [
        f"Probe on {where}",
        f"{'batch':>6} {'length':>6} {'tokens':>7} {'ms/forward':>11} {'texts/s':>9} "
        f"{'tokens/s':>10} {'peak MiB':>9} {'+MiB':>7}",
    ]
    for c in cells:
        lines.append(
            f"{c.batch:>6} {c.length:>6} {c.batch * round_up(c.length):>7} "
            f"{c.ms_per_forward:>11.1f} {c.texts_per_s:>9.1f} {c.tokens_per_s:>10.0f} "
            f"{c.peak_bytes / mib:>9.1f} {c.extra_bytes / mib:>7.1f}"
        )
    verdict = "fits" if advice.fits else "does NOT fit even one full-length text"
    lines += [
        "",
        f"Memory limit {advice.memory_limit_bytes / mib:.0f} MiB ({verdict}); model and runtime "
        f"use {advice.base_bytes / mib:.0f} MiB; worst cell {advice.bytes_per_token / 1024:.1f} "
        "KiB per padded token.",
        "Recommended (environment, or the same keys in Ray Serve's user_config):",
        f"  SENTIMENT_BATCH__MICRO_BATCH_TOKENS={advice.micro_batch_tokens}"
        "   padded tokens per forward",
        f"  SENTIMENT_BATCH__MAX_BATCH_TOKENS={advice.max_batch_tokens}"
        "   tokens per dynamic batch (about four forwards, so sorting has room)",
        f"  SENTIMENT_BATCH__MAX_BATCH_TEXTS={advice.max_batch_texts}"
        f"   texts per dynamic batch at {typical_length} tokens each",
    ]
    return "\n".join(lines)
