"""Length-aware micro-batching: budgets, ordering, one output per input."""

from __future__ import annotations

import random

import pytest

from service.batching import (
    Item,
    batch_cost,
    item_cost,
    padded_cost,
    padding_ratio,
    plan_micro_batches,
    scatter,
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
    groups = plan_micro_batches(lengths, budget=3 * 216)
    assert [sorted(lengths[i] for i in g) for g in groups] == [[4, 5, 6], [190, 200, 210]]
    unsorted_waste = padding_ratio(lengths)
    sorted_waste = max(padding_ratio([lengths[i] for i in g]) for g in groups)
    assert sorted_waste < unsorted_waste


def test_plan_gives_an_oversized_item_its_own_group() -> None:
    assert plan_micro_batches([300, 10], budget=64) == [[1], [0]]


def test_plan_of_nothing_is_nothing() -> None:
    assert plan_micro_batches([], budget=64) == []


def test_padded_cost_rounds_length_up_to_multiple_of_8() -> None:
    assert padded_cost([3, 9]) == 16 * 2
    assert padded_cost([8]) == 8
    assert padded_cost([]) == 0


@pytest.mark.parametrize("seed", range(5))
def test_scatter_restores_input_order(seed: int) -> None:
    lengths = random_lengths(seed, 50)
    groups = plan_micro_batches(lengths, 512)
    outputs = [[("out", i) for i in g] for g in groups]
    assert scatter(groups, outputs, len(lengths)) == [("out", i) for i in range(len(lengths))]


def test_scatter_refuses_a_short_output() -> None:
    with pytest.raises(ValueError, match="2 outputs for 3 inputs"):
        scatter([[0, 1, 2]], [["a", "b"]], 3)


def test_scatter_refuses_a_missing_index() -> None:
    with pytest.raises(ValueError, match="got no output"):
        scatter([[0]], [["a"]], 2)


def fits(items: list[Item], slots: int) -> int:
    """How many items Ray takes before the next would push the cost over `slots`."""
    return max(n for n in range(len(items) + 1) if batch_cost(items[:n]) <= slots)


def test_item_cost_caps_texts_and_tokens_with_one_limit() -> None:
    budget, max_texts = 1024, 8  # one slot = 128 tokens
    short = [Item([1] * 5, 0.0, 0.0, item_cost(5, budget, max_texts)) for _ in range(20)]
    assert fits(short, max_texts) == max_texts
    long = [Item([1] * 300, 0.0, 0.0, item_cost(300, budget, max_texts)) for _ in range(5)]
    assert item_cost(300, budget, max_texts) == 3
    assert fits(long, max_texts) == 2


@pytest.mark.parametrize("seed", range(20))
def test_any_admitted_batch_respects_both_limits(seed: int) -> None:
    budget, max_texts = 4096, 64
    lengths = random_lengths(seed, 200)
    items = [Item([1] * n, 0.0, 0.0, item_cost(n, budget, max_texts)) for n in lengths]
    n = fits(items, max_texts)
    assert 1 <= n <= max_texts
    assert sum(lengths[:n]) <= budget


def test_a_full_length_text_fits_when_max_seq_len_fits_the_budget() -> None:
    assert item_cost(256, max_batch_tokens=256, max_batch_texts=64) == 64


def test_split_expired() -> None:
    items = [Item([1], deadline, 0.0, 1) for deadline in (5.0, 1.0, 9.0, 2.0)]
    assert split_expired(items, now=3.0) == ([0, 2], [1, 3])


def test_padding_ratio() -> None:
    assert padding_ratio([8, 8]) == 0.0
    assert padding_ratio([4, 8]) == pytest.approx(0.25)
    assert padding_ratio([]) == 0.0
