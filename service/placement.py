"""Where a model replica's forwards run: a thread of its own, a forward process, or, for a
forward that costs less than handing it over, the event loop itself."""

from __future__ import annotations

from typing import Any

from service.backends import BackendError, resolve_backend
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


ORT_BACKENDS = ("onnx", "onnx-int8")  # where parallel forwards were measured to pay


def parallel_forwards(settings: Settings, threads: int) -> int:
    """Forwards computed at once by a replica with `threads` intra-op threads in all.

    On a CPU, one forward at a time on every core leaves the cores idle while the next batch
    forms, and costs more CPU per text than one-thread forwards do. Two forwards at once, each
    on half the threads, kept them busy: in-process, on 2 cores with the default model through
    onnx-int8, 32 texts known at a time went from 0.73-0.79 of the best all-sorted figure to
    0.85-0.94 (docs/benchmarks-history.md). Auto uses it for ONNX Runtime backends on a CPU; torch
    (one intra-op pool per process) is unmeasured. A GPU computes one forward at a time anyway,
    and a forward process serves one call at a time.
    """
    s = settings
    device = resolve_device(s.device)
    on_cpu = device.type == "cpu" and not forwards_in_process(s)
    if s.parallel_forwards is None:
        try:
            backend = resolve_backend(s.backend, s.model_path, device)[0] if on_cpu else ""
        except BackendError:  # loading the model says why, more clearly
            return 1
        return 2 if on_cpu and threads >= 2 and backend in ORT_BACKENDS else 1
    if s.parallel_forwards > 1 and not on_cpu:
        raise ValueError(
            f"parallel_forwards={s.parallel_forwards} needs forwards in a thread on the CPU "
            "(device=cpu, forward_in=thread); a GPU or a forward process computes one at a time"
        )
    return s.parallel_forwards


def intra_op_threads(settings: Settings, default: int) -> int:
    """The model replica's CPU intra-op threads: `torch_threads` (else `default`) on the CPU,
    one on a GPU. A GPU forward's CPU work is one thread launching kernels and copying results;
    a pool as wide as the machine there has no work to share and competes with the ingress
    replicas for the cores (the H200 runs saw 3.5-7.4 cores busy in the forward process, more
    than its one launching thread can use; docs/benchmarks-history.md)."""
    if resolve_device(settings.device).type == "cuda":
        return 1
    return settings.torch_threads or default


def load_model(settings: Settings, threads: int | None = None) -> SentimentModel | ForwardProcess:
    """The model, here or in a forward process, as `settings.forward_in` says; here, an ONNX
    Runtime backend's sessions get `threads` intra-op threads (default: torch's count), there
    the child's torch does (default: `torch_threads`)."""
    s = settings
    in_child = forwards_in_process(s)
    load: dict[str, Any] = {
        "path": s.model_path,
        "device": s.device,
        "dtype": s.dtype,
        "max_length": s.max_seq_len,
        "name": s.model_name,
        "allow_pickle": s.allow_pickle,
        "backend": s.backend,
        "torch_compile": s.torch_compile,
        # A forward process runs the warm-up and every forward on its one thread; a replica
        # does not, and torch keeps CUDA graphs per thread (backends.compile_mode).
        "one_thread": in_child,
        "max_rows": max(1, s.batch.micro_batch_tokens // 8),
    }
    if in_child:
        return ForwardProcess(load, threads or s.torch_threads)
    return SentimentModel.load(**load, threads=threads)
