"""Timing one call again and again: the median, after warm-up calls that are not counted."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_ms(call: Callable[[], object], repeats: int, warmup: int) -> float:
    """Median wall time of `repeats` calls of `call`, in ms, after `warmup` unmeasured ones
    (connections, code paths, allocator and kernel caches)."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3
