"""The in-process limit: the model alone, every text known up front, the best batching."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from service.batchconfig import BatchConfig
from service.batching import plan_micro_batches
from service.calibration import calibrate
from service.model import SentimentModel


@dataclass(frozen=True)
class Limit:
    """Best texts/s over the micro-batch budgets tried, and the budget that gave it."""

    texts_per_s: float
    micro_batch_tokens: int
    by_budget: dict[int, float]
    overhead_tokens: int  # the forward's fixed cost the planner was given
    workers: int = 1  # forwards computed at once, each on the process's threads / workers
    # CPU of this whole process (every thread) per text in the best run: what a text costs,
    # steadier on a shared machine than texts/s, and comparable with the service's from /proc.
    cpu_ms_per_text: float | None = None


def run_once(
    model: SentimentModel,
    texts: list[str],
    budget: int,
    overhead: int,
    known: int | None = None,
    workers: int = 1,
) -> float:
    """Texts/s to tokenize the texts, sort by length, and forward under `budget` (planned with
    `overhead`, the forward's fixed cost in tokens, as the service plans): all at once, or
    `known` at a time in the order given. With `workers` threads, that many forwards (all at
    once) or groups of `known` texts compute at the same time, as parallel forwards do in the
    service (service.placement.parallel_forwards)."""

    def forward_all(chunk: list[str]) -> None:
        ids = [e.ids for e in model.encode(chunk)]
        lengths = [len(i) for i in ids]
        for group in plan_micro_batches(lengths, budget, overhead, model.pad_multiple):
            model.predict([ids[i] for i in group])

    t0 = time.perf_counter()
    if workers == 1:
        step = known or len(texts)
        for start in range(0, len(texts), step):
            forward_all(texts[start : start + step])
    elif known:
        chunks = [texts[start : start + known] for start in range(0, len(texts), known)]
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(forward_all, chunks))
    else:
        ids = [e.ids for e in model.encode(texts)]
        lengths = [len(i) for i in ids]
        groups = plan_micro_batches(lengths, budget, overhead, model.pad_multiple)
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda g: model.predict([ids[i] for i in g]), groups))
    return len(texts) / (time.perf_counter() - t0)


def measure(
    model: SentimentModel,
    texts: list[str],
    budgets: list[int],
    repeats: int = 2,
    workers: int = 1,
) -> Limit:
    """Best of `repeats` runs per budget (the machine is shared: the best run is the least
    disturbed one), after the service's own warm-up and overhead measurement; `workers`
    forwards at once."""
    measured = calibrate(model, budgets[0]).overhead_tokens
    overhead = BatchConfig().overhead_for(model.device.type, measured, model.cuts_runs)
    run_once(model, texts[: max(1, len(texts) // 8)], budgets[0], overhead, workers=workers)
    runs: dict[int, tuple[float, float]] = {}  # budget -> best (texts/s, CPU s per text)
    for b in budgets:
        # With CUDA graphs a shape's first call runs it and its second records its graph; the
        # warm-up recorded only the first budget's shapes. Two untimed runs first, so every
        # budget is timed replaying graphs, as the served replica runs them.
        for _ in range(2 if model.records_graphs else 0):
            run_once(model, texts, b, overhead, workers=workers)
        for _ in range(repeats):
            cpu0 = time.process_time()
            rate = run_once(model, texts, b, overhead, workers=workers)
            cpu = (time.process_time() - cpu0) / len(texts)
            if rate > runs.get(b, (0.0, 0.0))[0]:
                runs[b] = (rate, cpu)
    by_budget = {b: rate for b, (rate, _) in runs.items()}
    best = max(by_budget, key=by_budget.__getitem__)
    cpu_ms = round(runs[best][1] * 1000, 3)
    return Limit(by_budget[best], best, by_budget, overhead, workers, cpu_ms)


def measure_layouts(
    load: Callable[[int], SentimentModel],
    texts: list[str],
    budgets: list[int],
    threads: int,
    parallel: int,
) -> tuple[Limit, dict[int, SentimentModel], dict[int, float]]:
    """The limit with one forward at a time on all `threads` and, where the service computes
    `parallel` forwards at once, also with that many on their share of the threads: the
    better of the two is the limit (so parallel forwards cannot flatter the service's ratio).
    Returns it, and by forwards at once the model loaded for them (`load(n)`: sessions of n
    threads) and its texts/s."""
    models = {1: load(threads)}
    limits = {1: measure(models[1], texts, budgets)}
    if parallel > 1:
        torch.set_num_threads(max(1, threads // parallel))  # a torch backend's share
        models[parallel] = load(max(1, threads // parallel))
        limits[parallel] = measure(models[parallel], texts, budgets, workers=parallel)
        torch.set_num_threads(threads)
    best = max(limits.values(), key=lambda limit: limit.texts_per_s)
    return best, models, {n: limit.texts_per_s for n, limit in limits.items()}


@dataclass(frozen=True)
class AtATime:
    """The limit when only `texts` texts are known at a time, beside the full limit measured
    in the same alternating rounds (so the machine's drift between runs cancels out)."""

    texts: int
    texts_per_s: float
    all_sorted_texts_per_s: float

    @property
    def ratio(self) -> float:
        """Texts/s known `texts` at a time over texts/s all sorted."""
        return self.texts_per_s / self.all_sorted_texts_per_s


def at_a_time(
    model: SentimentModel,
    texts: list[str],
    known: list[int],
    budget: int,
    overhead: int,
    rounds: int = 3,
    workers: int = 1,
) -> list[AtATime]:
    """Best texts/s for each count of texts known at a time, in arrival (random) order: what
    the batcher can sort and cut with that many texts in flight, which is all a server with
    that many can do. Rounds alternate with the all-sorted run. With `workers` forwards at
    once, each holds `known` / `workers` of them."""
    arrivals = texts[:]
    random.Random(0).shuffle(arrivals)
    best = dict.fromkeys(known, 0.0)
    best_all = 0.0
    for _ in range(rounds):
        for n in known:
            per = max(1, n // workers)
            best[n] = max(best[n], run_once(model, arrivals, budget, overhead, per, workers))
        best_all = max(best_all, run_once(model, texts, budget, overhead, workers=workers))
    return [AtATime(n, best[n], best_all) for n in known]


def single_text_ms(model: SentimentModel, texts: list[str], count: int | None = None) -> float:
    """Median milliseconds to encode and forward one text alone, in this process: what a lone
    request would cost with no serving around it (the idle-penalty baseline). Over every text
    by default: the bench's one client sends each of them."""
    model.predict([model.encode(texts[:1])[0].ids])  # warm
    times = []
    for text in texts[:count]:
        t0 = time.perf_counter()
        model.predict([model.encode([text])[0].ids])
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2] * 1000
