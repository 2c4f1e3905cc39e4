"""A lean asyncio HTTP load generator for benchmarks (closed and open loop, bounded).

Locust is the tool for rehearsals; benchmarks need a client that costs the shared CPU as little
as possible, so this one pre-encodes bodies, keeps connections alive and speaks HTTP on bare
asyncio protocols (loadtest.rawhttp).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

from loadtest.ranks import nearest_rank_value
from loadtest.rawhttp import Poster


@dataclass
class RunResult:
    """What one load run measured; latencies in seconds, one per answered request."""

    requests: int = 0
    texts: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    client_cpu_s: float = 0.0  # this load generator's own CPU over the run
    # Latencies of the answers that were not 200, by status (0: no answer).
    refused: dict[int, list[float]] = field(default_factory=dict)

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def texts_per_s(self) -> float:
        return self.texts / self.seconds if self.seconds else 0.0

    @property
    def client_busy_cores(self) -> float:
        """The load generator's cores over the run: near 1.0, one asyncio process is what
        bounds the rate, not the server."""
        return round(self.client_cpu_s / self.seconds, 2) if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        """Latency at quantile `q` (0..1), nearest rank; 0 with no samples."""
        value = nearest_rank_value(self.latencies, q)
        return 0.0 if value is None else value


def bodies(texts: list[str], per_request: int) -> list[tuple[bytes, int]]:
    """JSON bodies of `per_request` texts each (singles use the `text` form)."""
    if per_request == 1:
        return [(json.dumps({"text": t}).encode(), 1) for t in texts]
    chunks = [texts[i : i + per_request] for i in range(0, len(texts), per_request)]
    return [(json.dumps({"texts": c}).encode(), len(c)) for c in chunks if len(c) == per_request]


async def _post(poster: Poster, body: tuple[bytes, int], result: RunResult) -> None:
    t0 = time.perf_counter()
    try:
        status = await poster.post(body[0])
    except (OSError, asyncio.TimeoutError, ValueError):  # no answer, or none HTTP can frame
        status = 0
    result.statuses[status] = result.statuses.get(status, 0) + 1
    if status == 200:
        result.latencies.append(time.perf_counter() - t0)
        result.requests += 1
        result.texts += body[1]
    else:
        result.errors += 1
        result.refused.setdefault(status, []).append(time.perf_counter() - t0)


async def closed_loop(
    url: str,
    payloads: list[tuple[bytes, int]],
    concurrency: int,
    duration_s: float,
    max_requests: int,
    timeout_s: float = 30.0,
) -> RunResult:
    """`concurrency` workers, each sending its next request when the last one is answered.

    Stops after `duration_s` or `max_requests`, whichever comes first; requests in flight at
    the end still finish and count.
    """
    result = RunResult()
    sent = 0
    deadline = time.perf_counter() + duration_s

    async def worker() -> None:
        nonlocal sent
        while sent < max_requests and time.perf_counter() < deadline:
            body = payloads[sent % len(payloads)]
            sent += 1
            await _post(poster, body, result)

    # One connection a worker at most: a pool of `concurrency` keep-alive connections.
    poster = Poster(url, timeout_s)
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        poster.close()
    result.seconds = time.perf_counter() - t0
    result.client_cpu_s = time.process_time() - cpu0
    return result


async def open_loop(
    url: str,
    payloads: list[tuple[bytes, int]],
    rate_per_s: float,
    duration_s: float,
    max_requests: int = 100_000,
    seed: int = 0,
    timeout_s: float = 30.0,
) -> RunResult:
    """Poisson arrivals at `rate_per_s` requests per second for `duration_s` (latency under load),
    at most `max_requests` of them.

    Unlike a closed loop, a slow server does not slow the arrivals, so queueing shows up in
    the latencies the way it does in production.
    """
    rng = random.Random(seed)
    result = RunResult()
    tasks: list[asyncio.Task[None]] = []
    poster = Poster(url, timeout_s)  # as many connections as requests in flight
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        next_at, i = 0.0, 0
        while next_at < duration_s and i < max_requests:
            delay = t0 + next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = payloads[i % len(payloads)]
            tasks.append(asyncio.create_task(_post(poster, body, result)))
            i += 1
            next_at += rng.expovariate(rate_per_s)
        await asyncio.gather(*tasks)
    finally:
        poster.close()
    result.seconds = time.perf_counter() - t0
    result.client_cpu_s = time.process_time() - cpu0
    return result
