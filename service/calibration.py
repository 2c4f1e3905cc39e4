"""Warm the model up and measure what a forward's fixed cost is worth in tokens.

The micro-batch planner (service.batching) weighs one more forward against the padding a merge
would add, so it needs a forward's fixed cost (Python, kernel launches) in units of padded
tokens. That ratio differs by orders of magnitude between a tiny model on a CPU and BERT-base on
a GPU, so it is measured on the replica's own hardware during warm-up, which runs every shape
bucket anyway.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from service.backends import row_bucket
from service.batching import PAD_MULTIPLE, round_up
from service.forwardproc import ForwardProcess
from service.model import SentimentModel

Forward = Callable[[list[list[int]]], object]


@dataclass(frozen=True)
class Calibration:
    """A forward costs about `fixed_s + per_token_s * padded tokens`."""

    fixed_s: float
    per_token_s: float
    shapes: int  # (width, rows) shapes run

    @property
    def overhead_tokens(self) -> int | None:
        """The fixed cost in padded tokens, what the planner weighs; None when the runs were
        too noisy to show a cost per token (the planner then keeps its default)."""
        if self.per_token_s <= 0:
            return None
        return round(self.fixed_s / self.per_token_s)

    def seconds(self, tokens: int) -> float:
        """The predicted time of a forward that computes `tokens` padded tokens."""
        return self.fixed_s + self.per_token_s * tokens


def fit(samples: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares line `seconds = fixed + per_token * tokens` through (tokens, seconds);
    both kept non-negative (a noisy run must not make the planner merge or split at will)."""
    n = len(samples)
    if n < 2:
        raise ValueError("need at least two samples to fit a line")
    mean_x = sum(x for x, _ in samples) / n
    mean_y = sum(y for _, y in samples) / n
    var = sum((x - mean_x) ** 2 for x, _ in samples)
    if var == 0:
        raise ValueError("samples need at least two different token counts")
    slope = sum((x - mean_x) * (y - mean_y) for x, y in samples) / var
    slope = max(slope, 0.0)
    return max(mean_y - slope * mean_x, 0.0), slope


def shapes(max_length: int, micro_batch_tokens: int) -> list[tuple[int, int]]:
    """(width, rows) of every padded length bucket, at one row and at a full micro-batch."""
    out: list[tuple[int, int]] = []
    length = 8
    while True:
        width = min(length, max_length)
        rows = max(1, micro_batch_tokens // round_up(width))
        out += [(width, n) for n in sorted({1, rows})]
        if width >= max_length:
            return out
        length *= 2


def graph_shapes(max_length: int, micro_batch_tokens: int) -> list[tuple[int, int]]:
    """(width, rows) of every forward a replica that records CUDA graphs can run: each width
    (a multiple of 8) at each row count forwards are padded to (backends.row_bucket), up to
    the bucket of the most rows a micro-batch holds at that width."""
    out: list[tuple[int, int]] = []
    for width in range(PAD_MULTIPLE, round_up(max_length) + 1, PAD_MULTIPLE):
        most = row_bucket(max(1, micro_batch_tokens // width))
        rows = 1
        while rows <= most:
            out.append((width, rows))
            rows = row_bucket(rows + 1)
    return out


def calibrate(
    model: SentimentModel | ForwardProcess,
    micro_batch_tokens: int,
    fit_width: int = 64,
    repeats: int = 2,
) -> Calibration:
    """Run every shape once (the warm-up: the first run of a shape pays one-time setup), then
    time again, `repeats` times, the one-row shapes up to `fit_width` tokens and the full
    micro-batch at `fit_width`, and fit the fastest runs.

    Wider shapes are left out of the fit: attention grows with the square of the width, so
    they are not on the line, and timing every full micro-batch again would triple a warm-up
    that takes seconds on a CPU.
    """
    seed = model.encode(["warm up the model"])[0].ids
    plan = shapes(model.max_length, micro_batch_tokens)
    samples = []
    for width, rows in plan:
        batch = _batch(seed, width, rows)
        _timed(model.predict, batch)  # with INT8's FP32 recheck, if any: it warms up too
        if (width < fit_width and rows == 1) or width == min(fit_width, model.max_length):
            with _int8_alone(model):
                best = min(_timed(model.predict, batch) for _ in range(repeats))
            samples.append((round_up(width) * rows, best))
    try:
        fixed, per_token = fit(samples)
    except ValueError:  # one token count only (a micro-batch of one row): nothing to fit
        fixed, per_token = 0.0, 0.0
    if model.records_graphs:
        # A shape's first call runs it, its second records its CUDA graph: do both for every
        # shape now, so no request pays for them (hundreds of shapes, seconds on a GPU).
        rest = graph_shapes(model.max_length, micro_batch_tokens)
        for width, rows in rest:
            batch = _batch(seed, width, rows)
            model.predict(batch)
            model.predict(batch)
        return Calibration(fixed, per_token, len(plan) + len(rest))
    return Calibration(fixed, per_token, len(plan))


@contextlib.contextmanager
def _int8_alone(model: SentimentModel | ForwardProcess) -> Iterator[None]:
    """INT8 forwards timed without the FP32 recheck of close calls (service.backends): few
    rows of real traffic are close (6% of the default model's texts), but the warm-up's rows
    are copies of one text, and when it is close (the default model's is) every row is
    rechecked: timed so, forwards read 2.5 times their cost in served traffic."""
    backend: Any = getattr(model, "backend", None)
    exact = getattr(backend, "recheck", None)
    if exact is None:
        yield
        return
    backend.recheck = None  # warm-up runs before any forward is served: no one else reads it
    try:
        yield
    finally:
        backend.recheck = exact


def _batch(seed: list[int], width: int, rows: int) -> list[list[int]]:
    """`rows` copies of one row of exactly `width` ids, `seed` repeated."""
    return [(seed * (width // len(seed) + 1))[:width]] * rows


def _timed(forward: Forward, batch: list[list[int]]) -> float:
    t0 = time.perf_counter()
    forward(batch)  # predict returns CPU probabilities: a GPU forward has finished by then
    return time.perf_counter() - t0
