"""The HTTP ingress: every per-request cost lives here, in replicas that scale with CPU cores.

`POST /v1/classify` is answered by a lean ASGI route (read under the size limit, a fast check
of the ordinary body shape, admission, the coalescer, a JSON answer built from plain values);
everything else (health, readiness, OpenAPI docs, unknown routes) goes to a FastAPI app.
"""

import asyncio
import logging
import os
import time
from collections import Counter
from collections.abc import Awaitable
from typing import Any

from fastapi import FastAPI, Request
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.handle import DeploymentHandle
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope

from service.admission import Admission
from service.auth import ApiKeys
from service.chunking import WindowEncoder
from service.coalescer import Coalescer, ModelCall, Reply
from service.colocated import LocalModel
from service.drain import DrainWatch
from service.encoding import CallResult, Packed, labels_of, tokenizer_threads_env
from service.errors import (
    DeadlineExceeded,
    InternalError,
    NotReady,
    ServiceError,
    ShuttingDown,
)
from service.failover import Failover, call_transport, pickled_calls, taken_by_replica
from service.http import (
    ERROR_RESPONSES,
    Answer,
    ClientGone,
    Front,
    create_app,
    document_request_body,
    read_body,
)
from service.liveconfig import LiveConfig
from service.metrics import UNREADABLE_SHARE, IngressMetrics
from service.modeldir import check_model_dir
from service.probes import add_probes
from service.render import answer_bytes, json_bytes
from service.schemas import ClassifyResponse, parse_request, plain_texts, request_model
from service.settings import Settings

logger = logging.getLogger("ray.serve")
CLASSIFY_PATH = "/v1/classify"
MODEL_DEPLOYMENT = "SentimentModel"
IN_PROCESS = "in-process"  # `model` argument of the co-located layout


@serve.deployment(name="SentimentIngress")
@serve.ingress()
class SentimentIngress:
    """Validates, tokenizes and admits requests; the model replica only sees packed ids."""

    # Async: Ray awaits the constructor (mypy wants every __init__ to return None).
    async def __init__(  # type: ignore[misc]
        self, settings: dict[str, Any], model: DeploymentHandle[Any] | str
    ) -> None:
        """`model` is the model deployment bound into this application, the name of the
        application that runs it (`python -m service serve` runs the tiers as two), or
        IN_PROCESS: the model core runs in this replica (service/colocated.py)."""
        self.settings = s = Settings.model_validate(settings)
        self.live = LiveConfig(s)
        check_model_dir(s.model_path, s.allow_pickle)
        self.keys = ApiKeys.load(s.api_keys_file)
        self._keys_task = asyncio.get_running_loop().create_task(self.keys.watch())
        self.local: LocalModel | None = None
        if model == IN_PROCESS:
            self.local = LocalModel(settings)
        else:
            # Ingress replicas scale by process: one tokenizer thread pool per core in each
            # would oversubscribe the cores they share (see tokenizer_threads_env).
            os.environ.update(tokenizer_threads_env(s.tokenizer_parallel))
            if isinstance(model, str):
                model = serve.get_deployment_handle(MODEL_DEPLOYMENT, app_name=model)
            else:  # a bound handle calls as the process that built the app did: maybe
                # as Ray actor calls; one made here calls as this replica does (gRPC in Ray's
                # throughput-optimized mode, cheaper for the model replica: docs/serving.md).
                model = serve.get_deployment_handle(model.deployment_name, app_name=model.app_name)
            model = pickled_calls(model)
        self.model: Any = self.local or model
        self.name = s.model_name or s.model_path.name
        self.labels = labels_of(s.model_path)
        self.request_model = request_model(s.max_texts_per_request, s.max_text_chars)
        self.api: FastAPI | None = None  # built by Ray after this; its docs show the limits
        self.metrics = IngressMetrics()
        # A model replica that dies fails the calls it held (RayActorError: ActorDiedError, or
        # ActorUnavailableError over gRPC); each is sent once more, or refused with 503 while
        # no replica answers (service.failover). A model core in this process dies with it:
        # its calls need no failover, and skip the task and timer that it costs each call.
        call: ModelCall = (
            self.local.core.infer
            if self.local
            else Failover(
                self._call_model,
                self._model_info,
                (RayActorError,),
                probe_s=s.model_probe_s,
                retry_after_s=s.retry_after_s,
                is_up=lambda: self.model_ready,
                taken=taken_by_replica,
                on_resend=self._count_resend,
                on_down=self._model_lost,
            )
        )
        windows = s.max_windows if s.long_texts == "chunk" else 1
        self.encoder = WindowEncoder.load(s.model_path, s.max_seq_len, windows, s.window_overlap)
        self.admission = Admission(s.batch.max_pending_texts, s.retry_after_s)
        self.coalescer = Coalescer(
            call,
            max_texts=s.batch.max_batch_texts,
            in_flight=s.ingress_calls_in_flight or (self.local.core.parallel if self.local else 1),
            observe=self._observe_call,
            paced=self.admission.pace.observe,
        )
        self.model_ready = False  # set once the model replica has answered
        self._watch = asyncio.get_running_loop().create_task(self._wait_for_model())
        context = serve.get_replica_context()
        self.drain = DrainWatch(
            context.app_name, context.replica_tag, lambda: self.admission.pending
        )
        self._drain_task = asyncio.get_running_loop().create_task(self.drain.run())
        # Counters are summed here and published once per refresh: one Ray metric call per
        # request (the latency histogram) instead of three.
        self._counts: Counter[tuple[str, str]] = Counter()
        self._windows: Counter[int] = Counter()  # long texts by their window count (2 or more)
        self._publish = asyncio.get_running_loop().create_task(self._publish_metrics())

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Batch knobs (admission bound, texts per call) and request limits, in place; a bad
        user_config is refused and those in force stay (service.liveconfig)."""
        if self.local:  # refuses a bad one alike: both set the one refused gauge
            self.local.reconfigure(user_config)
        if not self.live.apply(user_config):
            return
        self.settings = s = self.live.current
        self.coalescer.max_texts = s.batch.max_batch_texts
        self.admission.limit = s.batch.max_pending_texts
        self.request_model = request_model(s.max_texts_per_request, s.max_text_chars)
        if self.api is not None:
            document_request_body(self.api, CLASSIFY_PATH, self.request_model)
        logger.info("request limits now %s", self.live.limits())

    async def check_health(self) -> None:
        """Co-located, the model core's check is this replica's; else Ray's default."""
        if self.local:
            await self.local.check_health()

    def __serve_build_asgi_app__(self) -> ASGIApp:
        """The lean classify route in front of a FastAPI app for everything else."""
        self.api = self._fastapi()
        return Front(self.api, CLASSIFY_PATH, self.answer)

    def _fastapi(self) -> FastAPI:
        api = create_app()
        add_probes(api, self._ready)

        @api.post(CLASSIFY_PATH, response_model=ClassifyResponse, responses=ERROR_RESPONSES)
        async def classify(request: Request) -> Response:
            """Label each text `positive`/`negative` (or the model's labels) with probabilities."""
            status, body, headers = await self.answer(request.scope, request.receive)
            return Response(body, status, headers, media_type="application/json")

        document_request_body(api, CLASSIFY_PATH, self.request_model)
        return api

    async def _ready(self) -> dict[str, Any]:
        """What `/readyz` answers (service.probes.ReadyResponse), once the model answers."""
        if self.drain.draining:
            raise ShuttingDown(self.settings.retry_after_s)
        try:
            info = await asyncio.wait_for(self._model_info(), 5.0)
        except Exception:
            raise NotReady("model is loading or warming up", self.settings.retry_after_s) from None
        self.model_ready = True  # the model answered: classify must not say otherwise
        pace = self.admission.pace.tokens_per_s
        return {
            "status": "ready",
            **info,
            "ingress_replica": serve.get_replica_context().replica_tag,
            "ingress_pace_tokens_per_s": round(pace) if pace else None,
            "limits": self.live.limits(),
            # The ingress's refusal, else the model replica's (it may get another dict).
            "user_config_refused": self.live.refused or info.get("user_config_refused"),
        }

    async def answer(self, scope: Scope, receive: Receive) -> Answer:
        """One classify request, start to end; never raises."""
        start = time.monotonic()
        status = 499  # stays so only if the client leaves
        try:
            answer = await self._classify(scope, receive, start)
            status = 200
            return answer
        except ClientGone:
            return 499, b"", {}
        except ServiceError as exc:
            status = exc.status
            self._counts["rejected", exc.reason] += 1
            return status, json_bytes(exc.body()), exc.headers
        except Exception:
            status = 500
            logger.exception("classify failed")
            error = InternalError()
            return 500, json_bytes(error.body()), {}
        finally:
            self.metrics.request_latency.observe(time.monotonic() - start, {"status": str(status)})
            self._counts["status", str(status)] += 1

    async def _classify(self, scope: Scope, receive: Receive, start: float) -> Answer:
        s = self.settings
        self.keys.check(scope)
        timeout = s.request_timeout_s
        deadline = start + timeout
        raw = await read_body(scope, receive, s.max_body_bytes, deadline)
        texts = plain_texts(raw, s.max_texts_per_request, s.max_text_chars)
        if texts is None:  # unusual or invalid: full validation, with field-level details
            texts = parse_request(raw, self.request_model).all_texts()
        if not self.model_ready:
            raise NotReady("model is loading, warming up or restarting", s.retry_after_s)
        if self.drain.draining:
            raise ShuttingDown(s.retry_after_s)
        # A text is one row at least: admitted (and in flight for a drain) before tokenizing,
        # unless the work ahead alone would outlast its time; then counted in windows and
        # tokens once they are known.
        with self.admission.hold(len(texts), deadline - time.monotonic()) as held:
            request = await self.encoder.encode_async(texts)
            held.resize(request.rows, len(request.packed.ids), deadline - time.monotonic())
            future = self.coalescer.submit(request, deadline)
            timer = asyncio.get_running_loop().call_later(
                max(0.0, deadline - time.monotonic()), _expire, future, timeout
            )
            try:
                reply = await future
            finally:
                timer.cancel()
        self._counts["texts", ""] += len(texts)
        self._counts["truncated", ""] += sum(reply.truncated)
        self._counts["unreadable", ""] += sum(share > UNREADABLE_SHARE for share in reply.unknown)
        self._windows.update(w for w in reply.windows if w > 1)
        return 200, answer_bytes(self.name, self.labels, reply), {}

    def _call_model(self, packed: Packed, budgets: Any) -> Awaitable[CallResult]:
        """The handle call itself (a `DeploymentResponse`), so the failover can see whether a
        replica has taken it."""
        response: Awaitable[CallResult] = self.model.infer.remote(packed, budgets)
        return response

    def _count_resend(self) -> None:
        self._counts["resent", ""] += 1

    def _model_lost(self) -> None:
        """No model replica answered: refuse at once until one does again."""
        self.model_ready = False
        if self._watch.done():
            self._watch = asyncio.get_running_loop().create_task(self._wait_for_model())

    async def _model_info(self) -> dict[str, Any]:
        call = self.model.info.remote()
        info: dict[str, Any] = await call
        self.admission.pace.seed(info.get("tokens_per_s"))
        # How this ingress reaches the model, for /readyz.
        info["model_calls"] = "in process" if self.local else call_transport(call)
        return info

    async def _wait_for_model(self) -> None:
        """Admit requests only once a model replica answers (it loads and warms up first)."""
        while not self.model_ready:
            try:
                await asyncio.wait_for(self._model_info(), 10.0)
                self.model_ready = True
            except Exception:
                await asyncio.sleep(0.5)

    def _observe_call(self, rows: int, tokenize_s: float) -> None:
        self.metrics.call_texts.observe(rows)
        self.metrics.tokenize.observe(tokenize_s)

    async def _publish_metrics(self) -> None:
        """On the event loop (no lock needed): hand the counts over, every refresh (Ray
        forgets a gauge not set again within two export intervals)."""
        while True:
            await asyncio.sleep(self.settings.metrics_refresh_s)
            counts, self._counts = self._counts, Counter()
            windows, self._windows = self._windows, Counter()
            admission = self.admission
            pace = admission.pace.tokens_per_s
            self.metrics.publish(counts, windows, admission.pending, pace, self.live.refused)


def _expire(future: asyncio.Future[Reply], timeout: float) -> None:
    if not future.done():
        future.set_exception(DeadlineExceeded(f"not answered within the {timeout:g}s deadline"))
