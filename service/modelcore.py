"""The model replica's core (one per GPU): batches packed token ids from every ingress, runs
forwards. `service.replica` wraps it as a Serve deployment; the co-located layout calls it in
the ingress's own process.

It does no per-request work. Each call carries the texts of many HTTP requests as two arrays
(ids and offsets) with a time budget per text; calls are coalesced into dynamic batches when
the model is free (service.batcher), cut into length-sorted forwards (service.batchrun), and
answered with one probability array, one status array and the seconds the call waited for
company in an idle model (admission's pace leaves that out: service.admission.Pace).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import asdict
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from ray import serve

from service.batcher import Batcher
from service.batching import PAD_MULTIPLE
from service.batchrun import COUNTED, BatchRunner, Job, note_idle
from service.calibration import Calibration, calibrate
from service.encoding import CallResult, Packed, Scored
from service.forwardproc import ForwardProcess, ForwardProcessError
from service.forwards import Forwards, forward_pools
from service.health import Watchdog
from service.liveconfig import LiveConfig
from service.metrics import ModelMetrics
from service.model import dtype_name
from service.placement import inline_limit_s, intra_op_threads, load_model, parallel_forwards
from service.retry import expired_scores
from service.settings import Settings

logger = logging.getLogger("ray.serve")


class ModelCore:
    """Owns the model (and the GPU); batches across all ingress replicas."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = s = Settings.model_validate(settings)
        self.live = LiveConfig(s)
        self.metrics = ModelMetrics()
        threads = intra_op_threads(s, torch.get_num_threads())
        self.parallel = parallel_forwards(s, threads)
        narrow = max(1, threads // self.parallel)  # each of parallel forwards' threads
        torch.set_num_threads(narrow)  # torch's pool is per process: parallel forwards share it
        # A forward that computes alone gets every thread (a lone request's latency); one
        # beside another gets its share, on a second copy of the sessions (ONNX Runtime fixes
        # a session's threads when it loads it).
        with forward_pools():
            self.model = load_model(s, threads)
            self.narrow = load_model(s, narrow) if self.parallel > 1 else self.model
        logger.info(
            "backend %s (%s), forwards in %s",
            self.model.backend_name,
            self.model.backend_reason,
            "a forward process"
            if isinstance(self.model, ForwardProcess)
            else f"{self.parallel} thread(s), {narrow} intra-op thread(s) each when busy",
        )
        self.batch = s.batch
        # Forwards the loop would wait long for run off it, so calls keep arriving (and
        # batches keep filling) while the model computes; one thread per forward at once.
        self.watchdog = Watchdog(s.health_stall_s)
        failures = self.metrics.forward_failures
        self.forwards = Forwards(self.model, self.narrow, self.parallel, self.watchdog, s, failures)
        probe = [np.asarray(self.model.encode(["ok"])[0].ids, dtype=np.int32)]
        self.probe = lambda: self.forwards.probe(probe)
        # Warm-up runs every shape bucket and measures a forward's fixed cost for the planner.
        with forward_pools():
            self.calibration = self._warmup() if s.warmup else None
        self.inline_max_s = inline_limit_s(s, self.model)
        labels = len(self.model.labels)
        runner = BatchRunner(
            self.forwards,
            labels,
            self.metrics,
            self._runs_inline,
            self._plan,
            self.model.pad_multiple,
            getattr(self.model, "padded_tokens", None),  # a forward process: rows x longest
        )
        self.tally = runner.tally
        self.batcher: Batcher[Job, Scored] = Batcher(
            runner.run,
            size=lambda job: job.tokens,
            count=lambda job: job.texts,
            max_items=s.batch.max_batch_texts,
            max_size=s.batch.max_batch_tokens,
            wait_s=s.batch.batch_wait_timeout_s,
            deadline=lambda job: float(job.deadlines.max()),
            expired=lambda job: expired_scores(job.texts, labels),
            concurrency=self.parallel,
            taken=note_idle,
        )
        if self.calibration and self._runs_inline(PAD_MULTIPLE):  # the smallest forward
            found = self.calibration
            tokens = (self.inline_max_s - found.fixed_s) / max(found.per_token_s, 1e-12)
            logger.info("forwards up to ~%d padded tokens run on the event loop", tokens)
        if s.fault_crash_min_tokens is not None:  # after the warm-up, as the other faults
            if not isinstance(self.model, ForwardProcess):  # it would kill this replica
                raise ValueError("fault_crash_min_tokens needs forward_in=process")
            self.model.inject_crash(s.fault_crash_min_tokens)
        # Ray forgets a gauge that is not set again within two export intervals, so a daemon
        # thread keeps re-publishing them (and samples GPU memory between batches).
        self._stop = threading.Event()
        threading.Thread(target=self._publish_gauges, name="gauges", daemon=True).start()

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Apply new batch knobs from Ray's `user_config` without restarting the replica (the
        request limits it may hold are the ingress's: checked here, not used); a bad one is
        refused and the knobs in force stay (service.liveconfig)."""
        if not self.live.apply(user_config, self._fits_warmup):
            return
        config = self.live.current.batch
        self.batch = config
        self.batcher.configure(
            config.max_batch_texts, config.max_batch_tokens, config.batch_wait_timeout_s
        )
        logger.info("batch config now %s", config.model_dump())

    def _fits_warmup(self, settings: Settings) -> str | None:
        """Why this replica cannot take `settings`' forward budget, if it cannot: CUDA graphs
        were recorded, and a TensorRT engine's shapes fixed, for the budget it warmed up
        with; a larger one would record graphs under live traffic or fail in TensorRT."""
        warmed = self.settings.batch.micro_batch_tokens
        asked = settings.batch.micro_batch_tokens
        if self.model.backend_name == "tensorrt":
            fixed = "TensorRT shapes"
        elif self.model.records_graphs:
            fixed = "CUDA graphs"
        else:  # nothing was fixed at warm-up: any budget serves
            return None
        if asked <= warmed:
            return None
        return (
            f"micro_batch_tokens {asked} is above the {warmed} this replica warmed up for "
            f"({fixed}); set batch.micro_batch_tokens in the deployment's args (its replicas "
            "restart)"
        )

    async def check_health(self) -> None:
        """Ray replaces the replica when this raises: a stalled forward, or a failed probe."""
        await self.watchdog.check(self.batcher.queued, self.probe)

    async def info(self) -> dict[str, Any]:
        """What serves: replica, model, device, dtype, labels and the batch knobs in force."""
        return {
            "replica": serve.get_replica_context().replica_tag,
            "model": self.model.name,
            "device": str(self.model.device),
            "dtype": dtype_name(self.model.dtype),
            "backend": self.model.backend_name,
            "backend_reason": self.model.backend_reason,
            "forward_in": "process" if isinstance(self.model, ForwardProcess) else "thread",
            "parallel_forwards": self.parallel,
            "labels": self.model.labels,
            "batch": self.batch.model_dump(),
            "user_config_refused": self.live.refused,
            "forward_overhead_tokens": self._overhead(),
            "tokens_per_s": self._tokens_per_s(),
            "inline_forward_ms": self.inline_max_s * 1e3,
            **asdict(self.tally),
        }

    async def infer(self, packed: Packed, budgets_s: npt.NDArray[np.float32]) -> CallResult:
        """Probabilities for every text of a call, or EXPIRED where its time budget ran out,
        and the seconds the call waited for company in an idle model."""
        now = time.monotonic()
        job = Job(packed, now + budgets_s.astype(np.float64), now)
        probs, status = await self.batcher.submit(job)
        return probs, status, job.idle_s

    def _runs_inline(self, padded_tokens: int) -> bool:
        """Whether a forward of `padded_tokens` costs (calibrated) no more than the inline limit.
        A hand-off to a forward thread and back costs about 0.1-0.2 ms of CPU on a slow core, a
        tiny model's whole forward: those run on the loop (docs/serving.md, "Forwards on the event
        loop").
        """
        found = self.calibration
        # No cost per token measured (one token count only, or too noisy): no prediction,
        # else every forward, however long, would look as cheap as the fixed cost.
        if found is None or found.per_token_s <= 0 or self.inline_max_s <= 0:
            return False
        return found.seconds(padded_tokens) <= self.inline_max_s

    def _plan(self) -> tuple[int, int]:
        """The forward budget and overhead the next batch is planned with."""
        return self.batch.micro_batch_tokens, self._overhead()

    def _tokens_per_s(self) -> int | None:
        """Padded tokens a second in full forwards, by the warm-up's fit: what an ingress
        admits by until it has timed calls of its own (service.admission.Pace)."""
        found = self.calibration
        return round(1 / found.per_token_s) if found and found.per_token_s > 0 else None

    def _overhead(self) -> int:
        measured = self.calibration.overhead_tokens if self.calibration else None
        cuts_runs = getattr(self.model, "cuts_runs", False)  # a forward process: no INT8 there
        return self.batch.overhead_for(self.model.device.type, measured, cuts_runs)

    def _warmup(self) -> Calibration:
        """Run each padded length bucket at one row and at a full micro-batch; fit the cost."""
        t0 = time.perf_counter()
        found = calibrate(self.model, self.batch.micro_batch_tokens)
        if self.narrow is not self.model:  # its sessions meet every shape before a request does
            calibrate(self.narrow, self.batch.micro_batch_tokens)
        logger.info(
            "warm-up: %d shapes in %.1fs; a forward costs %.2f ms + %.2f us per padded token "
            "(overhead %s tokens)",
            found.shapes,
            time.perf_counter() - t0,
            found.fixed_s * 1e3,
            found.per_token_s * 1e6,
            found.overhead_tokens,
        )
        return found

    def _publish_gauges(self) -> None:
        model = self.model
        info = {"model": model.name, "dtype": dtype_name(model.dtype), "device": str(model.device)}
        info["backend"] = model.backend_name
        memory = (0, 0, 0)
        last = self._counts()  # the warm-up's INT8 rechecks are not counted
        while not self._stop.wait(self.settings.metrics_refresh_s):
            with contextlib.suppress(ForwardProcessError):  # gone: the health check says so
                memory = model.gpu_memory()
            now = self._counts()
            added = {name: now[name] - last[name] for name in now}
            self.metrics.publish(info, self.batcher.queued, memory, added, self.live.refused)
            last = now

    def _counts(self) -> dict[str, int]:
        """What the forwards counted so far, by the ModelMetrics counter that publishes it."""
        counts = {name: getattr(self.tally, name) for name in COUNTED}
        models = {self.model, self.narrow}  # INT8 answers recomputed on the FP32 graph
        counts["int8_rechecked"] = sum(getattr(m, "rechecked_texts", 0) for m in models)
        return counts

    def __del__(self) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()
        model = getattr(self, "model", None)
        if isinstance(model, ForwardProcess):  # else it exits on its own when this process does
            model.close()
