"""Load from several client processes, for rates one asyncio process cannot drive.

One closed-loop client (loadtest.httpload) costs about 0.06 ms of CPU a request on the 2-core
machines: half a core at the 8,000 single-text requests/s a GPU replica should answer, and
one process is one core at the most, its event loop's delays growing well before that. A
`ClientPool` keeps N child processes (`python -m loadtest.clients`), splits each run's
clients and request cap among them, starts them together and merges what they measured.
The children run this module, which `loadtest.cpu` leaves out of the server's CPU;
their own CPU comes back in `RunResult.client_cpu_s`.

Protocol, one JSON object a line: the child says `{"ready": true}` once it has imported
everything, then answers each run command on stdin with its RunResult; EOF ends it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadtest.cpu import LOAD_CLIENT as MODULE
from loadtest.httpload import RunResult, closed_loop

LINE_LIMIT = 1 << 26  # a result line carries every latency of the child's run
ClosedLoop = Callable[[str, list[tuple[bytes, int]], int, float, int], Awaitable[RunResult]]


def default_processes(cores: int | None = None) -> int:
    """One client process per four cores, at most four; one below eight cores, where a second
    client process would only take a core from the server it measures."""
    cores = cores or os.cpu_count() or 1
    return 1 if cores < 8 else min(4, cores // 4)


def shares(total: int, parts: int) -> list[int]:
    """`total` split into at most `parts` near-equal positive shares."""
    parts = max(1, min(parts, total))
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def merge(results: list[RunResult]) -> RunResult:
    """One run's figures from its client processes': they ran side by side, so the window is
    the longest of theirs, and every count and CPU second adds up."""
    merged = RunResult(seconds=max((r.seconds for r in results), default=0.0))
    for r in results:
        merged.requests += r.requests
        merged.texts += r.texts
        merged.errors += r.errors
        merged.latencies.extend(r.latencies)
        merged.client_cpu_s += r.client_cpu_s
        for status, count in r.statuses.items():
            merged.statuses[status] = merged.statuses.get(status, 0) + count
        for status, latencies in r.refused.items():
            merged.refused.setdefault(status, []).extend(latencies)
    return merged


def _result(data: dict[str, Any]) -> RunResult:
    data["statuses"] = {int(k): v for k, v in data["statuses"].items()}
    data["refused"] = {int(k): v for k, v in data["refused"].items()}
    return RunResult(**data)


class ClientPool:
    """`processes` load-generator child processes; `closed_loop` is httpload's, spread over
    them. Use as an async context manager (`pool`)."""

    def __init__(self, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"client processes must be at least 1, got {processes}")
        self.processes = processes
        self._children: list[asyncio.subprocess.Process] = []
        self._holds: list[object] = []  # the payloads each child was last sent (sent once)

    async def start(self) -> None:
        """Start the children and wait until each has said it is ready."""
        # The children import `loadtest` from where this process found it, installed or not.
        root = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        for _ in range(self.processes):
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                MODULE,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                env=env,
                limit=LINE_LIMIT,
            )
            self._children.append(child)
            self._holds.append(None)
        for child in self._children:
            await self._read(child)

    async def close(self) -> None:
        """End the children (EOF on their stdin); kill any that does not go within 5 s."""
        for child in self._children:
            if child.stdin is not None and not child.stdin.is_closing():
                child.stdin.close()
        for child in self._children:
            try:
                await asyncio.wait_for(child.wait(), 5.0)
            except asyncio.TimeoutError:
                child.kill()
                await child.wait()
        self._children, self._holds = [], []

    async def closed_loop(
        self,
        url: str,
        payloads: list[tuple[bytes, int]],
        concurrency: int,
        duration_s: float,
        max_requests: int,
        timeout_s: float = 30.0,
    ) -> RunResult:
        """httpload.closed_loop with its clients and request cap shared among the children,
        each starting at its own place in `payloads`."""
        if not self._children:
            raise RuntimeError("the client pool is not started")
        clients = shares(concurrency, len(self._children))
        caps = shares(max(max_requests, len(clients)), len(clients))
        children = self._children[: len(clients)]
        wire: list[tuple[str, int]] | None = None  # the bodies as JSON carries them, made once
        for i, (child, c, cap) in enumerate(zip(children, clients, caps, strict=True)):
            command: dict[str, Any] = {
                "url": url,
                "concurrency": c,
                "duration_s": duration_s,
                "max_requests": cap,
                "timeout_s": timeout_s,
                "offset": i * len(payloads) // len(clients),
            }
            if self._holds[i] is not payloads:  # bodies cross the pipe once, not every run
                if wire is None:
                    wire = [(body.decode("latin-1"), n) for body, n in payloads]
                command["payloads"] = wire
                self._holds[i] = payloads
            await self._write(child, command)
        return merge([_result(await self._read(child)) for child in children])

    async def _write(self, child: asyncio.subprocess.Process, command: dict[str, Any]) -> None:
        assert child.stdin is not None
        try:
            child.stdin.write(json.dumps(command).encode() + b"\n")
            await child.stdin.drain()
        except ConnectionError:
            raise await self._gone(child) from None

    async def _read(self, child: asyncio.subprocess.Process) -> dict[str, Any]:
        assert child.stdout is not None
        line = await child.stdout.readline()
        if not line:
            raise await self._gone(child)
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def _gone(self, child: asyncio.subprocess.Process) -> RuntimeError:
        code = await child.wait()
        return RuntimeError(f"a load client process exited (code {code}); see its stderr")


@asynccontextmanager
async def pool(processes: int) -> AsyncIterator[ClosedLoop]:
    """The closed loop to load with: httpload's own in this process for one, else a started
    ClientPool's, closed on the way out."""
    if processes <= 1:
        yield closed_loop
        return
    clients = ClientPool(processes)
    try:
        await clients.start()
        yield clients.closed_loop
    finally:
        await clients.close()


def serve(stdin: Any = sys.stdin, stdout: Any = sys.stdout) -> None:
    """The child: run each command's closed loop, answer its RunResult, until EOF."""
    payloads: list[tuple[bytes, int]] = []
    print(json.dumps({"ready": True}), file=stdout, flush=True)
    for line in stdin:
        command = json.loads(line)
        if "payloads" in command:
            payloads = [(body.encode("latin-1"), n) for body, n in command["payloads"]]
        start = command["offset"] % max(1, len(payloads))
        mine = payloads[start:] + payloads[:start]
        args = (command["url"], mine, command["concurrency"], command["duration_s"])
        result = asyncio.run(closed_loop(*args, command["max_requests"], command["timeout_s"]))
        print(json.dumps(asdict(result)), file=stdout, flush=True)


if __name__ == "__main__":
    serve()
