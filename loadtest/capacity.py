"""Capacity from a step-ramp run: the best sustained throughput per replica within the SLO,
and how many replicas (GPUs, one replica each) a given peak needs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadtest.shapes import Step
from loadtest.timeline import Timeline, quantile_ms

SETTLE_SHARE = 0.3  # the first 30% of each step is ramp-up and queue build-up: not counted


@dataclass(frozen=True)
class StepResult:
    """What one plateau sustained."""

    users: int
    seconds: float
    texts_per_s: float
    requests_per_s: float
    p99_ms: float
    error_ratio: float
    meets_slo: bool


@dataclass(frozen=True)
class Capacity:
    """The answer of a capacity run."""

    replicas_measured: int
    best_texts_per_s: float  # whole service, best step within the SLO
    per_replica_texts_per_s: float
    peak_texts_per_s: float | None
    headroom: float
    replicas_needed: int | None
    replicas_from: str = "--replicas"  # where replicas_measured came from


# What the summary says when neither --replicas nor the metrics gave the replica count.
ASSUMED_ONE = "assumed: the metrics named no model replica; give --replicas"


def replica_count(given: int, seen: object) -> tuple[int, str]:
    """The replicas a run measured, and where the figure came from: `--replicas` when given,
    else the model replicas the server's metrics named, else 1, said plainly, since every
    per-replica figure is then the whole service's."""
    if given > 0:
        return given, "--replicas"
    if isinstance(seen, int) and seen > 0:
        return seen, "the model replicas' metrics"
    return 1, ASSUMED_ONE


def step_results(
    timeline: Timeline, start: float, plan: list[Step], slo_p99_ms: float, slo_errors: float
) -> list[StepResult]:
    """Throughput, p99 and errors of each step's settled part (`start` is epoch seconds)."""
    results = []
    for step in plan:
        lo = start + step.start_s + SETTLE_SHARE * (step.end_s - step.start_s)
        hi = start + step.end_s
        w = timeline.window(math.ceil(lo), math.floor(hi))
        seconds = max(1.0, math.floor(hi) - math.ceil(lo))
        p99 = quantile_ms(w.latency, 0.99)
        errors = w.failures / w.requests if w.requests else 0.0
        results.append(
            StepResult(
                users=step.users,
                seconds=seconds,
                texts_per_s=round(w.texts / seconds, 2),
                requests_per_s=round(w.requests / seconds, 2),
                p99_ms=p99,
                error_ratio=round(errors, 4),
                meets_slo=w.requests > 0 and p99 <= slo_p99_ms and errors <= slo_errors,
            )
        )
    return results


def capacity(
    results: list[StepResult],
    replicas: int,
    peak: float | None,
    headroom: float,
    replicas_from: str = "--replicas",
) -> Capacity:
    """Best step within the SLO, per replica; replicas for `peak` texts/s at `headroom`.

    Planning at a share (`headroom`) of the measured best leaves room for bursts above the
    forecast and for a replica lost to a node failure.
    """
    good = [r.texts_per_s for r in results if r.meets_slo]
    best = max(good, default=0.0)
    per_replica = best / max(1, replicas)
    needed = None
    if peak is not None and per_replica > 0:
        needed = max(1, math.ceil(peak / (per_replica * headroom)))
    return Capacity(
        max(1, replicas), best, round(per_replica, 2), peak, headroom, needed, replicas_from
    )
