"""Keep-alive HTTP/1.1 POSTs on bare asyncio protocols, for the bench's load generator.

The load generator shares the machine's cores with the server it measures, so what it spends
a request is taken from the server's figures. aiohttp's client spent 0.21-0.29 ms of CPU a
request on the 2-core machines; this one writes a request prepared once per body and parses
only the status line and the framing of the answer, which is all a benchmark reads.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit


class Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; answers framed by Content-Length or
    chunked transfer encoding (what uvicorn, HAProxy and hyper send)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._answer: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(ConnectionError("connection closed before the answer"))

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._answer is None or self._answer.done():
            return
        try:
            status = self._parse()
        except ValueError as exc:  # not HTTP as a benchmark can read it: that request failed
            self.closed = True
            self._answer.set_exception(exc)
            return
        if status is not None:
            self._answer.set_result(status)

    def send(self, request: bytes) -> asyncio.Future[int]:
        """Write `request`; the future gets the answer's status once the whole body is in."""
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return self._answer

    def _parse(self) -> int | None:
        """The status of a complete answer at the buffer's start (consumed), or None."""
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            return None
        head = bytes(self._buf[:end]).lower()
        status = int(head[9:12])
        length = _header(head, b"content-length")
        if length:
            total = end + 4 + int(length)
        elif b"chunked" in _header(head, b"transfer-encoding"):
            total = self._chunked_end(end + 4)
            if total < 0:
                return None
        else:
            raise ValueError(f"answer without Content-Length or chunked framing: {head[:200]!r}")
        if len(self._buf) < total:
            return None
        if b"close" in _header(head, b"connection"):
            self.closed = True
        del self._buf[:total]
        return status

    def _chunked_end(self, at: int) -> int:
        """Where a chunked body starting at `at` ends, or -1 while it is not all in."""
        while True:
            line_end = self._buf.find(b"\r\n", at)
            if line_end < 0:
                return -1
            size = int(bytes(self._buf[at:line_end]).split(b";")[0], 16)
            at = line_end + 2 + size + 2
            if size == 0:
                return at if len(self._buf) >= at else -1


class Poster:
    """POSTs JSON bodies to one URL over keep-alive connections, opened as needed and reused."""

    def __init__(self, url: str, timeout_s: float) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout_s = timeout_s
        path = parts.path or "/"
        self._head = (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "Content-Type: application/json\r\nContent-Length: "
        ).encode()
        self._idle: list[Connection] = []
        self._requests: dict[bytes, bytes] = {}

    async def post(self, body: bytes) -> int:
        """The answer's status; raises OSError or asyncio.TimeoutError when there is none, and
        ValueError for an answer it cannot frame. Connecting counts toward the timeout."""
        request = self._requests.get(body)
        if request is None:
            request = self._head + b"%d\r\n\r\n" % len(body) + body
            self._requests[body] = request
        loop = asyncio.get_running_loop()
        start = loop.time()
        connection = self._idle_connection()
        if connection is None:  # a connect the server never accepts must not hang a worker
            connection = await asyncio.wait_for(self._open(), self.timeout_s)
        answer = connection.send(request)
        timer = loop.call_at(start + self.timeout_s, _time_out, answer)
        try:
            status = await answer
        except BaseException:
            self._drop(connection)
            raise
        finally:
            timer.cancel()
        if connection.closed:
            self._drop(connection)
        else:
            self._idle.append(connection)
        return status

    def _idle_connection(self) -> Connection | None:
        """An idle connection the server has not closed (it may close one kept idle too long)."""
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection
        return None

    async def _open(self) -> Connection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(Connection, self.host, self.port)
        return connection

    def _drop(self, connection: Connection) -> None:
        if connection.transport is not None:
            connection.transport.close()

    def close(self) -> None:
        """Close every idle connection."""
        for connection in self._idle:
            self._drop(connection)
        self._idle.clear()


def _time_out(answer: asyncio.Future[int]) -> None:
    if not answer.done():
        answer.set_exception(asyncio.TimeoutError())


def _header(head: bytes, name: bytes) -> bytes:
    """The value of header `name` in a lower-cased answer head (empty when absent)."""
    at = head.find(b"\r\n" + name + b":")
    if at < 0:
        return b""
    start = at + len(name) + 3
    stop = head.find(b"\r\n", start)
    return head[start : stop if stop >= 0 else len(head)].strip()
