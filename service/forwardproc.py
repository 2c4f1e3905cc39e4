"""Forwards in a child process of the model replica, where no other Python thread shares the GIL.

A GPU forward is launch-bound Python: hundreds of small ops, each letting go of the GIL for the
microseconds its launch takes and then waiting to get it back. Beside a busy event loop (Ray's
calls arriving, the batcher), it waits after nearly every op, for up to Python's 5 ms switch
interval: a 12-layer narrow BERT (the CPU stand-in for a GPU forward, `make bench-launch`) took
8-11 ms alone and 1.9-2.5 s beside one busy Python thread. In a child process the forward has an
interpreter to itself; the replica's forward thread sends ids and waits on a socket, letting go
of the GIL once per forward.

The child loads the model through `SentimentModel.load` and answers requests one at a time; the
parent's `ForwardProcess` offers what `ModelCore` uses of a `SentimentModel`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from service.batching import pad_multiple
from service.model import Encoded, ModelLoadError, SentimentModel, dtype_name, encode_texts
from service.retry import fatal_device_error, release_gpu_cache

logger = logging.getLogger("ray.serve")

Rows = Sequence[Sequence[int] | npt.NDArray[np.int32]]


class ForwardProcessError(RuntimeError):
    """The forward process failed a request, or is gone."""


class ForwardProcessCrashed(ForwardProcessError):
    """The forward process died while computing this batch (a new one has started)."""

    reason = "crash"  # service.retry runs the batch's texts one by one, to find the culprit


class ForwardProcess:
    """A `SentimentModel` loaded and run in a child process; one request at a time.

    `load` holds `SentimentModel.load`'s keyword arguments; `threads` sets the child's torch
    intra-op threads. Raises ModelLoadError when the child cannot load the model.

    A child that dies between requests (killed) is replaced at once by a watcher thread, so the
    next request does not wait for a model load (unless it comes during one). A child that
    dies while computing a batch (a fatal error, or an input that kills it) is replaced too,
    and the batch fails with ForwardProcessCrashed instead of being sent again: it may hold
    the input that killed it, and every resend would cost another model load.
    """

    def __init__(self, load: dict[str, Any], threads: int | None = None) -> None:
        self.load_args = {"load": load, "threads": threads, "crash_min_tokens": None}
        self.lock = threading.Lock()  # one request on the wire at a time
        self.restarts = 0
        # The watcher replaces only a child that had loaded the model, so a model that cannot
        # load is retried by the next request, not in a loop; and none once closed.
        self.healthy = False
        self.closing = False
        self._start()
        try:
            info = self._call("load", self.load_args, load_error=True)
        except BaseException:
            self.close()
            raise
        self.healthy = True
        self.labels: list[str] = info["labels"]
        self.name: str = info["name"]
        self.device = torch.device(info["device"])
        self.dtype: torch.dtype = getattr(torch, info["dtype"])
        self.backend_name: str = info["backend"]
        self.backend_reason: str = info["backend_reason"]
        self.records_graphs: bool = info["records_graphs"]
        self.parameters: int = info["parameters"]
        self.max_length: int = info["max_length"]
        from service.encoding import TextEncoder

        self.encoder = TextEncoder.load(Path(load["path"]), self.max_length)

    def encode(self, texts: list[str]) -> list[Encoded]:
        """Tokenize here (the tokenizer needs no GPU): the same ids the child's model sees."""
        return encode_texts(self.encoder, texts)

    def predict(self, batch: Rows) -> torch.Tensor:
        """Probabilities (float32, CPU) for a batch of token-id rows, computed in the child."""
        probs: npt.NDArray[np.float32] = self._call("predict", list(batch))
        return torch.from_numpy(probs)

    @property
    def pad_multiple(self) -> int:
        """What the child's forwards round a width up to (service.batching.pad_multiple)."""
        return pad_multiple(self.backend_name, self.device.type)

    def inject_crash(self, min_tokens: int) -> None:
        """Fault injection (tests and drills): from now on the child, and every child started
        after it, exits on any forward holding a text of at least `min_tokens` tokens."""
        self.load_args["crash_min_tokens"] = min_tokens
        self._call("fault", min_tokens)

    def gpu_memory(self) -> tuple[int, int, int]:
        """The child's allocated, reserved and peak GPU bytes (zeros on the CPU)."""
        if self.device.type != "cuda":
            return (0, 0, 0)
        allocated, reserved, peak = self._call("gpu_memory", None)
        return allocated, reserved, peak

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def close(self, timeout_s: float = 5.0) -> None:
        """Ask the child to exit; kill it if it does not within `timeout_s`."""
        self.closing = True
        with self.lock:
            self._stop(timeout_s)

    def _start(self) -> None:
        mine, theirs = socket.socketpair()
        # The child imports `service` from where this process found it, installed or not.
        root = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "service.forwardproc", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            env={**os.environ, "PYTHONPATH": path},
        )
        theirs.close()
        self.conn = Connection(mine.detach())
        threading.Thread(
            target=self._watch, args=(self.process,), name="forward-process-watch", daemon=True
        ).start()

    def _watch(self, process: subprocess.Popen[bytes]) -> None:
        """Wait for one child to exit; if it was the serving child, start another now."""
        process.wait()
        with self.lock:
            if self.closing or not self.healthy or process is not self.process:
                return  # closed, never loaded, or already replaced by a request
            try:
                self._restart()
            except ForwardProcessError:
                logger.exception(
                    "the forward process could not be replaced; the next request retries"
                )

    def _stop(self, timeout_s: float) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                self.conn.send(("stop", None))
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.conn.close()

    def _restart(self) -> None:
        """A new child in place of a dead one, with the model loaded (the lock is held)."""
        self._stop(0.0)
        logger.error(
            "the forward process exited (code %s); starting another", self.process.returncode
        )
        # Unhealthy until the new child has loaded: `healthy` never speaks for a child that
        # has not loaded yet, whoever reads it meanwhile.
        self.healthy = False
        self.restarts += 1
        self._start()
        try:
            status, value = self._exchange("load", self.load_args)
        except (EOFError, OSError) as exc:
            status, value = "error", f"it exited while loading ({exc})"
        self.healthy = status == "ok"
        if not self.healthy:  # stopped, so the next request tries a new one again
            self._stop(5.0)
            raise ForwardProcessError(f"a new forward process could not load the model: {value}")

    def _call(self, op: str, arg: Any, load_error: bool = False) -> Any:
        with self.lock:
            if not load_error and self.process.poll() is not None:
                self._restart()  # died between requests: not this request's doing
            try:
                status, value = self._exchange(op, arg)
            except (EOFError, OSError) as exc:
                code = self._wait_exit()
                gone = f"the forward process exited (code {code})" if code is not None else exc
                if load_error:
                    raise ModelLoadError(f"forward process: {gone}") from None
                self._restart()
                raise ForwardProcessCrashed(f"{op}: {gone}") from None
        if status == "ok":
            return value
        if load_error:
            raise ModelLoadError(value)
        raise ForwardProcessError(value)

    def _wait_exit(self, timeout_s: float = 1.0) -> int | None:
        """The exit code of a child whose socket just closed (it may take a moment to go)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout_s)
        return self.process.poll()

    def _exchange(self, op: str, arg: Any) -> tuple[str, Any]:
        self.conn.send((op, arg))
        status, value = self.conn.recv()
        return status, value


def _info(model: SentimentModel) -> dict[str, Any]:
    return {
        "labels": model.labels,
        "name": model.name,
        "device": str(model.device),
        "dtype": dtype_name(model.dtype),
        "backend": model.backend_name,
        "backend_reason": model.backend_reason,
        "parameters": model.parameters,
        "max_length": model.max_length,
        "records_graphs": model.records_graphs,
    }


def _exit_with_parent(parent: int) -> None:
    """The child must not outlive the replica, even in a hung forward: watch the parent."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def serve_forwards(conn: Connection) -> None:
    """The child's loop: load the model, then answer requests until `stop` or the parent
    closes the socket."""
    model: SentimentModel | None = None
    crash_min_tokens: int | None = None
    while True:
        try:
            op, arg = conn.recv()
        except EOFError:
            return
        if op == "stop":
            return
        try:
            if op == "load":
                if arg["threads"]:
                    torch.set_num_threads(arg["threads"])
                model = SentimentModel.load(**arg["load"])
                crash_min_tokens = arg["crash_min_tokens"]
                conn.send(("ok", _info(model)))
            elif model is None:
                conn.send(("error", f"{op} before the model loaded"))
            elif op == "predict":
                if crash_min_tokens and max(map(len, arg), default=0) >= crash_min_tokens:
                    os._exit(70)  # injected: dies as a fatal CUDA error or a segfault would
                conn.send(("ok", model.predict(arg).numpy()))
            elif op == "gpu_memory":
                conn.send(("ok", model.gpu_memory()))
            elif op == "fault":
                crash_min_tokens = arg
                conn.send(("ok", None))
            else:
                conn.send(("error", f"unknown request {op!r}"))
        except Exception as exc:  # the parent decides what a failure means; the child serves on
            if fatal_device_error(exc):  # unless its CUDA context is lost: a new child recovers
                logger.error("exiting after a fatal device error: %s", exc)
                os._exit(71)  # no answer: the parent starts another, as after any crash
            release_gpu_cache()  # an out-of-memory's retries need what it held
            message = (
                str(exc) if isinstance(exc, ModelLoadError) else f"{type(exc).__name__}: {exc}"
            )
            conn.send(("error", message))


def main(argv: list[str]) -> int:
    """`python -m service.forwardproc FD`: serve forwards on an inherited socket."""
    logging.basicConfig(level=logging.INFO, format="forward process: %(message)s")
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    conn = Connection(int(argv[1]))
    try:
        serve_forwards(conn)
    finally:
        conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
