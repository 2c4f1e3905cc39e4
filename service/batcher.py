"""Dynamic batching on the replica's event loop: a batch is formed when a forward slot is free.

Ray's `@serve.batch` cuts its queue into batches on a timer, even while the previous batch is
still computing, so under load those batches wait for their turn half-empty (measured here:
2.3 texts per batch with 64 concurrent clients). Here one loop owns the model: while a batch
computes, arrivals queue up, and the next batch takes all of them, up to the limits, the moment
the model is free. Only an idle model waits, briefly, for company.

A batch's results are delivered part by part, as `run` yields them (one part per forward), so
the clients of the first forwards are answered, and can send their next request, while the
rest of the batch computes; that request then joins the very next batch.

With `concurrency` above one (forwards on several CPU threads at once), a batch is taken as
soon as any slot is free, so a second forward thread never waits for the first one's batch.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Batcher(Generic[T, R]):
    """Coalesces submitted items into batches for up to `concurrency` `run`s at a time, first
    come first served.

    A batch holds at most `max_items` of `count(item)` (1 per item unless given: an item may
    carry many texts) and `max_size` of `size(item)` in total; an item over either limit on its
    own still runs, alone. `run(batch)` yields lists of (index in the batch, result); every
    item must get exactly one result.

    Nothing waits in the queue for nobody: a cancelled waiter's item leaves at once, and with
    `deadline` (time.monotonic() after which an item is useless) and `expired` (its answer
    then), an item still queued at its deadline leaves with that answer, even while a batch
    computes or the model hangs.

    `taken(batch, idle)` hears of each batch as it leaves the queue, and whether an idle
    model gathered it (its items' time in the queue was a wait for company, not for work).
    """

    def __init__(
        self,
        run: Callable[[list[T]], AsyncIterator[Sequence[tuple[int, R]]]],
        size: Callable[[T], int],
        max_items: int,
        max_size: int,
        wait_s: float,
        count: Callable[[T], int] = lambda _: 1,
        deadline: Callable[[T], float] | None = None,
        expired: Callable[[T], R] | None = None,
        concurrency: int = 1,
        taken: Callable[[list[T], bool], None] = lambda batch, idle: None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.run = run
        self.concurrency = concurrency
        self.size = size
        self.count = count
        self.deadline = deadline
        self.expired = expired
        self.taken = taken
        self.configure(max_items, max_size, wait_s)
        # Insertion order is arrival order; keyed by future, so a gone waiter leaves in O(1).
        self._queue: OrderedDict[asyncio.Future[R], tuple[T, asyncio.TimerHandle | None]]
        self._queue = OrderedDict()
        self._queued_size = 0
        self._queued_count = 0
        self._arrived = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()  # batches computing
        self._idle = True  # nothing computing, and the queue ran empty since the last batch
        self._task: asyncio.Task[None] | None = None

    def configure(self, max_items: int, max_size: int, wait_s: float) -> None:
        """New limits; they apply from the next batch on."""
        self.max_items, self.max_size, self.wait_s = max_items, max_size, wait_s

    @property
    def queued(self) -> int:
        """`count` of the items waiting for a batch (not those computing)."""
        return self._queued_count

    async def submit(self, item: T) -> R:
        """Queue `item` and wait for its result (or its batch's exception)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        timer = None
        if self.deadline is not None and self.expired is not None:
            delay = max(0.0, self.deadline(item) - time.monotonic())
            timer = loop.call_later(delay, self._expire, future)
        self._queue[future] = (item, timer)
        self._queued_size += self.size(item)
        self._queued_count += self.count(item)
        self._arrived.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._loop(), name="batcher")
        try:
            return await future
        except asyncio.CancelledError:  # the caller left: its item must not wait for a batch
            self._remove(future)
            raise

    def _remove(self, future: asyncio.Future[R]) -> T | None:
        """Take a waiter's item out of the queue (None when it is no longer queued)."""
        entry = self._queue.pop(future, None)
        if entry is None:
            return None
        item, timer = entry
        if timer is not None:
            timer.cancel()
        self._queued_size -= self.size(item)
        self._queued_count -= self.count(item)
        return item

    def _expire(self, future: asyncio.Future[R]) -> None:
        item = self._remove(future)
        if item is not None and self.expired is not None and not future.done():
            future.set_result(self.expired(item))

    async def _loop(self) -> None:
        while True:
            while not self._queue:
                self._arrived.clear()
                await self._arrived.wait()
            idle = self._idle
            if idle:
                await self._wait_for_company()
            while len(self._running) >= self.concurrency:
                self._slot_freed.clear()
                await self._slot_freed.wait()
            batch = self._take()
            if batch:
                items = [item for item, _ in batch]
                self.taken(items, idle)
                task = asyncio.get_running_loop().create_task(self._run(batch, items))
                self._running.add(task)
                task.add_done_callback(self._finished)
                self._idle = False
            else:  # every item queued had left
                self._idle = not self._running

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._idle = not self._running and not self._queue
        self._slot_freed.set()

    async def _wait_for_company(self) -> None:
        """The model was idle: let the first arrival wait up to `wait_s` for a fuller batch."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while self._queued_count < self.max_items and self._queued_size < self.max_size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), remaining)
            except asyncio.TimeoutError:
                return

    def _take(self) -> list[tuple[T, asyncio.Future[R]]]:
        """The longest prefix of the queue within both limits."""
        batch: list[tuple[T, asyncio.Future[R]]] = []
        gone: list[asyncio.Future[R]] = []  # cancelled; their waiter has not run yet
        total = items = 0
        for future, (item, _) in self._queue.items():
            if future.done():
                gone.append(future)
                continue
            size, count = self.size(item), self.count(item)
            if batch and (items + count > self.max_items or total + size > self.max_size):
                break
            batch.append((item, future))
            total += size
            items += count
        for future in gone + [future for _, future in batch]:
            self._remove(future)
        return batch

    async def _run(self, batch: list[tuple[T, asyncio.Future[R]]], items: list[T]) -> None:
        answered = [False] * len(batch)
        try:
            async for part in self.run(items):
                for index, result in part:
                    if answered[index]:
                        raise RuntimeError(f"item {index} of the batch answered twice")
                    answered[index] = True
                    future = batch[index][1]
                    if not future.done():
                        future.set_result(result)
            missing = answered.count(False)
            if missing:
                raise RuntimeError(f"{missing} of {len(batch)} items got no result")
        except Exception as exc:  # every waiter left in the batch must hear of it
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
