"""The FastAPI app shell: error handlers, body reading and the documented request schema."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from service import __version__
from service.apidocs import add_docs
from service.errors import (
    BadRequest,
    InternalError,
    PayloadTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
    ValidationFailed,
    error_response,
    http_status_error,
)
from service.schemas import ClassifyRequestBase, ErrorResponse

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in {
        400: "Body is not UTF-8 JSON",
        401: "API keys are configured and no valid `Authorization: Bearer` key was sent",
        408: "The body did not arrive within the request deadline",
        413: "Body larger than max_body_bytes, or texts needing more windows than one ingress "
        "admits at once (max_pending_texts)",
        415: "Content-Type is not JSON (a missing Content-Type is read as JSON), or the body "
        "is compressed (Content-Encoding other than identity)",
        422: "A field breaks a rule or a limit (details name the field and the reason)",
        429: "Overloaded; retry after the Retry-After header",
        503: "No model replica is ready (loading, warming up or restarting), or the service "
        "is shutting down; retry after the Retry-After header",
        504: "Deadline passed before the texts were computed",
        500: "Unexpected failure; no internals are returned",
    }.items()
}


def create_app() -> FastAPI:
    """An app whose every error, the framework's own included, uses the one JSON shape."""
    # No redirect from `/v1/classify/` to `/v1/classify`: Starlette's 307 carried no error
    # body and named an http:// URL, which behind a TLS-terminating balancer sends the client
    # back over plain HTTP. A path with a trailing slash is an unknown route, 404.
    app = FastAPI(
        title="Sentiment service",
        version=__version__,
        description="Sentiment labels and probabilities for product reviews and titles.",
        redirect_slashes=False,
        docs_url=None,  # served by add_docs, without a CDN
        redoc_url=None,
    )
    add_docs(app)

    async def on_http_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(http_status_error(exc.status_code, str(exc.detail), exc.headers))

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


class ClientGone(Exception):
    """The client closed the connection before its request was read."""


def route_path(scope: Scope) -> str:
    """The request path below the app's mount point (Ray sets `root_path` to the prefix)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", ""):
        return path[len(root) :]
    return path


T = TypeVar("T")


def check_content_type(value: bytes) -> None:
    """415 unless the media type is JSON (`application/json` or `*/*+json`) in UTF-8."""
    media, _, params = value.partition(b";")
    media = media.strip().lower()
    if media != b"application/json" and not (
        media.startswith(b"application/") and media.endswith(b"+json")
    ):
        shown = media.decode("latin-1")[:100] or "empty"
        raise UnsupportedMediaType(
            f"Content-Type {shown} is not supported; send JSON with "
            "'Content-Type: application/json'"
        )
    for param in params.lower().split(b";"):  # charset may sit among other parameters
        name, _, charset = param.partition(b"=")
        charset = charset.strip(b' "')
        if name.strip() == b"charset" and charset not in (b"utf-8", b"utf8", b"us-ascii"):
            shown = charset.decode("latin-1")[:40] or "empty"
            raise UnsupportedMediaType(
                f"charset {shown} is not supported; JSON bodies must be UTF-8 (charset=utf-8)"
            )


async def read_body(scope: Scope, receive: Receive, limit: int, deadline: float) -> bytes:
    """Read at most `limit` bytes by `deadline` (time.monotonic()); refuse early on a
    Content-Length over the limit, a Content-Type that is not JSON or a compressed body.

    A missing Content-Type is read as JSON, so minimal clients keep working; forms and plain
    text (what a page can post cross-site without asking) are refused. The deadline is the
    request's own: a client sending its body slowly holds a slot no longer than any other.
    """
    for name, value in scope["headers"]:
        if name == b"content-length":
            if not value.isdigit():
                raise BadRequest("Content-Length is not a number")
            if int(value) > limit:
                raise PayloadTooLarge(f"body is {int(value)} bytes; the limit is {limit}")
        elif name == b"content-type":
            check_content_type(value)
        elif name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
            # A compressed body would otherwise fail later as "not UTF-8" or "not JSON".
            shown = value.decode("latin-1")[:50]
            raise UnsupportedMediaType(
                f"Content-Encoding {shown} is not supported; send the JSON body uncompressed",
                headers={"Accept-Encoding": "identity"},
            )
    try:
        return await _within(_read(receive, limit), deadline - time.monotonic())
    except asyncio.TimeoutError:
        raise RequestTimeout("the body did not arrive within the request deadline") from None


async def _read(receive: Receive, limit: int) -> bytes:
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk: bytes = message.get("body", b"")
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(f"body exceeds the limit of {limit} bytes")
        if not message.get("more_body", False):
            return body


async def _within(work: Awaitable[T], delay: float) -> T:
    """`work`, or asyncio.TimeoutError after `delay` seconds."""
    if sys.version_info >= (3, 11):  # a timer on the running task: no extra task per request
        async with asyncio.timeout(delay):
            return await work
    return await asyncio.wait_for(work, delay)


async def send_json(
    send: Send, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    """Send a complete JSON response in two ASGI messages."""
    raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


# Bodies the docs pages offer to send. Without them Swagger UI's "Try it out" builds one from
# the schema, with both `texts` and `text` set, and the service answers it 422.
REQUEST_EXAMPLES: dict[str, dict[str, Any]] = {
    "texts": {
        "summary": "Several texts, answered in order",
        "value": {"texts": ["great phone, fast delivery", "broke after a day"]},
    },
    "text": {
        "summary": "One text",
        "value": {"text": "The strap feels cheap, but the watch keeps perfect time."},
    },
}


def document_request_body(app: FastAPI, path: str, model: type[ClassifyRequestBase]) -> None:
    """Show the configured request model (with its limits) and examples in /docs.

    The endpoint reads the raw body itself (to answer 400/413 before JSON parsing), so FastAPI
    cannot infer the schema; it is filled in here once the limits are known.
    """
    schema = app.openapi()
    operation = schema["paths"][path]["post"]
    operation["requestBody"] = {
        "required": True,
        "content": {
            "application/json": {
                "schema": model.model_json_schema(),
                "examples": REQUEST_EXAMPLES,
            }
        },
    }
    app.openapi_schema = schema


Answer = tuple[int, bytes, dict[str, str]]  # status, JSON body, headers


class Front:
    """ASGI: `POST path` straight to `answer`, everything else to FastAPI. It shows FastAPI's
    routes and router, so Ray labels its request metrics by route as before."""

    def __init__(
        self, api: FastAPI, path: str, answer: Callable[[Scope, Receive], Awaitable[Answer]]
    ) -> None:
        self.api = api
        self.path = path
        self.answer = answer
        # Ray matches every request against these to label its metrics: the hot route first.
        self.routes = sorted(api.routes, key=lambda r: getattr(r, "path", "") != path)
        self.router = api.router

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and route_path(scope) == self.path:
            status, body, headers = await self.answer(scope, receive)
            if status != 499:  # the client left: nobody to answer
                await send_json(send, status, body, headers)
        else:
            await self.api(scope, receive, send)
