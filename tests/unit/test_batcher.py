"""The replica's batcher, on a plain asyncio loop: batches form when the model is free."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from service.batcher import Batcher


class Model:
    """Records each batch; computes only when the test lets it."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = False

    async def run(self, items: list[str]) -> AsyncIterator[list[tuple[int, str]]]:
        self.batches.append(items)
        await self.gate.wait()
        if self.fail:
            raise ValueError("model broke")
        yield [(i, item.upper()) for i, item in enumerate(items)]


def batcher(
    model: Model, max_items: int = 100, max_size: int = 1000, wait_s: float = 0.0
) -> Batcher[str, str]:
    return Batcher(model.run, len, max_items, max_size, wait_s)


async def occupy(model: Model, b: Batcher[str, str]) -> asyncio.Task[str]:
    """Start a batch of one ("z") that computes until the test opens the model's gate."""
    model.gate.clear()
    started = len(model.batches)
    busy = asyncio.create_task(b.submit("z"))
    await until(lambda: len(model.batches) > started)
    return busy


async def until(condition: Callable[[], bool], timeout_s: float = 2.0) -> None:
    """Let the loop run until `condition` holds (or `timeout_s` passes): a fixed sleep is not
    enough when the process waits for a core behind other work, as `make test` runs it."""
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        await asyncio.sleep(0.001)


def on_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test body on a fresh event loop."""

    @functools.wraps(test)
    def wrapper() -> None:
        asyncio.run(test())

    return wrapper


@on_loop
async def test_arrivals_during_a_forward_form_the_next_batch() -> None:
    model = Model()
    b = batcher(model)
    model.gate.clear()
    first = asyncio.create_task(b.submit("a"))
    await until(lambda: len(model.batches) == 1)  # "a" is computing
    rest = [asyncio.create_task(b.submit(x)) for x in "bcdef"]
    await until(lambda: b.queued == 5)
    assert b.queued == 5
    model.gate.set()
    assert await first == "A"
    assert await asyncio.gather(*rest) == list("BCDEF")
    assert model.batches == [["a"], list("bcdef")]  # all five together, in arrival order


@on_loop
async def test_limits_cap_items_and_total_size() -> None:
    model = Model()
    b = batcher(model, max_items=3, max_size=6)
    blocker = await occupy(model, b)
    texts = ["aa", "bb", "cc", "d", "eeeeeeeee", "f", "g", "h"]
    tasks = [asyncio.create_task(b.submit(t)) for t in texts]
    await until(lambda: b.queued == len(texts))
    model.gate.set()
    await asyncio.gather(blocker, *tasks)
    assert model.batches[1:] == [["aa", "bb", "cc"], ["d"], ["eeeeeeeee"], ["f", "g", "h"]]
    for batch in model.batches[1:]:
        assert len(batch) <= 3
        assert sum(map(len, batch)) <= 6 or len(batch) == 1  # an oversized item runs alone


@on_loop
async def test_an_idle_model_waits_briefly_for_company() -> None:
    model = Model()
    b = batcher(model, wait_s=0.2)
    first = asyncio.create_task(b.submit("a"))
    await asyncio.sleep(0.02)
    second = asyncio.create_task(b.submit("b"))
    assert await asyncio.gather(first, second) == ["A", "B"]
    assert model.batches == [["a", "b"]]


@on_loop
async def test_taken_hears_which_batches_an_idle_model_gathered() -> None:
    model = Model()
    taken: list[tuple[list[str], bool]] = []
    b = Batcher(
        model.run, len, 100, 1000, 0.05, taken=lambda items, idle: taken.append((items, idle))
    )
    busy = await occupy(model, b)  # gathered by an idle model
    queued = asyncio.create_task(b.submit("q"))  # waits for the model, not for company
    await until(lambda: b.queued == 1)
    model.gate.set()
    assert await busy == "Z" and await queued == "Q"
    assert taken == [(["z"], True), (["q"], False)]


@on_loop
async def test_a_full_batch_does_not_wait_out_the_timeout() -> None:
    model = Model()
    b = batcher(model, max_items=2, wait_s=30.0)
    results = await asyncio.wait_for(asyncio.gather(b.submit("a"), b.submit("b")), 5)
    assert results == ["A", "B"]


@on_loop
async def test_cancelled_waiters_are_not_computed() -> None:
    model = Model()
    b = batcher(model)
    blocker = await occupy(model, b)
    gone = asyncio.create_task(b.submit("gone"))
    kept = asyncio.create_task(b.submit("kept"))
    await until(lambda: b.queued == 2)
    gone.cancel()
    await asyncio.sleep(0)
    model.gate.set()
    assert await kept == "KEPT"
    await blocker
    assert ["gone"] not in model.batches and ["kept"] in model.batches


@on_loop
async def test_a_failed_batch_fails_its_waiters_and_the_next_batch_runs() -> None:
    model = Model()
    b = batcher(model)
    model.fail = True
    with pytest.raises(ValueError, match="model broke"):
        await b.submit("a")
    model.fail = False
    assert await b.submit("b") == "B"


@on_loop
async def test_parts_are_answered_before_the_rest_of_the_batch_computes() -> None:
    second_part = asyncio.Event()

    async def two_forwards(items: list[str]) -> AsyncIterator[list[tuple[int, str]]]:
        yield [(0, "first")]
        await second_part.wait()
        yield [(1, "second")]

    b: Batcher[str, str] = Batcher(two_forwards, len, 10, 100, 0.05)
    first, second = asyncio.create_task(b.submit("a")), asyncio.create_task(b.submit("b"))
    assert await asyncio.wait_for(first, 5) == "first"
    assert not second.done()
    second_part.set()
    assert await second == "second"


@on_loop
async def test_a_missing_or_repeated_result_is_an_error_not_a_hang() -> None:
    async def short(items: list[str]) -> AsyncIterator[list[tuple[int, str]]]:
        yield [(0, "only")]

    async def twice(items: list[str]) -> AsyncIterator[list[tuple[int, str]]]:
        yield [(0, "x"), (0, "y")]

    b: Batcher[str, str] = Batcher(short, len, 10, 100, 0.05)
    results = await asyncio.wait_for(
        asyncio.gather(b.submit("a"), b.submit("b"), return_exceptions=True), 5
    )
    assert results[0] == "only"
    assert isinstance(results[1], RuntimeError) and "1 of 2 items got no result" in str(results[1])
    b2: Batcher[str, str] = Batcher(twice, len, 10, 100, 0.05)
    with pytest.raises(RuntimeError, match="answered twice"):
        await asyncio.wait_for(asyncio.gather(b2.submit("a"), b2.submit("b")), 5)


@on_loop
async def test_configure_applies_to_the_next_batch() -> None:
    model = Model()
    b = batcher(model, max_items=10)
    b.configure(max_items=1, max_size=1000, wait_s=0.0)
    blocker = await occupy(model, b)
    tasks = [asyncio.create_task(b.submit(x)) for x in "ab"]
    await until(lambda: b.queued == 2)
    model.gate.set()
    await asyncio.gather(blocker, *tasks)
    assert model.batches == [["z"], ["a"], ["b"]]


@on_loop
async def test_a_cancelled_waiter_leaves_the_queue_at_once() -> None:
    model = Model()
    b = batcher(model)
    blocker = await occupy(model, b)
    gone = asyncio.create_task(b.submit("gone"))
    await until(lambda: b.queued == 1)
    assert b.queued == 1
    gone.cancel()
    await asyncio.sleep(0)
    assert b.queued == 0 and not b._queue  # not when the next batch forms: now
    model.gate.set()
    await blocker


@on_loop
async def test_an_expired_item_leaves_with_its_answer_while_the_model_is_busy() -> None:
    model = Model()
    deadlines = {"soon": time.monotonic() + 0.05, "later": time.monotonic() + 60}
    b: Batcher[str, str] = Batcher(
        model.run, len, 100, 1000, 0.0,
        deadline=lambda item: deadlines.get(item, time.monotonic() + 60),
        expired=lambda item: f"{item} expired",
    )  # fmt: skip
    blocker = await occupy(model, b)
    soon = asyncio.create_task(b.submit("soon"))
    later = asyncio.create_task(b.submit("later"))
    assert await asyncio.wait_for(soon, 5) == "soon expired"  # the model is still busy
    assert b.queued == 1
    model.gate.set()
    assert await later == "LATER"
    await blocker
    assert all("soon" not in batch for batch in model.batches)


@on_loop
async def test_with_two_slots_a_second_batch_computes_beside_the_first() -> None:
    model = Model()
    b = Batcher(model.run, len, 100, 1000, 0.0, concurrency=2)
    first = await occupy(model, b)  # "z" computes until the gate opens
    second = asyncio.create_task(b.submit("a"))
    await until(lambda: len(model.batches) == 2)
    assert model.batches == [["z"], ["a"]] and b.queued == 0  # both slots busy
    third = asyncio.create_task(b.submit("b"))
    fourth = asyncio.create_task(b.submit("c"))
    await until(lambda: b.queued == 2)
    assert b.queued == 2 and len(model.batches) == 2  # no third slot: they wait, together
    model.gate.set()
    assert await asyncio.gather(first, second, third, fourth) == ["Z", "A", "B", "C"]
    assert model.batches[2:] == [["b", "c"]]


def test_a_batcher_needs_a_slot() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Batcher(Model().run, len, 100, 1000, 0.0, concurrency=0)
