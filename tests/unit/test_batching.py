"""Length-aware micro-batching: budgets, ordering, one output per input."""

from __future__ import annotations

import random

import pytest

from service.batching import (
    Item,
    pad_multiple,
    padded_cost,
    padding_ratio,
    plan_micro_batches,
    split_expired,
)


def random_lengths(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(3, 256) for _ in range(n)]


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("budget", [256, 1024, 4096])
def test_plan_covers_every_index_once_within_budget(seed: int, budget: int) -> None:
    lengths = random_lengths(seed, 1 + seed * 7)
    groups = plan_micro_batches(lengths, budget)
    flat = sorted(i for g in groups for i in g)
    assert flat == list(range(len(lengths)))
    for group in groups:
        assert padded_cost([lengths[i] for i in group]) <= budget


def test_plan_sorts_by_length_so_groups_are_dense() -> None:
    lengths = [200, 5, 190, 6, 210, 4]
    groups = plan_micro_batches(lengths, budget=3 * 216, overhead=64)
    assert [sorted(lengths[i] for i in g) for g in groups] == [[4, 5, 6], [190, 200, 210]]
    unsorted_waste = padding_ratio(lengths)
    sorted_waste = max(padding_ratio([lengths[i] for i in g]) for g in groups)
    assert sorted_waste < unsorted_waste


def total_cost(lengths: list[int], groups: list[list[int]], overhead: int) -> int:
    return sum(padded_cost([lengths[i] for i in g]) + overhead for g in groups)


def greedy(lengths: list[int], budget: int) -> list[list[int]]:
    """Fill each forward up to the budget in sorted order (the plan this one replaces)."""
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if groups and padded_cost([lengths[j] for j in [*groups[-1], i]]) <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize(("budget", "overhead"), [(1024, 128), (4096, 192), (4096, 2048)])
def test_plan_never_costs_more_than_filling_forwards_in_order(
    seed: int, budget: int, overhead: int
) -> None:
    lengths = random_lengths(seed, 1 + seed * 9)
    planned = plan_micro_batches(lengths, budget, overhead)
    assert total_cost(lengths, planned, overhead) <= total_cost(
        lengths, greedy(lengths, budget), overhead
    )


def test_plan_keeps_short_texts_out_of_a_long_forward() -> None:
    # Greedy puts the 7 short texts with the long one (8 x 256 = 2048 padded tokens).
    lengths = [10] * 7 + [250]
    groups = plan_micro_batches(lengths, budget=2048, overhead=128)
    assert sorted(map(len, groups)) == [1, 7]
    assert total_cost(lengths, groups, 128) < total_cost(lengths, greedy(lengths, 2048), 128)


def test_a_large_overhead_merges_forwards() -> None:
    lengths = [10] * 7 + [250]
    assert len(plan_micro_batches(lengths, budget=2048, overhead=4096)) == 1


def test_plan_gives_an_oversized_item_its_own_group() -> None:
    assert plan_micro_batches([300, 10], budget=64) == [[1], [0]]


def test_plan_of_nothing_is_nothing() -> None:
    assert plan_micro_batches([], budget=64) == []


def test_padded_cost_rounds_length_up_to_multiple_of_8() -> None:
    assert padded_cost([3, 9]) == 16 * 2
    assert padded_cost([8]) == 8
    assert padded_cost([]) == 0


def test_only_onnx_runtime_on_a_cpu_computes_at_a_rows_own_width() -> None:
    assert pad_multiple("onnx", "cpu") == pad_multiple("onnx-int8", "cpu") == 1
    assert pad_multiple("torch", "cpu") == pad_multiple("onnx", "cuda") == 8
    assert pad_multiple("tensorrt", "cuda") == 8
    assert padded_cost([3, 9], pad_multiple("onnx", "cpu")) == 9 * 2


def test_split_expired() -> None:
    items = [Item([1], deadline, 0.0) for deadline in (5.0, 1.0, 9.0, 2.0)]
    assert split_expired(items, now=3.0) == ([0, 2], [1, 3])


def test_padding_ratio() -> None:
    assert padding_ratio([8, 8]) == 0.0
    assert padding_ratio([4, 8]) == pytest.approx(0.25)
    assert padding_ratio([]) == 0.0
