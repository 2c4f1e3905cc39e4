"""The ingress side of batching: many requests' texts become one call to the model replica.

A handle call costs the same CPU for one text as for a hundred, so an ingress never sends one
per request. Requests queue here already tokenized (the ingress needs their window counts to
admit them); whenever fewer than `in_flight` calls are out, everything queued (up to
`max_texts` rows) is joined into one pair of arrays and sent as one call. Nothing waits on a
timer: a lone request goes out at once, and under load the queue fills while earlier calls
are out, so calls grow with the load. Answers come back per row (window) and leave here per
text: a long text's windows are averaged back into one answer.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.chunking import Windowed, aggregate
from service.encoding import CallResult, Packed, concat, status_error

ModelCall = Callable[[Packed, npt.NDArray[np.float32]], Awaitable[CallResult]]


@dataclass(frozen=True)
class Reply:
    """One request's answer: per text a probability row, a truncation flag, a window count and
    the share of its tokens unknown to the vocabulary."""

    probs: npt.NDArray[np.float32]
    truncated: list[bool]
    windows: list[int]
    unknown: list[float]


@dataclass(eq=False)
class _Waiting:
    request: Windowed
    deadline: float  # time.monotonic()
    future: asyncio.Future[Reply]
    queued: bool = True


class Coalescer:
    """Sends queued requests' rows to the model in shared calls, `in_flight` at most."""

    def __init__(
        self,
        call: ModelCall,
        max_texts: int,
        in_flight: int,
        observe: Callable[[int, float], None] = lambda rows, tokenize_s: None,
        paced: Callable[[int, float], None] = lambda tokens, seconds: None,
    ) -> None:
        self.call = call
        self.max_texts = max_texts  # rows per call: a window counts as a text
        self.in_flight = in_flight
        self.observe = observe  # (rows in the call, seconds its requests spent tokenizing)
        # (tokens in a call, seconds it took) for calls answered with work queued behind
        # them: the pace admission predicts waits with (service.admission.Pace).
        self.paced = paced
        self._answered = 0.0  # time.monotonic() when the last call was answered
        self._queue: deque[_Waiting] = deque()
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, request: Windowed, deadline: float) -> asyncio.Future[Reply]:
        """Queue a request's rows; the future fails with DeadlineExceeded when a row's budget
        ran out in the model replica, InternalError when a row failed even in a forward of its
        own, or with the call's error."""
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        waiting = _Waiting(request, deadline, future)
        self._queue.append(waiting)
        # A request that expires or is cancelled while queued leaves the queue at once.
        future.add_done_callback(lambda _: self._queue.remove(waiting) if waiting.queued else None)
        self._pump()
        return future

    def _pump(self) -> None:
        while self._queue and self._running < self.in_flight:
            batch = self._take()
            if not batch:
                return
            self._running += 1
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._tasks.add(task)  # the loop keeps only weak references to tasks
            task.add_done_callback(self._tasks.discard)

    def _take(self) -> list[_Waiting]:
        """Queued requests up to `max_texts` rows (at least one request); gone ones dropped."""
        batch: list[_Waiting] = []
        rows = 0
        while self._queue:
            waiting = self._queue[0]
            if waiting.future.done():  # gone; its done callback has not run yet
                self._queue.popleft()
                waiting.queued = False
                continue
            if batch and rows + waiting.request.rows > self.max_texts:
                break
            batch.append(self._queue.popleft())
            waiting.queued = False
            rows += waiting.request.rows
        return batch

    async def _send(self, batch: list[_Waiting]) -> None:
        try:
            packed = concat([w.request.packed for w in batch])
            self.observe(len(packed), sum(w.request.tokenize_s for w in batch))
            sizes = [w.request.rows for w in batch]
            now = time.monotonic()
            budgets = np.repeat([w.deadline - now for w in batch], sizes).astype(np.float32)
            probs, status, idle_s = await self.call(packed, budgets)
            answered = time.monotonic()
            # Busy, not idle: the call's time is the model's pace, less any wait for company
            # in an idle model replica (at a 0.3 s batch wait, each call of a burst waited
            # once, and the pace read 64 tokens/s where the model computed 750,000). Not this
            # replica's first call, which also opened the channel to the model replica
            # (hundreds of ms once): a pace taken from it refused requests a new ingress
            # replica could answer.
            if self._queue and self._answered:
                self.paced(len(packed.ids), answered - max(now, self._answered) - idle_s)
            self._answered = answered
            start = 0
            for w, n in zip(batch, sizes, strict=True):
                end = start + n
                if w.future.done():
                    pass
                elif status[start:end].any():
                    w.future.set_exception(status_error(status[start:end]))
                else:
                    w.future.set_result(_reply(w.request, probs[start:end]))
                start = end
        except Exception as exc:  # every request of the call must hear of it
            for w in batch:
                if not w.future.done():
                    w.future.set_exception(exc)
        finally:
            self._running -= 1
            self._pump()


def _reply(request: Windowed, probs: npt.NDArray[np.float32]) -> Reply:
    texts = aggregate(probs, request.packed.lengths(), request.windows)
    return Reply(texts, request.truncated, request.windows.tolist(), request.unknown)
