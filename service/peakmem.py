"""Peak memory of a block of work, per process: what the serving and training probes record.

- GPU: the torch allocator's peak (`torch.cuda.max_memory_allocated`, reset before the block);
  the reserved peak is kept too. The CUDA context is outside both.
- CPU: the resident set. The kernel keeps a high-water mark (VmHWM in /proc/self/status) and
  lets a process reset it (writing 5 to /proc/self/clear_refs), so the peak is exact, not
  sampled. Freed heap is handed back first (`malloc_trim`), so what a bigger earlier block left
  in the allocator does not raise the baseline. `resource.getrusage` would not do: its peak
  never comes down. Where the reset is not allowed, a thread samples VmRSS every 2 ms instead
  (it can miss a short spike).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _status_kib(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(f"no {key} in /proc/self/status")


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def trim_heap() -> None:
    """Collect garbage and give the C heap's free memory back to the OS (glibc)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to hand back
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def memory_method(device: torch.device) -> str:
    """How peaks are measured on this device, for the report."""
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated, reset before each point"
    if _reset_hwm():
        return "resident set high-water mark (VmHWM), reset before each point"
    return "resident set (VmRSS) sampled every 2 ms"


@contextmanager
def peak_memory(device: torch.device) -> Iterator[dict[str, int]]:
    """Yields a dict that holds `base`, `peak` (and `reserved` on GPU) when the block ends."""
    out: dict[str, int] = {}
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        out["base"] = torch.cuda.memory_allocated(device)
        try:
            yield out
        finally:
            torch.cuda.synchronize(device)
            out["peak"] = torch.cuda.max_memory_allocated(device)
            out["reserved"] = torch.cuda.max_memory_reserved(device)
        return
    trim_heap()
    out["base"] = _status_kib("VmRSS")
    if _reset_hwm():
        try:
            yield out
        finally:
            out["peak"] = _status_kib("VmHWM")
        return
    done = threading.Event()
    peak = out["base"]

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.002):
            peak = max(peak, _status_kib("VmRSS"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield out
    finally:
        done.set()
        sampler.join()
        out["peak"] = max(peak, _status_kib("VmRSS"))
