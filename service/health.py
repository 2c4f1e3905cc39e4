"""The model replica's health, as Ray's `check_health` sees it.

Ray replaces a replica whose `check_health` raises. It raises when a forward has run for longer
than `stall_s` (a hung kernel, a stuck forward thread: with parallel forwards, the others may
still be finishing), when no forward has started or ended for `stall_s` while work waits, or, when
the replica is idle, when a tiny probe forward fails or does not finish within `stall_s` (a
broken CUDA context fails every forward but no request may be there to notice).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Awaitable, Callable

from service.retry import Forward, Probs, Rows


class Unhealthy(RuntimeError):
    """The replica cannot compute; Ray should replace it."""


class Watchdog:
    """Notes when forwards start and end; `check` judges from that and a probe."""

    def __init__(self, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_s = stall_s
        self.clock = clock
        self.last = clock()  # the last sign of progress: a forward started or ended, or idle
        self._started: dict[int, float] = {}  # start time of each forward in progress
        self._tickets = itertools.count()
        self._lock = threading.Lock()  # forwards may run on several threads at once

    @property
    def running(self) -> int:
        """Forwards in progress."""
        return len(self._started)

    def watch(self, forward: Forward) -> Forward:
        """`forward`, noting its start and end."""

        def watched(rows: Rows) -> tuple[Probs, float]:
            with self._lock:
                ticket = next(self._tickets)
                self._started[ticket] = self.last = self.clock()
            try:
                return forward(rows)
            finally:
                with self._lock:
                    del self._started[ticket]
                    self.last = self.clock()

        return watched

    async def check(self, waiting: int, probe: Callable[[], Awaitable[object]]) -> None:
        """Raise Unhealthy when a forward is stuck, when stalled with work, or when idle and
        the probe fails."""
        now = self.clock()
        with self._lock:
            oldest = min(self._started.values(), default=now)
            running = len(self._started)
        if now - oldest > self.stall_s:
            raise Unhealthy(
                f"a forward has run for {now - oldest:.1f}s while {waiting} texts wait "
                f"and {running} forward runs"
            )
        if waiting or running:
            quiet = now - self.last
            if quiet > self.stall_s:
                raise Unhealthy(
                    f"no forward started or ended for {quiet:.1f}s while {waiting} texts wait "
                    f"and {running} forward runs"
                )
            return
        self.last = now  # idle is not a stall: the clock starts when work arrives
        try:
            await asyncio.wait_for(probe(), self.stall_s)
        except Exception as exc:
            raise Unhealthy(f"the probe forward failed: {type(exc).__name__}") from exc
