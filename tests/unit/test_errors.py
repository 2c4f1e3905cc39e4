"""One error shape; status lives on the class; 5xx never leaks internals."""

from __future__ import annotations

import json

import pytest

from service.errors import (
    BadRequest,
    DeadlineExceeded,
    InternalError,
    NotReady,
    Overloaded,
    PayloadTooLarge,
    ServiceError,
    ValidationFailed,
    error_response,
    http_status_error,
)


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (BadRequest("x"), 400, "bad_request"),
        (ValidationFailed("x", [{"field": "texts", "reason": "r"}]), 422, "validation_error"),
        (PayloadTooLarge("x"), 413, "payload_too_large"),
        (Overloaded("x", retry_after_s=2), 429, "overloaded"),
        (NotReady("x", 1), 503, "not_ready"),
        (DeadlineExceeded("x"), 504, "deadline_exceeded"),
        (InternalError(), 500, "internal_error"),
    ],
)
def test_status_and_shape(error: ServiceError, status: int, code: str) -> None:
    response = error_response(error)
    assert response.status_code == status
    body = json.loads(bytes(response.body))
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)


def test_validation_details_are_rendered() -> None:
    body = ValidationFailed("bad", [{"field": "texts[0]", "reason": "empty"}]).body()
    assert body["error"]["details"] == [{"field": "texts[0]", "reason": "empty"}]


def test_overload_carries_retry_after() -> None:
    assert error_response(Overloaded("busy", retry_after_s=3)).headers["retry-after"] == "3"


def test_internal_error_message_is_fixed() -> None:
    assert "internal error" in InternalError().message


@pytest.mark.parametrize(
    ("status", "cls"),
    [(404, "NotFound"), (405, "MethodNotAllowed"), (413, "PayloadTooLarge"), (418, "BadRequest")],
)
def test_framework_errors_map_onto_our_classes(status: int, cls: str) -> None:
    assert type(http_status_error(status, "detail")).__name__ == cls
    assert http_status_error(status, "d").status == (400 if status == 418 else status)


def test_framework_5xx_becomes_generic_internal_error() -> None:
    err = http_status_error(502, "upstream secret")
    assert err.status == 500 and "secret" not in err.message
