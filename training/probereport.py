"""The training probe's verdict: which settings fit a memory limit, as a table and as JSON.

Pure functions over measured cells (training/memprobe.py), so the advice is testable on
made-up figures. A point fits when it ran and its peak is at most HEADROOM of the limit: the
rest is left for allocator fragmentation, the CUDA context and the runtime, which the torch
allocator's peak does not count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

# The same size syntax as `python -m service probe` (re-exported for the CLI).
from service.probe import parse_size as parse_size
from training.memprobe import Cell

HEADROOM = 0.9
EXTRAPOLATE = 4
MIB = 1 << 20


@dataclass(frozen=True)
class Fit:
    """The largest batch of one setting at one length that fits, and what it gives."""

    length: int
    strategy: str
    amp: str
    checkpointing: bool
    batch: int  # per process; 0 when no measured batch fits
    samples_per_s: float
    tokens_per_s: float
    peak_bytes: int
    open_ended: bool  # nothing bigger was tried: a larger batch may fit too
    estimated_batch: int  # peak extrapolated linearly in batch (0: fewer than 2 points)
    largest_tried: int  # the largest batch that ran


@dataclass(frozen=True)
class Advice:
    """Per setting and length the largest fitting batch; per length the fastest of those."""

    memory_limit_bytes: int
    usable_bytes: int
    fits: list[Fit]
    best: list[Fit]


def fits(cell: Cell, usable: int) -> bool:
    """Whether the point ran and its peak leaves the headroom free."""
    return cell.status == "ok" and cell.peak_bytes <= usable


def _known_not_to_fit(cell: Cell, usable: int) -> bool:
    return cell.status in ("oom", "too-big") or (cell.status == "ok" and not fits(cell, usable))


def _estimate(ran: list[Cell], usable: int) -> int:
    """Batch at which the line through the two biggest measured points reaches `usable`.

    A rough guide between and a little beyond measured points, not a measurement: the report
    shows it only up to EXTRAPOLATE x the largest batch that ran.
    """
    points = sorted({c.batch: c.peak_bytes for c in ran}.items())[-2:]
    if len(points) < 2:
        return 0
    (b1, p1), (b2, p2) = points
    slope = (p2 - p1) / (b2 - b1)
    if slope <= 0:
        return 0
    return max(0, int((usable - p1) / slope) + b1)


def advise(cells: Iterable[Cell], memory_limit: int, headroom: float = HEADROOM) -> Advice:
    """Largest fitting batch per (setting, length), and the fastest fitting setting per length."""
    usable = int(memory_limit * headroom)
    groups: dict[tuple[str, str, bool, int], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.strategy, c.amp, c.checkpointing, c.length), []).append(c)
    found: list[Fit] = []
    for (strategy, amp, ckpt, length), group in groups.items():
        ok = [c for c in group if fits(c, usable)]
        top = max(ok, key=lambda c: c.batch) if ok else None
        batch = top.batch if top else 0
        bigger = [c for c in group if c.batch > batch]
        found.append(
            Fit(
                length=length,
                strategy=strategy,
                amp=amp,
                checkpointing=ckpt,
                batch=batch,
                samples_per_s=top.samples_per_s if top else 0.0,
                tokens_per_s=top.tokens_per_s if top else 0.0,
                peak_bytes=top.peak_bytes if top else 0,
                open_ended=top is not None
                and not any(c.status == "ok" or _known_not_to_fit(c, usable) for c in bigger),
                estimated_batch=_estimate([c for c in group if c.status == "ok"], usable),
                largest_tried=max((c.batch for c in group if c.status == "ok"), default=0),
            )
        )
    found.sort(key=lambda f: (f.length, f.strategy, f.amp, f.checkpointing))
    best: list[Fit] = []
    for length in sorted({f.length for f in found}):
        candidates = [f for f in found if f.length == length and f.batch > 0]
        if candidates:
            best.append(max(candidates, key=lambda f: f.tokens_per_s))
    return Advice(memory_limit, usable, found, best)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def _verdict(cell: Cell, usable: int) -> str:
    if cell.status == "ok":
        return "yes" if fits(cell, usable) else "no"
    return {"oom": "no: OOM", "too-big": "no"}.get(cell.status, "-")


def format_table(cells: list[Cell], advice: Advice, where: str) -> str:
    """Every point, then the largest fitting batch per setting and length, then the fastest."""
    lines = [
        f"Training probe on {where}",
        f"{'strategy':>8} {'amp':>4} {'ckpt':>4} {'batch':>6} {'length':>6} {'tokens':>7} "
        f"{'s/step':>8} {'samples/s':>9} {'tokens/s':>9} {'peak MiB':>9} {'+MiB':>8} fits",
    ]
    for c in cells:
        ran = c.status == "ok"
        figures = (
            f"{c.step_seconds:>8.3f} {c.samples_per_s:>9.3g} {c.tokens_per_s:>9.0f} "
            f"{c.peak_bytes / MIB:>9.1f} {(c.peak_bytes - c.base_bytes) / MIB:>8.1f}"
            if ran
            else f"{'':>8} {'':>9} {'':>9} {'':>9} {'':>8}"
        )
        note = "" if ran else f" ({c.note})"
        lines.append(
            f"{c.strategy:>8} {c.amp:>4} {_on(c.checkpointing):>4} {c.batch:>6} {c.length:>6} "
            f"{c.batch * c.length:>7} {figures} {_verdict(c, advice.usable_bytes)}{note}"
        )
    lines += [
        "",
        f"Memory limit {advice.memory_limit_bytes / MIB:.0f} MiB per process: a point fits when "
        f"its peak is at most {advice.usable_bytes / MIB:.0f} MiB "
        f"({HEADROOM:.0%}; the rest is for fragmentation and the runtime).",
        "Largest batch per process that fits (+: the largest tried, more may fit; est.: peak "
        "extrapolated linearly in batch):",
        f"{'length':>6} {'strategy':>8} {'amp':>4} {'ckpt':>4} {'batch':>6} {'samples/s':>9} "
        f"{'tokens/s':>9} {'peak MiB':>9} {'est.':>6}",
    ]
    for f in advice.fits:
        batch = f"{f.batch}{'+' if f.open_ended else ''}" if f.batch else "none"
        est = "-"
        if f.estimated_batch:
            cap = EXTRAPOLATE * f.largest_tried
            est = f"~{f.estimated_batch}" if f.estimated_batch <= cap else f">{cap}"
        lines.append(
            f"{f.length:>6} {f.strategy:>8} {f.amp:>4} {_on(f.checkpointing):>4} {batch:>6} "
            f"{f.samples_per_s:>9.3g} {f.tokens_per_s:>9.0f} {f.peak_bytes / MIB:>9.1f} {est:>6}"
        )
    lines.append("Fastest setting that fits, per length:")
    for f in advice.best:
        lines.append(
            f"  length {f.length}: --strategy {f.strategy}, AMP {f.amp}, checkpointing "
            f"{_on(f.checkpointing)}, batch {f.batch} per process: {f.tokens_per_s:.0f} tokens/s, "
            f"{f.samples_per_s:.3g} samples/s, peak {f.peak_bytes / MIB:.0f} MiB"
        )
    if not advice.best:
        lines.append("  none: no measured point fits this limit")
    return "\n".join(lines)


def report_json(cells: list[Cell], advice: Advice, **about: Any) -> dict[str, Any]:
    """What the JSON file holds: what was probed, every cell, the advice."""
    return {**about, "cells": [asdict(c) for c in cells], "advice": asdict(advice)}
