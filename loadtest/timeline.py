"""Per-second client-side counts and latency histograms, mergeable across Locust workers.

Locust's own stats give whole-run percentiles; the capacity report needs them per step, and
distributed runs need them merged on the master, so each process keeps one bucket per second
and workers ship theirs with every report.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

from loadtest.ranks import nearest_rank

# Latency bucket upper bounds in ms: 1 ms to ~100 s, 8 per doubling (quantiles within ~9%).
BOUNDS_MS = [2 ** (i / 8) for i in range(0, 8 * 17 + 1)]


@dataclass
class Second:
    """Everything that finished within one wall-clock second."""

    requests: int = 0
    texts: int = 0
    failures: int = 0
    rejected: int = 0  # 429 among the failures
    latency: dict[int, int] = field(default_factory=dict)  # bucket index -> count

    def add(self, other: Second) -> None:
        self.requests += other.requests
        self.texts += other.texts
        self.failures += other.failures
        self.rejected += other.rejected
        for k, v in other.latency.items():
            self.latency[k] = self.latency.get(k, 0) + v


class Timeline:
    """Seconds keyed by integer epoch time."""

    def __init__(self) -> None:
        self.seconds: dict[int, Second] = {}

    def record(self, at: float, ms: float, texts: int, ok: bool, rejected: bool) -> None:
        """One finished request; successful texts count toward throughput."""
        s = self.seconds.setdefault(int(at), Second())
        s.requests += 1
        if ok:
            s.texts += texts
        else:
            s.failures += 1
            s.rejected += rejected
        index = min(bisect.bisect_left(BOUNDS_MS, ms), len(BOUNDS_MS) - 1)
        s.latency[index] = s.latency.get(index, 0) + 1

    def drain(self) -> dict[str, Any]:
        """The data gathered since the last drain, as msgpack-friendly dicts (then cleared)."""
        out = {
            str(t): {**s.__dict__, "latency": {str(k): v for k, v in s.latency.items()}}
            for t, s in self.seconds.items()
        }
        self.seconds = {}
        return out

    def merge(self, data: dict[str, Any]) -> None:
        """Add what another process drained."""
        for t, raw in data.items():
            latency = {int(k): v for k, v in raw["latency"].items()}
            incoming = Second(
                raw["requests"], raw["texts"], raw["failures"], raw["rejected"], latency
            )
            self.seconds.setdefault(int(t), Second()).add(incoming)

    def window(self, start: float, end: float) -> Second:
        """Totals of the seconds in [start, end)."""
        total = Second()
        for t, s in self.seconds.items():
            if start <= t < end:
                total.add(s)
        return total


def quantile_ms(latency: dict[int, int], q: float) -> float:
    """Upper bound of the bucket holding quantile `q`; 0 with no samples."""
    count = sum(latency.values())
    if not count:
        return 0.0
    rank = nearest_rank(q, count)
    seen = 0
    for index in sorted(latency):
        seen += latency[index]
        if seen >= rank:
            return round(BOUNDS_MS[index], 1)
    return round(BOUNDS_MS[-1], 1)
