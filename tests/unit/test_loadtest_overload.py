"""The long-review overload driver (loadtest.overload) against a real HTTP server on
loopback: every request it sends is counted once, under the status it got."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from loadtest.overload import body, main, run


def test_a_request_holds_distinct_reviews_of_about_the_words_asked() -> None:
    texts = json.loads(body(7, texts=3, words=300))["texts"]
    assert len(texts) == 3 and len(set(texts)) == 3
    assert all(texts[i].startswith(f"Order 7-{i}.") for i in range(3))
    assert all(270 <= len(t.split()) <= 330 for t in texts)


@asynccontextmanager
async def _server(seen: list[int]) -> AsyncIterator[str]:
    """Answers every other request 429, the rest 200; yields its base URL."""

    async def classify(request: web.Request) -> web.Response:
        texts = (await request.json())["texts"]
        seen.append(len(texts))
        if len(seen) % 2:
            return web.json_response({"results": [{}] * len(texts)})
        return web.json_response({"error": {"code": "overloaded"}}, status=429)

    app = web.Application()
    app.router.add_post("/v1/classify", classify)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def test_every_request_is_counted_once_under_its_status() -> None:
    seen: list[int] = []

    async def main() -> dict[str, Any]:
        async with _server(seen) as url:
            return await run(url, texts=2, words=20, rate=40.0, seconds=0.5)

    result = asyncio.run(main())
    statuses = result["statuses"]
    assert result["requests"] == len(seen) == sum(statuses.values()) > 5
    assert statuses["200"] == (len(seen) + 1) // 2 and statuses["429"] == len(seen) // 2
    assert result["texts_answered_per_s"] > 0 and set(result["p50_s"]) == {"200", "429"}


def test_no_ready_service_is_an_error_and_nothing_is_sent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    assert main(["--url", url, "--seconds", "0.5"]) == 2
    captured = capsys.readouterr()
    assert f"no ready service at {url}" in captured.err and captured.out == ""
