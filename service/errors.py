"""Error classes that carry their HTTP status, and the one function that renders them.

Every error leaves the service in the same JSON shape:
`{"error": {"code": "...", "message": "...", "details": [{"field": "...", "reason": "..."}]}}`.
5xx bodies never echo internals: the message is fixed by the class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from starlette.responses import JSONResponse


class ServiceError(Exception):
    """Base class: `status` and `code` live on the class, so one handler maps them all."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    reason: ClassVar[str] = "internal"  # label for sentiment_rejections_total

    def __init__(
        self,
        message: str,
        details: list[dict[str, str]] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON body clients receive."""
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            err["details"] = self.details
        return {"error": err}


class BadRequest(ServiceError):
    """The body is not JSON, not UTF-8, or not an object."""

    status, code, reason = 400, "bad_request", "bad_request"


class ValidationFailed(ServiceError):
    """The JSON is well formed but a field breaks a rule or a limit."""

    status, code, reason = 422, "validation_error", "validation"


class PayloadTooLarge(ServiceError):
    """The body is bigger than `max_body_bytes`."""

    status, code, reason = 413, "payload_too_large", "too_large"


class UnsupportedMediaType(ServiceError):
    """The body is declared as something other than JSON (a form, plain text)."""

    status, code, reason = 415, "unsupported_media_type", "media_type"


class RequestTimeout(ServiceError):
    """The body did not arrive within the request deadline (a slow or stalled client)."""

    status, code, reason = 408, "request_timeout", "slow_body"


class Unauthorized(ServiceError):
    """API keys are configured and the request carries no valid one."""

    status, code, reason = 401, "unauthorized", "unauthorized"

    def __init__(self, message: str) -> None:
        super().__init__(message, headers={"WWW-Authenticate": "Bearer"})


class NotFound(ServiceError):
    """No such route."""

    status, code, reason = 404, "not_found", "not_found"


class MethodNotAllowed(ServiceError):
    """The route exists but not for this HTTP method."""

    status, code, reason = 405, "method_not_allowed", "method_not_allowed"


class Overloaded(ServiceError):
    """Too many texts admitted and unanswered: come back later."""

    status, code, reason = 429, "overloaded", "overloaded"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})


class Behind(Overloaded):
    """The work already admitted would outlast this request's deadline: 429 now, not a 504
    later (the same answer to the client; its own rejection reason for the operator)."""

    reason = "behind"


class NotReady(ServiceError):
    """The model is not loaded or warmed up yet, or no model replica answers."""

    status, code, reason = 503, "not_ready", "not_ready"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})


class ShuttingDown(ServiceError):
    """The service is draining before it stops: try again (elsewhere) shortly."""

    status, code, reason = 503, "shutting_down", "draining"

    def __init__(self, retry_after_s: int) -> None:
        message = "the service is shutting down; retry shortly"
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})


class DeadlineExceeded(ServiceError):
    """The request's deadline passed before its texts were computed."""

    status, code, reason = 504, "deadline_exceeded", "deadline"


class InternalError(ServiceError):
    """Anything unexpected; the message never carries internals."""

    status, code, reason = 500, "internal_error", "internal"

    def __init__(self) -> None:
        super().__init__("internal error; no results were returned")


def error_response(exc: ServiceError) -> JSONResponse:
    """Render any ServiceError as the one JSON error shape."""
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def http_status_error(
    status: int, detail: str, headers: Mapping[str, str] | None = None
) -> ServiceError:
    """Map a framework HTTP error (unknown route, wrong method) onto our classes, keeping
    the headers HTTP requires of it (`Allow` on a 405)."""
    error: ServiceError
    if status == 404:
        error = NotFound(detail or "not found")
    elif status == 405:
        error = MethodNotAllowed(detail or "method not allowed")
    elif status == 413:
        error = PayloadTooLarge(detail)
    elif 400 <= status < 500:
        error = BadRequest(detail or "bad request")
    else:
        return InternalError()
    error.headers.update(headers or {})
    return error
