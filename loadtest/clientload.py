"""The closed-loop clients of `make chaos`: asyncio ones on aiohttp (the default), or a thread
of Python's blocking `http.client` each (`CHAOS_ARGS="--client http.client"`).

Many backends call services the blocking way (`requests` keeps the same kind of keep-alive
connection); when an ingress replica dies HAProxy leaves some of their requests unanswered
(docs/benchmarks.md, "Retries and balancing do not reach them"). Either kind records every
request, status 0 for one that got no HTTP answer (a connection closed, a timeout), and after
a 429 or 503 waits for its Retry-After, as a well-behaved client does.
"""

from __future__ import annotations

import asyncio
import http.client
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp

from loadtest.outage import Request


@dataclass
class Load:
    """`count` clients POSTing `bodies` to `url` in turn until stopped or until `more()` says
    no; each request lands in `record`."""

    url: str
    bodies: list[bytes]
    count: int
    record: Callable[[Request], None]
    more: Callable[[], bool]
    timeout_s: float = 30.0


class AsyncClients:
    """The load's clients as asyncio tasks sharing one aiohttp session."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.t0 = time.perf_counter()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None

    def start(self, t0: float) -> None:
        """Start every client (in the running loop); times in seconds since `t0`."""
        self.t0 = t0
        timeout = aiohttp.ClientTimeout(total=self.load.timeout_s)
        connector = aiohttp.TCPConnector(limit=self.load.count, limit_per_host=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout)
        self._tasks = [asyncio.create_task(self._run(i)) for i in range(self.load.count)]

    async def stop(self) -> None:
        """Stop every client after its request in flight, and close the session."""
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()

    async def _run(self, first: int) -> None:
        assert self._session is not None
        load, n = self.load, first
        while not self._stop.is_set() and load.more():
            body = load.bodies[n % len(load.bodies)]
            n += load.count
            start = time.perf_counter() - self.t0
            try:
                async with self._session.post(
                    load.url, data=body, headers={"content-type": "application/json"}
                ) as r:
                    await r.read()
                    status, retry = r.status, r.headers.get("retry-after", "")
            except (aiohttp.ClientError, asyncio.TimeoutError):
                status, retry = 0, ""
            load.record(Request(start, time.perf_counter() - self.t0, status))
            if status in (429, 503) and retry.isdigit():
                await asyncio.sleep(int(retry))


class ThreadClients:
    """The load's clients as threads, each on its own blocking keep-alive connection."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.url = urlsplit(load.url)
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(load.count)
        ]

    def start(self, t0: float) -> None:
        """Start every client; times are recorded in seconds since `t0` (perf_counter)."""
        self.t0 = t0
        for thread in self._threads:
            thread.start()

    async def stop(self) -> None:
        """Stop every client after its request in flight."""
        self._stop.set()
        for thread in self._threads:
            await asyncio.to_thread(thread.join)

    def _run(self, first: int) -> None:
        conn: http.client.HTTPConnection | None = None
        load, n = self.load, first
        while not self._stop.is_set() and load.more():
            body = load.bodies[n % len(load.bodies)]
            n += load.count
            start = time.perf_counter() - self.t0
            retry = ""
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(
                        self.url.hostname or "127.0.0.1", self.url.port, timeout=load.timeout_s
                    )
                conn.request("POST", self.url.path, body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                status, retry = response.status, response.getheader("Retry-After") or ""
            except (OSError, http.client.HTTPException):
                status = 0
                if conn is not None:
                    conn.close()
                conn = None
            load.record(Request(start, time.perf_counter() - self.t0, status))
            if status in (429, 503) and retry.isdigit():
                self._stop.wait(int(retry))
        if conn is not None:
            conn.close()
