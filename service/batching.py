"""Pure functions that shape a dynamic batch into forward passes. No Ray, no torch.

Plain batching pads every text to the longest in the batch; review lengths vary a lot, so most
of a forward would be spent on padding. Sorting by length and cutting the sorted list into
micro-batches under a padded-token budget keeps each forward dense.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from service.model import PAD_MULTIPLE, round_up

T = TypeVar("T")


@dataclass
class Item:
    """One text waiting in the dynamic batch queue."""

    ids: list[int]
    deadline: float  # time.monotonic() after which the answer is useless
    enqueued: float  # time.monotonic() at admission, for the queue-wait metric
    cost: int = 1  # slots, see item_cost; fixed at admission


def item_cost(num_tokens: int, max_batch_tokens: int, max_batch_texts: int) -> int:
    """Slots one text takes in a dynamic batch of `max_batch_texts` slots.

    Ray's `@serve.batch` knows one limit (`max_batch_size`, here the slot count). A slot stands
    for `max_batch_tokens / max_batch_texts` tokens and every text takes at least one, so that
    single limit caps both texts and tokens per batch. Rounding up keeps the token cap strict.
    """
    return max(1, -(-num_tokens * max_batch_texts // max_batch_tokens))


def batch_cost(items: Sequence[Item]) -> int:
    """Ray's `batch_size_fn`: the slots the items take."""
    return sum(item.cost for item in items)


def split_expired(items: Sequence[Item], now: float) -> tuple[list[int], list[int]]:
    """Indices of items still worth computing, and of those whose deadline has passed."""
    live = [i for i, item in enumerate(items) if item.deadline > now]
    expired = [i for i, item in enumerate(items) if item.deadline <= now]
    return live, expired


def padded_cost(lengths: Sequence[int], multiple: int = PAD_MULTIPLE) -> int:
    """Tokens a forward really computes: longest length (rounded up) times rows."""
    return round_up(max(lengths), multiple) * len(lengths) if lengths else 0


def plan_micro_batches(
    lengths: Sequence[int], budget: int, multiple: int = PAD_MULTIPLE
) -> list[list[int]]:
    """Split item indices into length-sorted groups whose padded cost fits `budget`.

    Every index appears exactly once. A single item longer than the budget still gets its own
    group (the settings validator prevents that in the service).
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Sorted ascending, so the newcomer is the longest of the group.
        width = round_up(lengths[i], multiple)
        if current and width * (len(current) + 1) > budget:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def scatter(groups: Sequence[Sequence[int]], outputs: Sequence[Sequence[T]], n: int) -> list[T]:
    """Put each group's outputs back at their original indices; checks one output per input."""
    result: list[T | None] = [None] * n
    for group, out in zip(groups, outputs, strict=True):
        if len(out) != len(group):
            raise ValueError(f"forward returned {len(out)} outputs for {len(group)} inputs")
        for index, value in zip(group, out, strict=True):
            if result[index] is not None:
                raise ValueError(f"index {index} answered twice")
            result[index] = value
    missing = [i for i, v in enumerate(result) if v is None]
    if missing:
        raise ValueError(f"indices {missing[:5]} got no output")
    return result  # type: ignore[return-value]


def padding_ratio(lengths: Sequence[int], multiple: int = PAD_MULTIPLE) -> float:
    """Share of a forward's tokens that are padding."""
    total = padded_cost(lengths, multiple)
    return 1.0 - sum(lengths) / total if total else 0.0
