"""Where a model replica's forwards run: a thread of its own, a forward process, or, for a
forward that costs less than handing it over, the event loop itself."""

from __future__ import annotations

from typing import Any

from service.forwardproc import ForwardProcess
from service.model import SentimentModel, resolve_device
from service.settings import Settings


def inline_limit_s(settings: Settings, model: SentimentModel | ForwardProcess) -> float:
    """The longest predicted forward that runs on the event loop: none in a forward process
    (its round trip blocks), nor with a fault injected (a hang must stall the forward
    thread, which the watchdog sees, not the loop that runs the health check)."""
    s = settings
    faults = (s.fault_forward_min_texts, s.fault_hang_min_tokens, s.fault_slow_forward_s)
    if isinstance(model, ForwardProcess) or any(f is not None for f in faults):
        return 0.0
    return s.inline_forward_ms / 1e3


def forwards_in_process(settings: Settings) -> bool:
    """`auto`: a child process on a GPU, a thread on the CPU (see service.forwardproc)."""
    if settings.forward_in != "auto":
        return settings.forward_in == "process"
    return resolve_device(settings.device).type == "cuda"


def load_model(settings: Settings) -> SentimentModel | ForwardProcess:
    """The model, here or in a forward process, as `settings.forward_in` says."""
    s = settings
    load: dict[str, Any] = {
        "path": s.model_path,
        "device": s.device,
        "dtype": s.dtype,
        "max_length": s.max_seq_len,
        "name": s.model_name,
        "allow_pickle": s.allow_pickle,
        "backend": s.backend,
        "torch_compile": s.torch_compile,
        "max_rows": max(1, s.batch.micro_batch_tokens // 8),
    }
    if forwards_in_process(s):
        return ForwardProcess(load, s.torch_threads)
    return SentimentModel.load(**load)
