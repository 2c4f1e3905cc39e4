"""The FastAPI app shell: error handlers, body reading and the documented request schema."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from service import __version__
from service.errors import (
    BadRequest,
    InternalError,
    PayloadTooLarge,
    ValidationFailed,
    error_response,
    http_status_error,
)
from service.schemas import ClassifyRequestBase, ErrorResponse

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        400: "Body is not UTF-8 JSON",
        413: "Body larger than max_body_bytes",
        422: "A field breaks a rule or a limit (details name the field and the reason)",
        429: "Overloaded; retry after the Retry-After header",
        503: "Model not loaded or warmed up yet",
        504: "Deadline passed before the texts were computed",
        500: "Unexpected failure; no internals are returned",
    }.items()
}


def create_app() -> FastAPI:
    """An app whose every error, the framework's own included, uses the one JSON shape."""
    app = FastAPI(
        title="Sentiment service",
        version=__version__,
        description="Sentiment labels and probabilities for product reviews and titles.",
    )

    async def on_http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(http_status_error(exc.status_code, str(exc.detail)))

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        details = [
            {"field": ".".join(map(str, e["loc"])), "reason": e["msg"]} for e in exc.errors()
        ]
        return error_response(ValidationFailed("request failed validation", details))

    async def on_unexpected(_: Request, exc: Exception) -> JSONResponse:
        return error_response(InternalError())

    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(Exception, on_unexpected)
    return app


async def read_body(request: Request, limit: int) -> bytes:
    """Read at most `limit` bytes; refuse early on a Content-Length over the limit."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequest("Content-Length is not a number")
        if int(declared) > limit:
            raise PayloadTooLarge(f"body is {declared} bytes; the limit is {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
    return bytes(body)


def document_request_body(app: FastAPI, path: str, model: type[ClassifyRequestBase]) -> None:
    """Show the configured request model (with its limits) in /docs.

    The endpoint reads the raw body itself (to answer 400/413 before JSON parsing), so FastAPI
    cannot infer the schema; it is filled in here once the limits are known.
    """
    schema = app.openapi()
    operation = schema["paths"][path]["post"]
    operation["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": model.model_json_schema()}},
    }
    app.openapi_schema = schema
