"""The bench's bare-protocol HTTP client against real loopback servers that answer each way
HTTP allows a POST answer to be framed, or fail to answer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable

import pytest

from loadtest import httpload
from loadtest.ports import free_port
from loadtest.rawhttp import Poster

Reply = Callable[[int], bytes | None]  # the n-th request's raw answer; None: close instead


def _answer(status: int, body: bytes, *headers: str) -> bytes:
    head = "".join(f"{h}\r\n" for h in headers)
    return b"HTTP/1.1 %d X\r\n%sContent-Length:  %d\r\n\r\n%s" % (
        status, head.encode(), len(body), body,
    )  # fmt: skip


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    await reader.readexactly(int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0]))


async def _serving(reply: Reply, run: Callable[[str, list[int]], Awaitable[None]]) -> list[int]:
    """Serve on a free loopback port, answering the n-th request (over all connections) with
    `reply(n)`, while `run(url, connections)` runs; returns the requests seen per connection."""
    connections: list[int] = []
    seen = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal seen
        index = len(connections)
        connections.append(0)
        try:
            while True:
                await _read_request(reader)
                connections[index] += 1
                seen += 1
                answer = reply(seen)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    port = free_port()
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await run(f"http://127.0.0.1:{port}/v1/classify", connections)
    return connections


def _posts(
    count: int, statuses: list[int], timeout_s: float = 5.0
) -> Callable[..., Awaitable[None]]:
    async def run(url: str, _connections: list[int]) -> None:
        poster = Poster(url, timeout_s)
        try:
            for _ in range(count):
                statuses.append(await poster.post(b'{"text": "fine"}'))
        finally:
            poster.close()

    return run


def test_content_length_answers_reuse_one_connection() -> None:
    statuses: list[int] = []
    reply = lambda n: _answer(200 if n < 3 else 429, b'{"ok": %d}' % n)  # noqa: E731
    connections = asyncio.run(_serving(reply, _posts(3, statuses)))
    assert statuses == [200, 200, 429] and connections == [3]


def test_chunked_answer_is_read_whole_and_the_connection_kept() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding:chunked\r\n\r\n"  # any case, no space
        b'4\r\n{"a"\r\n3;x=1\r\n:1}\r\n0\r\n\r\n'  # two chunks, one with an extension
    )
    statuses: list[int] = []
    connections = asyncio.run(_serving(lambda n: chunked, _posts(3, statuses)))
    assert statuses == [200, 200, 200] and connections == [3]


def test_connection_close_answer_opens_a_new_connection() -> None:
    statuses: list[int] = []
    reply = lambda n: _answer(503, b"busy", "Connection: close")  # noqa: E731
    connections = asyncio.run(_serving(reply, _posts(2, statuses)))
    assert statuses == [503, 503] and connections == [1, 1]


def test_a_server_closing_an_idle_connection_costs_no_request() -> None:
    """Each connection is closed 0.1 s after its answer, as a server's keep-alive timeout
    does; a request sent later goes on a new connection instead of failing."""

    async def run() -> list[int]:
        port, connections = free_port(), []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            connections.append(1)
            head = await reader.readuntil(b"\r\n\r\n")
            await reader.readexactly(
                int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            )
            writer.write(_answer(200, b"{}"))
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.close()

        async with await asyncio.start_server(handle, "127.0.0.1", port):
            poster = Poster(f"http://127.0.0.1:{port}/", 5.0)
            assert await poster.post(b"{}") == 200
            await asyncio.sleep(0.3)
            assert await poster.post(b"{}") == 200
            poster.close()
        return connections

    assert asyncio.run(run()) == [1, 1]


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (lambda n: None, ConnectionError),  # closed without an answer
        (lambda n: b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}", asyncio.TimeoutError),
        (lambda n: b"HTTP/1.1 200 OK\r\nx: y\r\n\r\n{}", ValueError),  # no framing
    ],
    ids=["closed", "short-body", "unframed"],
)
def test_no_whole_answer_raises(reply: Reply, error: type[Exception]) -> None:
    statuses: list[int] = []
    with pytest.raises(error):
        asyncio.run(_serving(reply, _posts(1, statuses, timeout_s=0.3)))


def test_closed_loop_counts_unanswered_requests_as_status_0() -> None:
    payloads = httpload.bodies(["fine", "good"], 1)
    url = f"http://127.0.0.1:{free_port()}/v1/classify"  # nothing listens
    result = asyncio.run(httpload.closed_loop(url, payloads, 4, 5.0, 8))
    assert result.requests == 0 and result.statuses == {0: 8} and result.errors == 8


def test_closed_loop_counts_every_answer_once() -> None:
    reply = lambda n: _answer(200 if n % 3 else 429, b'{"results": []}')  # noqa: E731
    payloads = httpload.bodies(["fine", "good", "bad"], 1)
    results: list[httpload.RunResult] = []

    async def run(url: str, _connections: list[int]) -> None:
        results.append(await httpload.closed_loop(url, payloads, 4, 5.0, 30))

    connections = asyncio.run(_serving(reply, run))
    [result] = results
    assert result.statuses == {200: 20, 429: 10} and result.texts == 20
    assert len(result.latencies) == 20 and len(connections) <= 4 and sum(connections) == 30


def test_a_connect_never_accepted_times_out() -> None:
    """A listener whose accept queue is full drops new SYNs: the connect hangs, and the
    request's timeout bounds it as it bounds the answer."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = [socket.socket() for _ in range(3)]
        for filler in fillers:
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))

        async def post() -> int:
            poster = Poster(f"http://127.0.0.1:{port}/", 0.5)
            return await poster.post(b"{}")

        try:
            with pytest.raises(asyncio.TimeoutError):
                asyncio.run(post())
        finally:
            for filler in fillers:
                filler.close()
