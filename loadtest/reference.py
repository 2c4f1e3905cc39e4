"""The Rust-fronted reference: the overhead run's tiny model behind mosec, in the same run.

The request-cost targets ask the service's rate to come within 0.8x of a Rust-fronted
server's with the same tiny model: mosec (a Rust HTTP front with dynamic batching, Python
workers over IPC), once measured by hand at ~1,980 single-text requests/s and 0.7 ms of server
CPU each on a 2-core machine. Measured once, that ratio drifts with the machine; here it is
measured beside the service: the same model directory, tokenizer path, planned forwards and ONNX
Runtime backend, one worker process (one forward at a time, as the tiny model's service
replica computes), the same bodies and clients. Only the serving stack differs.

`python -m loadtest.reference` runs the server (mosec reads its own MOSEC_* settings and
command line); `serve` starts it as a child for a measurement. mosec is a dev dependency: when
it is not installed the bench says so and skips this part.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from loadtest.ports import free_port
from loadtest.serving import sigterm_unwinds

MODEL_ENV = "LOADTEST_REFERENCE_MODEL"
BACKEND_ENV = "LOADTEST_REFERENCE_BACKEND"
MAX_BATCH_ENV = "LOADTEST_REFERENCE_MAX_BATCH"  # mosec's batching, for trying others
WAIT_ENV = "LOADTEST_REFERENCE_WAIT_MS"
MAX_BATCH = 64  # the overhead target's client count: a full batch is every client's text
WAIT_MS = 10  # mosec's default batching wait; 1 ms read no more at 64 clients


@dataclass(frozen=True)
class Running:
    """A reference server `serve` started: where to send requests, and its process id (and
    process group: it runs in a session of its own)."""

    url: str
    pid: int


def available() -> bool:
    """Whether mosec is installed here."""
    return find_spec("mosec") is not None


def batching() -> tuple[int, int]:
    """Its largest batch and longest batching wait (ms): the defaults, or the environment's."""
    return int(os.environ.get(MAX_BATCH_ENV, MAX_BATCH)), int(os.environ.get(WAIT_ENV, WAIT_MS))


def describe() -> dict[str, Any]:
    """What the reference is, for the results document."""
    batch, wait_ms = batching()
    return {"server": f"mosec {version('mosec')}", "max_batch": batch, "wait_ms": wait_ms}


Levels = list[dict[str, Any]]


def measure(
    model_dir: Path, backend: str, load: Callable[[str], Coroutine[Any, Any, Levels]]
) -> Levels | None:
    """`load(url)` run against the reference serving `model_dir`; None, and a line saying
    why, where mosec is not installed."""
    if not available():
        print("overhead: mosec is not installed (a dev dependency): no reference", flush=True)
        return None
    with serve(model_dir, free_port(), backend) as running:
        return asyncio.run(load(running.url))


def main() -> None:
    """Run the reference server until SIGTERM or SIGINT."""
    from mosec import Server

    from loadtest.mosecworker import TinyClassifier

    batch, wait_ms = batching()
    server = Server()  # type: ignore[no-untyped-call]
    # Forked, not spawned: the worker then carries this module's command line, which is how
    # /proc accounting names it (loadtest.cpu); it loads its model after the fork.
    server.append_worker(
        TinyClassifier, num=1, max_batch_size=batch, max_wait_time=wait_ms, start_method="fork"
    )
    server.run()  # type: ignore[no-untyped-call]


@contextmanager
def serve(model_dir: Path, port: int, backend: str, ready_s: float = 120.0) -> Iterator[Running]:
    """The reference server on 127.0.0.1:`port` as a child of this process (so /proc counts
    it as the server: loadtest.cpu), once ready; ends it and its workers after."""
    env = {
        **os.environ,
        MODEL_ENV: str(model_dir.resolve()),
        BACKEND_ENV: backend,
        "MOSEC_ADDRESS": "127.0.0.1",
        "MOSEC_PORT": str(port),
        "MOSEC_LOG_LEVEL": "warning",
    }
    # Its own session: a terminal's Ctrl-C reaches this process, whose `finally` ends it in
    # order; SIGTERM unwinds here too (in its own session it would outlive this process).
    with sigterm_unwinds():
        child = subprocess.Popen(
            [sys.executable, "-m", "loadtest.reference"], env=env, start_new_session=True
        )
        try:
            _wait_ready(f"http://127.0.0.1:{port}/", child, ready_s)
            yield Running(f"http://127.0.0.1:{port}/inference", child.pid)
        finally:
            _end(child)


def _wait_ready(url: str, child: subprocess.Popen[bytes], ready_s: float) -> None:
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RuntimeError(f"the mosec reference server exited with {child.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"the mosec reference server was not ready within {ready_s:.0f} s")


def _end(child: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    """SIGTERM to the server (mosec then stops its HTTP front and workers), then SIGKILL to
    whatever is left of its process group."""
    if child.poll() is None:
        child.terminate()
        with suppress(subprocess.TimeoutExpired):
            child.wait(grace_s)
    with suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)  # workers that outlived their parent
    child.wait()


if __name__ == "__main__":
    main()
