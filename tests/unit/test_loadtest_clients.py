"""The bench's multi-process load generator (loadtest.clients) against a real HTTP server on
loopback: the load is spread over child processes, counted once, and never as server CPU."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest
from aiohttp import web

from loadtest import cpu
from loadtest.clients import ClientPool, default_processes, merge, pool, shares
from loadtest.httpload import RunResult, closed_loop

T = TypeVar("T")


@asynccontextmanager
async def _server(seen: list[bytes]) -> AsyncIterator[str]:
    """A loopback HTTP server that keeps every body it is sent; yields its URL."""

    async def classify(request: web.Request) -> web.Response:
        seen.append(await request.read())
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/classify", classify)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/classify"
    finally:
        await runner.cleanup()


def _run(test: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(asyncio.wait_for(test(), 60))


PAYLOADS = [(f'{{"text": "review {i}"}}'.encode(), 1) for i in range(4)]


def test_shares_split_near_equally_and_never_into_nothing() -> None:
    assert shares(5, 2) == [3, 2]
    assert shares(256, 4) == [64] * 4
    assert shares(1, 4) == [1]  # one client runs in one process, not four


def test_default_processes_leave_a_small_machine_one_client() -> None:
    assert [default_processes(n) for n in (1, 2, 4, 8, 16, 64)] == [1, 1, 1, 2, 4, 4]


def test_merge_adds_counts_and_takes_the_longest_window() -> None:
    a = RunResult(3, 3, 1, 2.0, [0.1, 0.2, 0.3], {200: 3, 0: 1}, 0.5, {0: [9.0]})
    b = RunResult(2, 4, 1, 2.5, [0.4, 0.5], {200: 2, 429: 1}, 0.25, {429: [0.01]})
    merged = merge([a, b])
    assert (merged.requests, merged.texts, merged.errors) == (5, 7, 2)
    assert merged.seconds == 2.5
    assert sorted(merged.latencies) == [0.1, 0.2, 0.3, 0.4, 0.5]
    assert merged.statuses == {200: 5, 0: 1, 429: 1}
    assert merged.refused == {0: [9.0], 429: [0.01]}
    assert merged.client_cpu_s == 0.75


def test_a_pool_spreads_the_clients_and_the_cap_over_its_processes() -> None:
    seen: list[bytes] = []

    async def test() -> tuple[RunResult, RunResult, set[int]]:
        async with _server(seen) as url:
            clients = ClientPool(2)
            await clients.start()
            try:
                pids = {child.pid for child in clients._children}
                # Each child starts at its own place in the payloads: 0 and 2.
                first = await clients.closed_loop(url, PAYLOADS, 2, 30.0, 2)
                # Runs until the cap (split 20/20), not the 30 s.
                second = await clients.closed_loop(url, PAYLOADS, 4, 30.0, 40)
                # The children are below this process, yet no server of it.
                below = {s.pid for s in cpu.snapshot(os.getpid()).samples.values()}
            finally:
                await clients.close()
        return first, second, pids & below

    first, second, counted = _run(test)
    assert sorted(seen[:2]) == [PAYLOADS[0][0], PAYLOADS[2][0]]
    assert (first.requests, second.requests, second.texts) == (2, 40, 40)
    assert second.statuses == {200: 40} and len(second.latencies) == 40
    assert len(seen) == 42  # every request counted once, by the server too
    assert second.client_cpu_s > 0  # the children's CPU, which the server's sum leaves out
    assert counted == set()


def test_one_process_is_the_plain_closed_loop() -> None:
    async def test() -> bool:
        async with pool(1) as load:
            return load is closed_loop

    assert _run(test)


def test_a_client_process_that_died_is_a_clear_error() -> None:
    async def test() -> None:
        async with _server([]) as url:
            clients = ClientPool(2)
            await clients.start()
            try:
                clients._children[1].kill()
                await clients._children[1].wait()
                await clients.closed_loop(url, PAYLOADS, 2, 1.0, 2)
            finally:
                await clients.close()

    with pytest.raises(RuntimeError, match=r"a load client process exited \(code -9\)"):
        _run(test)
