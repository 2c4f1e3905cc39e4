"""Pure functions that shape a dynamic batch into forward passes. No Ray, no torch.

Plain batching pads every text to the longest in the batch; review lengths vary a lot, so most
of a forward would be spent on padding. Sorting by length and cutting the sorted list into
micro-batches under a padded-token budget keeps each forward dense.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

PAD_MULTIPLE = 8  # tensor cores and oneDNN kernels like lengths that are multiples of 8
# ONNX Runtime on a CPU gains nothing from them: a forward at the longest row's own width
# costs 2-4% less CPU a text, the same answers (docs/benchmarks.md, "Forwards at their own
# width").
EXACT_WIDTH_BACKENDS = ("onnx", "onnx-int8")


def round_up(length: int, multiple: int = PAD_MULTIPLE) -> int:
    """Round a sequence length up to the padding multiple."""
    return -(-length // multiple) * multiple


def pad_multiple(backend: str, device: str) -> int:
    """What a forward's width is rounded up to on `backend` (a backend name) and `device`
    (`cpu`, `cuda`): 1 for ONNX Runtime on a CPU, else PAD_MULTIPLE."""
    return 1 if device == "cpu" and backend in EXACT_WIDTH_BACKENDS else PAD_MULTIPLE


@dataclass
class Item:
    """One text waiting for a batch."""

    ids: list[int]
    deadline: float  # time.monotonic() after which the answer is useless
    enqueued: float  # time.monotonic() at admission, for the queue-wait metric


def split_expired(items: Sequence[Item], now: float) -> tuple[list[int], list[int]]:
    """Indices of items still worth computing, and of those whose deadline has passed."""
    live = [i for i, item in enumerate(items) if item.deadline > now]
    expired = [i for i, item in enumerate(items) if item.deadline <= now]
    return live, expired


def padded_cost(lengths: Sequence[int], multiple: int = PAD_MULTIPLE) -> int:
    """Tokens a forward really computes: longest length (rounded up) times rows."""
    return round_up(max(lengths), multiple) * len(lengths) if lengths else 0


def plan_micro_batches(
    lengths: Sequence[int],
    budget: int,
    overhead: int = 0,
    multiple: int = PAD_MULTIPLE,
) -> list[list[int]]:
    """Split item indices into length-sorted forwards that cost the least in total.

    A forward costs its padded tokens (rows x longest length, rounded up to `multiple`) plus
    `overhead` token-equivalents of fixed cost (kernel launches, Python), and may not exceed
    `budget` padded tokens. Two plans are made and the cheaper is kept: filling each forward up
    to the budget in sorted order, and the best grouping of whole runs of equal rounded length
    (dynamic programming), which keeps short texts out of long forwards unless merging saves
    more than a forward's overhead. Every index appears exactly once; an item longer than the
    budget gets a forward of its own.
    """
    if len(lengths) == 1:  # the one plan there is (a lone request, every time at one client)
        return [[0]]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    widths = [round_up(lengths[i], multiple) for i in order]
    plans = [_fill(widths, budget), _by_runs(widths, budget, overhead)]

    def cost(plan: list[tuple[int, int]]) -> int:
        return sum(widths[end - 1] * (end - begin) + overhead for begin, end in plan)

    best = min(plans, key=cost)
    return [order[begin:end] for begin, end in best]


def _fill(widths: list[int], budget: int) -> list[tuple[int, int]]:
    """[begin, end) spans of sorted positions, each filled up to the budget."""
    spans: list[tuple[int, int]] = []
    begin = 0
    for pos, width in enumerate(widths):
        if pos > begin and width * (pos + 1 - begin) > budget:
            spans.append((begin, pos))
            begin = pos
    return [*spans, (begin, len(widths))] if widths else []


def _by_runs(widths: list[int], budget: int, overhead: int) -> list[tuple[int, int]]:
    """Cheapest spans made of whole runs of equal width (a run over budget is cut evenly)."""
    runs: list[list[int]] = []  # [width, begin, end)
    for pos, width in enumerate(widths):
        if runs and runs[-1][0] == width:
            runs[-1][2] = pos + 1
        else:
            runs.append([width, pos, pos + 1])
    best = [0.0] + [math.inf] * len(runs)
    first = [0] * (len(runs) + 1)  # first run of the last span in the best plan of runs[:k]
    for k in range(1, len(runs) + 1):
        width, rows = runs[k - 1][0], 0
        for j in range(k, 0, -1):
            rows += runs[j - 1][2] - runs[j - 1][1]
            if rows * width <= budget:
                cost = rows * width + overhead
            elif j == k:
                cost = rows * width + overhead * -(-rows // max(1, budget // width))
            else:
                break
            if best[j - 1] + cost < best[k]:
                best[k], first[k] = best[j - 1] + cost, j
    spans: list[tuple[int, int]] = []
    k = len(runs)
    while k > 0:
        j = first[k]
        begin, end, width = runs[j - 1][1], runs[k - 1][2], runs[k - 1][0]
        # A span over budget can only be one run alone: cut it into full forwards.
        per = max(1, budget // width) if (end - begin) * width > budget else end - begin
        spans[:0] = [(c, min(end, c + per)) for c in range(begin, end, per)]
        k = j - 1
    return spans


def padding_ratio(lengths: Sequence[int], multiple: int = PAD_MULTIPLE) -> float:
    """Share of a forward's tokens that are padding."""
    total = padded_cost(lengths, multiple)
    return 1.0 - sum(lengths) / total if total else 0.0
