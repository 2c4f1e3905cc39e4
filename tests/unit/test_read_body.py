"""Reading the classify body: JSON content types only, and never past the request deadline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from service.errors import PayloadTooLarge, RequestTimeout, UnsupportedMediaType
from service.http import read_body


def scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "headers": list(headers)}


def receiver(*chunks: bytes, pause_s: float = 0.0) -> Any:
    """An ASGI receive that sends `chunks`, pausing before each."""
    parts = list(chunks)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(pause_s)
        body = parts.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(parts)}

    return receive


def read(sc: dict[str, Any], receive: Any, deadline_s: float = 5.0) -> bytes:
    return asyncio.run(read_body(sc, receive, 100, time.monotonic() + deadline_s))


@pytest.mark.parametrize(
    "content_type",
    [b"application/json", b"application/json; charset=utf-8", b"Application/JSON",
     b"application/merge-patch+json", b"application/json; charset=utf-8; version=2",
     b'application/json;version=2; Charset="UTF-8"', b"application/json; xcharset=latin-1",
     None],
)  # fmt: skip
def test_json_or_no_content_type_is_read(content_type: bytes | None) -> None:
    headers = [(b"content-type", content_type)] if content_type else []
    assert read(scope(*headers), receiver(b'{"text":', b' "a"}')) == b'{"text": "a"}'


@pytest.mark.parametrize(
    "content_type",
    [b"text/plain", b"application/x-www-form-urlencoded", b"multipart/form-data; boundary=x",
     b"", b"application/json; charset=latin-1", b"application/jsonp",
     b"application/json; version=2; charset=latin-1", b"application/json; charset="],
)  # fmt: skip
def test_other_content_types_are_415(content_type: bytes) -> None:
    with pytest.raises(UnsupportedMediaType) as info:
        read(scope((b"content-type", content_type)), receiver(b"{}"))
    assert info.value.status == 415 and info.value.code == "unsupported_media_type"
    if b"charset" in content_type:  # names what was sent, not only what is wanted
        assert f"charset {content_type.partition(b'charset=')[2].decode() or 'empty'}" in str(
            info.value.message
        )


@pytest.mark.parametrize("coding", [b"gzip", b"br", b"deflate, gzip"])
def test_a_compressed_body_is_415_naming_the_coding(coding: bytes) -> None:
    with pytest.raises(UnsupportedMediaType) as info:
        read(scope((b"content-encoding", coding)), receiver(b"\x1f\x8b"))
    assert info.value.status == 415 and coding.decode() in info.value.message
    assert info.value.headers == {"Accept-Encoding": "identity"}


def test_an_identity_coding_is_read() -> None:
    sc = scope((b"content-encoding", b"identity"), (b"content-type", b"application/json"))
    assert read(sc, receiver(b"{}")) == b"{}"


def test_a_slow_body_is_408_at_the_deadline() -> None:
    chunks = [b"{"] + [b" "] * 50 + [b"}"]
    t0 = time.monotonic()
    with pytest.raises(RequestTimeout) as info:
        read(scope(), receiver(*chunks, pause_s=0.05), deadline_s=0.3)
    assert info.value.status == 408
    assert time.monotonic() - t0 < 2.0  # well before the body would have ended (2.6 s)


def test_size_limit_still_holds() -> None:
    with pytest.raises(PayloadTooLarge):
        read(scope(), receiver(b"x" * 60, b"x" * 60))
