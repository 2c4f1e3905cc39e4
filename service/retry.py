"""A failing forward fails only what it must.

A forward that raises (a CUDA out-of-memory on a long batch, a kernel error on one odd input)
is split in halves and each half retried, down to single texts; only a text that fails alone
is marked FAILED, and its request alone gets a 500. After an out-of-memory the CUDA cache is
released, so the smaller retries find the memory the failed forward held. A forward that
killed its forward process (reason `crash`) is retried text by text at once: halving would
kill a process, and pay a model load, at every level on the way down to the culprit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import torch

from service.encoding import EXPIRED, FAILED, OK, Scored

logger = logging.getLogger("ray.serve")

Probs = npt.NDArray[np.float32]
Rows = list[npt.NDArray[np.int32]]
Forward = Callable[[Rows], tuple[Probs, float]]  # rows -> (probabilities, seconds)
Computed = tuple[Probs, npt.NDArray[np.uint8], float]  # one forward: probs, status, seconds


def failure_reason(exc: BaseException) -> str:
    """A short, bounded label for a forward failure: `oom`, `crash` or `error`."""
    if getattr(exc, "reason", None) == "crash":  # service.forwardproc.ForwardProcessCrashed
        return "crash"
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return "oom"
    text = str(exc)
    if "out of memory" in text or "can't allocate memory" in text:  # CPU allocator, MPS
        return "oom"
    return "error"


def fatal_device_error(exc: BaseException) -> bool:
    """An error after which the process's CUDA context serves only errors (an illegal memory
    access, a device-side assert): only a new process recovers. Out-of-memory is not one."""
    if failure_reason(exc) == "oom":
        return False
    text = str(exc)  # ONNX Runtime's CUDA provider reports "CUDA failure <code>: ..."
    accelerator = getattr(torch, "AcceleratorError", ())  # torch 2.8+; older: the text alone
    return isinstance(exc, accelerator) or "CUDA error" in text or "CUDA failure" in text


def release_gpu_cache() -> None:
    """Give cached blocks back to the driver, so the retries (and other processes) can use
    the memory the failed forward held."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # a no-op until CUDA is initialised


class SplittingForward:
    """Runs `forward` on rows; on an exception, halves and retries down to single rows.

    Returns probabilities, a status per row (OK or FAILED) and the seconds of the forwards
    that succeeded. `on_failure(reason)` is called once per failed attempt.
    """

    def __init__(self, forward: Forward, labels: int, on_failure: Callable[[str], None]) -> None:
        self.forward = forward
        self.labels = labels
        self.on_failure = on_failure

    def __call__(self, rows: Rows) -> Computed:
        probs = np.zeros((len(rows), self.labels), dtype=np.float32)
        status = np.full(len(rows), OK, dtype=np.uint8)
        seconds = self._run(rows, 0, probs, status)
        return probs, status, seconds

    def _run(self, rows: Rows, start: int, probs: Probs, status: npt.NDArray[np.uint8]) -> float:
        try:
            out, seconds = self.forward(rows)
        except Exception as exc:
            reason = failure_reason(exc)
            self.on_failure(reason)
            if reason == "oom":
                release_gpu_cache()
            if len(rows) == 1:
                logger.warning("a forward of one text failed (%s)", reason, exc_info=exc)
                status[start] = FAILED
                return 0.0
            if reason == "crash":
                return sum(
                    self._run(rows[i : i + 1], start + i, probs, status) for i in range(len(rows))
                )
            half = len(rows) // 2
            return self._run(rows[:half], start, probs, status) + self._run(
                rows[half:], start + half, probs, status
            )
        probs[start : start + len(rows)] = out
        return seconds


def expired_scores(texts: int, labels: int) -> Scored:
    """The answer of a call whose every text expired before its batch."""
    return np.zeros((texts, labels), dtype=np.float32), np.full(texts, EXPIRED, dtype=np.uint8)
