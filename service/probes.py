"""The health and readiness probes: their routes, and what `/readyz` answers.

`ReadyResponse` is what the OpenAPI spec shows for `/readyz`; the answer itself is built by the
ingress from the model replica's `info` (tests check the two agree, field for field).
"""

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from service.batchconfig import BatchConfig
from service.errors import ServiceError, error_response
from service.http import ERROR_RESPONSES


class Limits(BaseModel):
    """The request limits in force (args or environment, then `user_config`)."""

    model_config = ConfigDict(extra="forbid")

    max_texts_per_request: int
    max_text_chars: int
    max_body_bytes: int
    request_timeout_s: float


class ReadyResponse(BaseModel):
    """A model replica has loaded and warmed its model, and answers: what serves, and how."""

    # Forbidden extras make a field added to the answer but not here fail the tests.
    model_config = ConfigDict(extra="forbid")

    status: str = Field(description='Always "ready" (not ready answers 503).')
    replica: str = Field(description="The model replica that answered.")
    ingress_replica: str = Field(description="The ingress replica that answered.")
    model_calls: str = Field(
        description='How the ingress reaches the model: "in process" (co-located), "gRPC" or '
        '"actor calls".'
    )
    model: str
    device: str = Field(description='"cpu", "cuda:0", ...')
    dtype: str
    backend: str = Field(description="The forward backend in use (docs/backends.md).")
    backend_reason: str = Field(description="Why this backend: asked for, or measured.")
    forward_in: str = Field(description='"thread" or "process": where forwards run.')
    parallel_forwards: int
    labels: list[str]
    batch: BatchConfig = Field(description="The batch knobs in force.")
    limits: Limits
    user_config_refused: str | None = Field(
        description="Why the latest `user_config` was refused (the one before stays); else null."
    )
    forward_overhead_tokens: int = Field(
        description="Fixed cost of one forward, in padded tokens, that batches are planned with."
    )
    tokens_per_s: int | None = Field(
        description="Padded tokens a second in full forwards, by the warm-up's fit."
    )
    ingress_pace_tokens_per_s: int | None = Field(
        description="What this ingress has measured of the model's pace; null before any call."
    )
    inline_forward_ms: float = Field(
        description="Forwards estimated at most this long run on the event loop."
    )
    # What the model core has done since it started (the bench reads these around a run).
    batches: int = Field(description="Dynamic batches computed.")
    batched_texts: int = Field(description="Texts in those batches.")
    forwards: int = Field(description="Forward passes run.")
    loop_forward_cpu_s: float = Field(description="CPU seconds of forwards run on the loop.")
    forward_texts: int = Field(description="Rows forwarded: a text, or each window of a long one.")
    forward_tokens: int = Field(description="Tokens forwarded, padding excluded.")
    forward_padded_tokens: int = Field(description="Tokens forwarded, padding included.")


def add_probes(api: FastAPI, ready: Callable[[], Awaitable[dict[str, Any]]]) -> None:
    """`/healthz` (alive) and `/readyz` (`ready()`'s answer, or the ServiceError it raises)."""

    # HEAD answers as GET without the body (uptime monitors often send it); kept out of
    # the OpenAPI spec, which would list each probe twice.
    @api.head("/healthz", include_in_schema=False)
    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Alive: the process answers."""
        return {"status": "ok"}

    @api.head("/readyz", include_in_schema=False)
    @api.get("/readyz", response_model=ReadyResponse, responses={503: ERROR_RESPONSES[503]})
    async def readyz() -> Response:
        """Ready: a model replica has loaded and warmed its model, and answers."""
        try:
            return JSONResponse(await ready())
        except ServiceError as exc:
            return error_response(exc)
