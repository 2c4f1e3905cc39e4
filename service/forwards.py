"""A model replica's forward threads, and the chain each forward runs through: injected faults
(tests only) inside the watchdog inside the split-and-retry (service.retry).

With parallel forwards (service.placement) the replica holds the model twice: a forward that
starts while no other computes runs on the copy with every thread (a lone request's latency),
one that starts beside another on the copy with its share of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt

from service.faults import with_faults
from service.forwardproc import ForwardProcess
from service.health import Watchdog
from service.model import SentimentModel
from service.retry import Computed, Forward, Probs, Rows, SplittingForward, expired_scores
from service.settings import Settings

Chain = Callable[[Rows], Computed]

FORWARD_THREAD = b"forward"  # OS thread name, so per-thread CPU can be read from /proc


PR_SET_NAME, PR_GET_NAME = 15, 16


def _name_thread(name: bytes = FORWARD_THREAD) -> None:
    """Give the calling thread an OS-visible name (Linux prctl PR_SET_NAME)."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: only a convenience
        ctypes.CDLL(None).prctl(PR_SET_NAME, name, 0, 0, 0)


@contextlib.contextmanager
def forward_pools() -> Iterator[None]:
    """Threads started inside are named `forward`, as the forward threads are.

    A Linux thread takes its creator's name. ONNX Runtime starts its intra-op threads when it
    loads a session and torch its OpenMP team at a thread's first parallel op, so the models
    load and warm up inside this: their pools' CPU is forward work, and /proc counts it so
    (loadtest.cpu), not as the replica's own.
    """
    old = ctypes.create_string_buffer(16)
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(PR_GET_NAME, old, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing to name
        yield
        return
    _name_thread()
    try:
        yield
    finally:
        _name_thread(old.value)


def forward_threads(count: int) -> ThreadPoolExecutor:
    """One named thread per forward computed at once."""
    return ThreadPoolExecutor(count, "forward", initializer=_name_thread)


def _forward(
    model: SentimentModel | ForwardProcess, rows: list[npt.NDArray[np.int32]]
) -> tuple[Probs, float]:
    """One forward pass; returns probabilities and its duration."""
    t0 = time.perf_counter()
    out: Probs = model.predict(rows).numpy()
    return out, time.perf_counter() - t0


def watched(
    model: SentimentModel | ForwardProcess, watchdog: Watchdog, settings: Settings
) -> Forward:
    """`model`'s forward with the settings' injected faults, watched by `watchdog`."""
    s = settings
    faults = (s.fault_forward_min_texts, s.fault_hang_min_tokens, s.fault_slow_forward_s)
    return watchdog.watch(with_faults(partial(_forward, model), *faults))


def splitting(forward: Forward, labels: int, failures: Any) -> SplittingForward:
    """`forward`, split and retried on failure, each failure counted on `failures` (a Ray
    counter tagged by reason)."""
    return SplittingForward(forward, labels, lambda why: failures.inc(tags={"reason": why}))


class Forwards:
    """Runs forwards on `parallel` forward threads, choosing the chain by what else computes."""

    def __init__(
        self,
        model: SentimentModel | ForwardProcess,
        narrow: SentimentModel | ForwardProcess,
        parallel: int,
        watchdog: Watchdog,
        settings: Settings,
        failures: Any,
    ) -> None:
        self.executor = forward_threads(parallel)
        self.labels = labels = len(model.labels)
        self.watched = watched(model, watchdog, settings)  # the health probe's: no retries
        self.alone: Chain = splitting(self.watched, labels, failures)
        self.beside: Chain = self.alone  # one forward at a time: never beside another
        if narrow is not model:
            self.beside = splitting(watched(narrow, watchdog, settings), labels, failures)
        self._lock = threading.Lock()
        self._computing = 0  # forwards started on the threads and not yet back

    def run(self, rows: Rows, until: float = math.inf) -> asyncio.Future[Computed]:
        """One forward on the next free forward thread (queued, in order, while none is),
        skipped if it starts at or after `until` (time.monotonic(): its texts' last deadline).
        The executor's future itself, not a task around it: a task would cost the lone request
        a turn of the event loop before its forward is even queued."""
        return asyncio.get_running_loop().run_in_executor(self.executor, self._start, rows, until)

    def _start(self, rows: Rows, until: float) -> Computed:
        if (skipped := self.skipped(rows, until)) is not None:
            return skipped
        # Chosen as it starts, not as it is queued: alone on every thread, beside another
        # on its share of them.
        with self._lock:
            chain = self.beside if self._computing else self.alone
            self._computing += 1
        try:
            return chain(rows)
        finally:
            with self._lock:
                self._computing -= 1

    def skipped(self, rows: Rows, until: float) -> Computed | None:
        """Every text EXPIRED, no compute, for a forward starting at or after `until` (its
        texts' last deadline), else None. Nobody reads such a forward, and the requests
        queued behind it would wait for it."""
        if time.monotonic() < until:
            return None
        return (*expired_scores(len(rows), self.labels), 0.0)

    async def probe(self, rows: Rows) -> tuple[Probs, float]:
        """One forward as the health check runs it: on a forward thread, watched, not retried."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.watched, rows)
