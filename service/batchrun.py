"""One dynamic batch of the model core, computed.

Expired texts are dropped; the rest are cut into length-sorted forwards (service.batching),
and a forward whose every text expires before it starts is skipped.
A forward the calibration calls cheaper than a hand-off to a thread runs on the event loop;
the others go to the forward threads, all at once in plan order. Each call is answered as
soon as its last text is computed, while the rest of the batch still computes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.batching import PAD_MULTIPLE, padded_cost, plan_micro_batches
from service.encoding import EXPIRED, Packed, Scored
from service.forwards import Forwards
from service.metrics import ModelMetrics
from service.retry import Computed


@dataclass
class Job:
    """One call's texts waiting in the model replica."""

    packed: Packed
    deadlines: npt.NDArray[np.float64]  # time.monotonic() per text
    arrived: float
    idle_s: float = 0.0  # of its time queued, the part an idle model waited for company

    @property
    def texts(self) -> int:
        return len(self.packed)

    @property
    def tokens(self) -> int:
        return int(self.packed.offsets[-1])


def note_idle(jobs: list[Job], idle: bool) -> None:
    """A batch leaves the queue (`Batcher.taken`): when an idle model gathered it, each job's
    time queued so far was a wait for company."""
    if idle:
        now = time.monotonic()
        for job in jobs:
            job.idle_s = now - job.arrived


@dataclass
class Tally:
    """What the core has done since it started (/readyz; the bench reads it around each run).
    `loop_forward_cpu_s`: the loop thread's CPU in forwards run on it, which /proc counts as the
    loop's own work (exact with one intra-op thread, as in the bench's tiny-model run)."""

    batches: int = 0
    batched_texts: int = 0
    forwards: int = 0
    loop_forward_cpu_s: float = 0.0
    forward_texts: int = 0
    forward_tokens: int = 0  # padding excluded
    forward_padded_tokens: int = 0


# Tally fields the gauges thread publishes as counters of the same names (ModelMetrics).
COUNTED = ("forward_texts", "forward_tokens", "forward_padded_tokens")


class BatchRunner:
    """Computes batches on `forwards`; `inline(padded_tokens)` says whether a forward runs on
    the event loop, `planning()` gives the forward budget and overhead (service.batching) in
    force, `computes(lengths)` the tokens a forward of rows that long computes, padding
    included (what the backend really runs: onnx-int8 cuts a forward into narrower runs)."""

    def __init__(
        self,
        forwards: Forwards,
        labels: int,
        metrics: ModelMetrics,
        inline: Callable[[int], bool],
        planning: Callable[[], tuple[int, int]],
        multiple: int = PAD_MULTIPLE,
        computes: Callable[[list[int]], int] | None = None,
    ) -> None:
        self.forwards = forwards
        self.multiple = multiple  # what the model rounds a forward's width up to
        self.labels = labels
        self.metrics = metrics
        self.inline = inline
        self.planning = planning
        self.computes = computes or (lambda lengths: padded_cost(lengths, multiple))
        self.tally = Tally()

    async def run(self, jobs: list[Job]) -> AsyncIterator[list[tuple[int, Scored]]]:
        """One dynamic batch; yields (index in `jobs`, its answer) as calls complete."""
        now = time.monotonic()
        counts = np.array([job.texts for job in jobs])
        owner = np.repeat(np.arange(len(jobs)), counts)  # the call each text belongs to
        starts = np.concatenate(([0], np.cumsum(counts)))
        lengths = np.concatenate([job.packed.lengths() for job in jobs])
        deadlines = np.concatenate([job.deadlines for job in jobs])
        live = np.flatnonzero(deadlines > now)
        probs = np.zeros((len(owner), self.labels), dtype=np.float32)
        status = np.full(len(owner), EXPIRED, dtype=np.uint8)
        left = np.bincount(owner[live], minlength=len(jobs))
        for job in jobs:
            self.metrics.queue_wait.observe(now - job.arrived)

        def answers(done: Iterable[int]) -> list[tuple[int, Scored]]:
            spans = [(int(k), slice(starts[k], starts[k + 1])) for k in done]
            return [(k, (probs[span], status[span])) for k, span in spans]

        if (left == 0).any():  # calls whose every text expired
            yield answers(np.flatnonzero(left == 0))
        if not len(live):
            return
        self.metrics.batch_texts.observe(len(live))
        tally = self.tally
        tally.batches += 1
        tally.batched_texts += len(live)
        budget, overhead = self.planning()

        def computed(
            texts: npt.NDArray[np.intp], group_lengths: list[int], result: Computed, on: str
        ) -> list[int]:
            """Note one forward's answers; the calls it completed."""
            out, ok, seconds = result
            probs[texts], status[texts] = out, ok
            before = left.copy()
            np.subtract.at(left, owner[texts], 1)
            if not (ok == EXPIRED).all():  # all EXPIRED: skipped, nothing was computed
                tally.forwards += 1
                tally.forward_texts += len(group_lengths)
                tally.forward_tokens += sum(group_lengths)
                tally.forward_padded_tokens += self.computes(group_lengths)
                self.metrics.forward.observe(seconds, tags={"on": on})
            return np.flatnonzero((left == 0) & (before > 0)).tolist()

        # Forwards too long for the loop all go to the forward threads at once, in plan order:
        # a free thread takes the next, so a large batch's forwards compute side by side
        # rather than one after another while the other thread serves small batches.
        threaded: dict[asyncio.Future[Computed], tuple[npt.NDArray[np.intp], list[int]]] = {}
        try:
            plan = plan_micro_batches(lengths[live].tolist(), budget, overhead, self.multiple)
            for group in plan:
                texts = live[group]
                calls = owner[texts]
                rows = [
                    jobs[k].packed.row(i - starts[k]) for i, k in zip(texts, calls, strict=True)
                ]
                group_lengths = lengths[texts].tolist()
                until = float(deadlines[texts].max())  # after it, nobody reads this forward
                if not self.inline(padded_cost(group_lengths, self.multiple)):
                    threaded[self.forwards.run(rows, until)] = texts, group_lengths
                    continue
                result = self.forwards.skipped(rows, until)
                if result is None:
                    cpu0 = time.thread_time()
                    result = self.forwards.alone(rows)
                    tally.loop_forward_cpu_s += time.thread_time() - cpu0
                if finished := computed(texts, group_lengths, result, "event_loop"):
                    yield answers(finished)
                await asyncio.sleep(0)  # let the loop read new requests and send answers
            order, pending = {forward: i for i, forward in enumerate(threaded)}, set(threaded)
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for forward in sorted(done, key=order.__getitem__):
                    if finished := computed(*threaded[forward], forward.result(), "thread"):
                        yield answers(finished)
        finally:  # the batch failed or was abandoned: its queued forwards need not run
            for forward in threaded:
                forward.cancel()
