"""The Ray Serve deployment: FastAPI ingress, admission control, and batched inference."""

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from fastapi import Request
from ray import serve
from ray.serve.config import BackpressureConfig
from ray.serve.deployment import Application, Deployment
from starlette.responses import JSONResponse

from service.batcher import Batcher
from service.batching import (
    Item,
    padded_cost,
    padding_ratio,
    plan_micro_batches,
    split_expired,
)
from service.errors import (
    DeadlineExceeded,
    InternalError,
    NotReady,
    Overloaded,
    ServiceError,
    error_response,
)
from service.http import ERROR_RESPONSES, create_app, document_request_body, read_body
from service.metrics import ServiceMetrics
from service.model import SentimentModel, dtype_name, round_up
from service.schemas import ClassifyResponse, TextResult, parse_request, request_model
from service.settings import BatchConfig, Settings

logger = logging.getLogger("ray.serve")
Answer = list[float] | ServiceError  # one text's probabilities, or why it has none
CLASSIFY_PATH = "/v1/classify"
app = create_app()


@serve.deployment(name="SentimentClassifier")
@serve.ingress(app)
class SentimentClassifier:
    """One model replica. Each text of each request is one item of the dynamic batch."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.settings = Settings.model_validate(settings)
        s = self.settings
        if s.torch_threads:
            torch.set_num_threads(s.torch_threads)
        self.ready = False
        self.metrics = ServiceMetrics()
        self.model = SentimentModel.load(
            s.model_path,
            device=s.device,
            dtype=s.dtype,
            max_length=s.max_seq_len,
            name=s.model_name,
        )
        self.request_model = request_model(s.max_texts_per_request, s.max_text_chars)
        document_request_body(app, CLASSIFY_PATH, self.request_model)
        self.batch = s.batch
        self.pending = 0
        self.batcher: Batcher[Item, Answer] = Batcher(
            self.infer,
            size=lambda item: len(item.ids),
            max_items=s.batch.max_batch_texts,
            max_size=s.batch.max_batch_tokens,
            wait_s=s.batch.batch_wait_timeout_s,
        )
        # One thread: forwards run off the event loop so requests keep arriving (and batches
        # keep filling) while the model computes, but never two forwards at once.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")
        if s.warmup:
            self._warmup()
        self.ready = True
        # Ray forgets a gauge that is not set again within two export intervals, so a daemon
        # thread keeps re-publishing them (and samples GPU memory between batches).
        self._stop = threading.Event()
        threading.Thread(target=self._publish_gauges, name="gauges", daemon=True).start()

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Apply new batch knobs from Ray's `user_config` without restarting the replica."""
        config = BatchConfig.model_validate(user_config)
        Settings.model_validate({**self.settings.model_dump(), "batch": config.model_dump()})
        self.batch = config
        self.batcher.configure(
            config.max_batch_texts, config.max_batch_tokens, config.batch_wait_timeout_s
        )
        logger.info("batch config now %s", config.model_dump())

    @app.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        """Alive: the process answers."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: ERROR_RESPONSES[503]})
    async def readyz(self) -> JSONResponse:
        """Ready: the model is loaded and every shape bucket has run once."""
        if not self.ready:
            return error_response(NotReady("model is loading or warming up"))
        return JSONResponse(
            {
                "status": "ready",
                "replica": serve.get_replica_context().replica_tag,
                "model": self.model.name,
                "device": str(self.model.device),
                "dtype": dtype_name(self.model.dtype),
                "batch": self.batch.model_dump(),
            }
        )

    @app.post(
        CLASSIFY_PATH,
        response_model=ClassifyResponse,
        responses=ERROR_RESPONSES,
    )
    async def classify(self, request: Request) -> JSONResponse:
        """Label each text `positive`/`negative` (or the model's labels) with probabilities."""
        start = time.monotonic()
        status = 499  # stays so only if the client leaves and the task is cancelled
        try:
            response = await self._classify(request, start)
            status = 200
            return response
        except ServiceError as exc:
            status = exc.status
            self.metrics.rejections.inc(tags={"reason": exc.reason})
            return error_response(exc)
        except Exception:
            status = 500
            logger.exception("classify failed")
            return error_response(InternalError())
        finally:
            self.metrics.request_latency.observe(time.monotonic() - start, {"status": str(status)})
            self.metrics.requests.inc(tags={"status": str(status)})

    async def _classify(self, request: Request, start: float) -> JSONResponse:
        s = self.settings
        raw = await read_body(request, s.max_body_bytes)
        texts = parse_request(raw, self.request_model).all_texts()
        if not self.ready:
            raise NotReady("model is loading or warming up")
        n = len(texts)
        if self.pending + n > self.batch.max_pending_texts:
            raise Overloaded(
                f"{self.pending} texts are waiting; the limit is {self.batch.max_pending_texts}",
                s.retry_after_s,
            )
        self.pending += n
        try:
            t0 = time.monotonic()
            encoded = self.model.encode(texts)
            self.metrics.tokenize.observe(time.monotonic() - t0)
            deadline = start + s.request_timeout_s
            items = [Item(e.ids, deadline, t0) for e in encoded]
            try:
                outputs = await asyncio.wait_for(
                    asyncio.gather(*(self.batcher.submit(item) for item in items)),
                    timeout=max(0.0, deadline - time.monotonic()),
                )
            except asyncio.TimeoutError:
                raise DeadlineExceeded(
                    f"not answered within the {s.request_timeout_s:g}s deadline"
                ) from None
        finally:
            self.pending -= n
        answers: list[list[float]] = []
        for out in outputs:
            if isinstance(out, ServiceError):
                raise out
            answers.append(out)
        labels = self.model.labels
        results = []
        for enc, probs in zip(encoded, answers, strict=True):
            best = max(range(len(labels)), key=probs.__getitem__)
            results.append(
                TextResult(
                    label=labels[best],
                    score=probs[best],
                    probabilities=dict(zip(labels, probs, strict=True)),
                    truncated=enc.truncated,
                )
            )
        self.metrics.texts.inc(n)
        truncated = sum(e.truncated for e in encoded)
        if truncated:
            self.metrics.truncated.inc(truncated)
        body = ClassifyResponse(model=self.model.name, results=results)
        return JSONResponse(body.model_dump())

    async def infer(self, items: list[Item]) -> AsyncIterator[list[tuple[int, Answer]]]:
        """One dynamic batch: drop expired items, then forward length-sorted micro-batches
        off the event loop, yielding each one's answers as soon as it is done."""
        now = time.monotonic()
        live, expired = split_expired(items, now)
        if expired:
            yield [(i, DeadlineExceeded("deadline passed while queued")) for i in expired]
        if not live:
            return
        for i in live:
            self.metrics.queue_wait.observe(now - items[i].enqueued)
        self.metrics.batch_texts.observe(len(live))
        lengths = [len(items[i].ids) for i in live]
        loop = asyncio.get_running_loop()
        overhead = self.batch.overhead_for(self.model.device.type)
        for group in plan_micro_batches(lengths, self.batch.micro_batch_tokens, overhead):
            indices = [live[g] for g in group]
            probs, seconds = await loop.run_in_executor(
                self.executor, self._forward, [items[i].ids for i in indices]
            )
            group_lengths = [lengths[g] for g in group]
            self.metrics.forward_texts.observe(len(group))
            self.metrics.forward_padded_tokens.observe(padded_cost(group_lengths))
            self.metrics.padding_ratio.observe(padding_ratio(group_lengths))
            self.metrics.forward.observe(seconds)
            yield list(zip(indices, probs, strict=True))

    def _forward(self, batch: list[list[int]]) -> tuple[list[Answer], float]:
        """One forward pass on the worker thread; returns probabilities and its duration."""
        t0 = time.perf_counter()
        probs: list[Answer] = self.model.predict(batch).tolist()
        return probs, time.perf_counter() - t0

    def _warmup(self) -> None:
        """Run each padded length bucket once, at one row and at a full micro-batch."""
        t0 = time.perf_counter()
        seed = self.model.encode(["warm up the model"])[0].ids
        length, shapes = 8, 0
        while True:
            width = min(length, self.model.max_length)
            ids = (seed * (width // len(seed) + 1))[:width]
            rows = max(1, self.batch.micro_batch_tokens // round_up(width))
            for n in sorted({1, rows}):
                self.model.predict([ids] * n)
                shapes += 1
            if width >= self.model.max_length:
                break
            length *= 2
        logger.info("warm-up: %d shapes in %.1fs", shapes, time.perf_counter() - t0)

    def _publish_gauges(self) -> None:
        m, model = self.metrics, self.model
        info = {"model": model.name, "dtype": dtype_name(model.dtype), "device": str(model.device)}
        on_gpu = model.device.type == "cuda"
        while not self._stop.wait(self.settings.metrics_refresh_s):
            m.model_info.set(1, tags=info)
            m.pending_texts.set(self.pending)
            m.gpu_allocated.set(torch.cuda.memory_allocated(model.device) if on_gpu else 0)
            m.gpu_reserved.set(torch.cuda.memory_reserved(model.device) if on_gpu else 0)
            m.gpu_peak.set(torch.cuda.max_memory_allocated(model.device) if on_gpu else 0)

    def __del__(self) -> None:
        if hasattr(self, "_stop"):
            self._stop.set()


def deployment_for(settings: Settings) -> Deployment:
    """The deployment with the replica count, resources and limits from settings."""
    deployment: Deployment = SentimentClassifier.options(  # type: ignore[attr-defined]
        num_replicas=settings.num_replicas,
        max_ongoing_requests=settings.max_ongoing_requests,
        max_queued_requests=settings.max_queued_requests,
        backpressure_config=BackpressureConfig(
            status_code=429, retry_after_s=settings.retry_after_s
        ),
        user_config=settings.batch.user_config(),
        graceful_shutdown_timeout_s=settings.graceful_shutdown_timeout_s,
        ray_actor_options={"num_cpus": settings.num_cpus, "num_gpus": settings.num_gpus},
    )
    return deployment


def application(settings: Settings) -> Application:
    """The bound application for `serve.run`."""
    return deployment_for(settings).bind(settings.model_dump(mode="json"))


def build_app(args: dict[str, Any] | None = None) -> Application:
    """Ray Serve application builder (`import_path: service.deployment:build_app`).

    `args` override `SENTIMENT_*` environment variables, field by field.
    """
    return application(Settings(**(args or {})))
