"""What runs a forward: PyTorch eager, or ONNX Runtime on an exported graph.

Each backend takes one right-padded batch (int64 token ids and attention mask, rows x width)
and returns float32 logits on the CPU. `SentimentModel` owns padding, softmax and the checks,
so every backend answers the replica, the probe and the bench the same way.

  torch      the Hugging Face model in PyTorch (FP16 on a GPU, FP32 on the CPU)
  onnx       ONNX Runtime on `onnx/model-opt.onnx` (FP32): CPU provider, CUDA provider on GPU
  onnx-int8  ONNX Runtime on `onnx/model-int8.onnx` (dynamic INT8 weights), CPU; a text whose
             INT8 answer is too close to call is recomputed on the FP32 graph
  tensorrt   ONNX Runtime's TensorRT provider on `onnx/model.onnx`, FP16 engines cached in
             `onnx/trt-cache/` (needs onnxruntime-gpu built with TensorRT, and a GPU)
  auto       what `make parity` measured fastest on this device type, else torch
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch

from service.artifacts import ExportMismatch, checked_export, fastest_backend
from service.batching import pad_multiple, plan_micro_batches, round_up
from service.int8 import unsafe_here as int8_unsafe_here
from service.ortproviders import missing_provider, providers_for, trt_profile
from service.settings import COMPILE_MODES

BACKENDS = ("torch", "onnx", "onnx-int8", "tensorrt")
Ids = npt.NDArray[np.int64]


class BackendError(RuntimeError):
    """A backend cannot run here: its runtime, provider or export is missing."""


class Backend(Protocol):
    """One forward on a padded batch."""

    name: str

    def logits(self, input_ids: Ids, mask: Ids) -> torch.Tensor:
        """Float32 logits on the CPU, one row per input row."""
        ...


def row_bucket(rows: int) -> int:
    """The row count a forward is padded to under CUDA graphs: a power of two or one and a
    half times one (1, 2, 3, 4, 6, 8, 12, 16, ...). Each shape records a graph of its own; these
    counts keep it to two per doubling of rows at each width, for fewer than half again as many
    rows (which a launch-bound GPU forward computes at almost no cost)."""
    if rows <= 2:
        return max(rows, 1)
    power = 1 << (rows - 1).bit_length()
    between = power // 2 * 3 // 2
    return between if rows <= between else power


def compile_mode(setting: str, backend: str, device: torch.device, one_thread: bool = True) -> str:
    """The torch.compile mode a setting means for `backend` on `device`: `auto` is CUDA
    graphs for torch on a GPU, where an eager forward is Python launching kernels (on an
    H200, 64 single-text clients: 309 texts/s eager, 3,181 with graphs; docs/benchmarks.md),
    and off elsewhere (on a CPU compiling takes minutes and the forward is compute-bound).
    torch keeps CUDA graphs per thread, so auto records none unless the warm-up and every
    forward run on `one_thread` (a forward process: service.placement)."""
    if setting != "auto":
        return setting
    graphs = backend == "torch" and device.type == "cuda" and one_thread
    return "reduce-overhead" if graphs else "off"


class TorchBackend:
    """The Hugging Face module in PyTorch, on its device and dtype; `compile` is a
    torch.compile mode (COMPILE_MODES), with dynamic shapes so a new width is no recompile."""

    name = "torch"

    def __init__(self, module: torch.nn.Module, device: torch.device, compile: str = "off") -> None:
        modes = [m for m in COMPILE_MODES if m != "auto"]  # compile_mode resolves auto
        if compile not in modes:
            raise BackendError(f"unknown torch.compile mode {compile!r}; use one of {modes}")
        self.module = module
        self.device = device
        self.forward: Any = module
        if compile != "off":
            self.forward = torch.compile(module, dynamic=True, mode=compile)
        # reduce-overhead records a CUDA graph per input shape and replays it: one launch
        # instead of hundreds from Python (one text 6.3 -> 1.4 ms on an H200, docs/benchmarks.md).
        self.graphs = compile == "reduce-overhead"
        if self.graphs:
            from torch._inductor import config as inductor

            # Hundreds of bucketed shapes are recorded on purpose; the warning comes at nine.
            if hasattr(inductor.triton, "cudagraph_dynamic_shape_warn_limit"):
                inductor.triton.cudagraph_dynamic_shape_warn_limit = None

    @torch.inference_mode()
    def logits(self, input_ids: Ids, mask: Ids) -> torch.Tensor:
        """Forward on the model's device; logits come back as float32 on the CPU."""
        rows = len(input_ids)
        if self.graphs:
            extra = row_bucket(rows) - rows  # copies of the first row: finite, then dropped
            input_ids = np.concatenate([input_ids, np.repeat(input_ids[:1], extra, axis=0)])
            mask = np.concatenate([mask, np.repeat(mask[:1], extra, axis=0)])
            # A new replay may reuse the last one's output memory: that one was copied out.
            torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]
        out = self.forward(
            input_ids=torch.from_numpy(input_ids).to(self.device),
            attention_mask=torch.from_numpy(mask).to(self.device),
        ).logits
        result: torch.Tensor = out[:rows].float().cpu()
        return result


# Dynamic INT8 measures each activation's scale over the whole forward, so a text's answer
# moves with the texts beside it. Runs of at most this many padded tokens keep the neighbours
# few: on the default model, label agreement with torch was 99.73% / 99.65% / 99.36% in
# forwards of 256 / 1024 / 4096 tokens, and 512-token runs were as fast as any (2 threads).
INT8_RUN_TOKENS = 512
# A run's fixed cost (ONNX Runtime's call, the graph's small ops) in padded tokens: 0.78 ms
# against 0.035 ms a token for the default model's INT8 graph on 2 VNNI cores. Runs are cut
# where one more run costs less than the padding it saves, as forwards are
# (service.batching): in-process, 32 and 64 texts known at a time ran 9-10% faster than with
# runs filled in order (docs/benchmarks-history.md).
INT8_RUN_OVERHEAD_TOKENS = 24


# INT8 changes a label only where FP32's two top probabilities are nearly level: on 12,000
# training texts of the default model (not held out), each of the 46 labels it flipped had an
# INT8 top probability below 0.56, a top-two margin under 0.12. Rows whose INT8 margin is below
# this are recomputed on the FP32 graph: 6% of those texts, and no flip was left (a margin of
# 0.1 would recompute 3% and leave 2). It costs 3-24% more CPU per text, most in small forwards.
INT8_RECHECK_MARGIN = 0.2


class OrtBackend:
    """An ONNX Runtime session on one exported graph; `run_tokens` splits a forward's rows
    into runs of at most that many padded tokens (0: one run). With a `recheck` session (the
    FP32 graph), rows whose answer has a top-two margin below INT8_RECHECK_MARGIN are
    recomputed there; `rechecked` counts them."""

    def __init__(
        self, name: str, session: Any, run_tokens: int = 0, recheck: Any | None = None
    ) -> None:
        self.name = name
        self.session = session
        self.run_tokens = run_tokens
        self.recheck = recheck
        self.rechecked = 0
        self._count = threading.Lock()  # parallel forwards share the backend

    def logits(self, input_ids: Ids, mask: Ids) -> torch.Tensor:
        """Run the session; the graph's `logits` output as a float32 tensor."""
        runs = self._runs(mask) if self.run_tokens else []
        if not runs or (len(runs) == 1 and runs[0][1] == mask.shape[1]):
            out = self._run(input_ids, mask)
        else:
            parts = [(rows, self._run(input_ids[rows, :w], mask[rows, :w])) for rows, w in runs]
            out = np.empty((len(mask), parts[0][1].shape[1]), dtype=np.float32)
            for rows, logits in parts:
                out[rows] = logits
        if self.recheck is not None:
            self._recheck(self.recheck, out, input_ids, mask)
        return torch.from_numpy(out)

    def _run(self, input_ids: Ids, mask: Ids) -> npt.NDArray[np.float32]:
        feed = {"input_ids": input_ids, "attention_mask": mask}
        return np.asarray(self.session.run(["logits"], feed)[0], dtype=np.float32)

    def _runs(self, mask: Ids) -> list[tuple[list[int], int]]:
        return self.plan_runs(mask.sum(axis=1).tolist(), mask.shape[1])

    def plan_runs(self, lengths: list[int], width: int) -> list[tuple[list[int], int]]:
        """Row groups of at most `run_tokens` padded tokens, each with its own longest row as
        its width (rows are right-padded), planned like forwards: rows of similar length run
        together, and a run of short rows does not pay the padding of the forward's longest."""
        # INT8 runs only on a CPU, where ONNX Runtime computes any width alike: a run is as
        # wide as its longest row, as the forward around it is.
        multiple = pad_multiple(self.name, "cpu")
        groups = plan_micro_batches(lengths, self.run_tokens, INT8_RUN_OVERHEAD_TOKENS, multiple)
        return [(g, min(width, round_up(max(lengths[i] for i in g), multiple))) for g in groups]

    def _recheck(
        self, exact: Any, logits: npt.NDArray[np.float32], input_ids: Ids, mask: Ids
    ) -> None:
        """Replace, in place, the logits of rows too close to call with the `exact` session's."""
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        top2 = np.sort(probs / probs.sum(axis=1, keepdims=True), axis=1)[:, -2:]
        close = np.flatnonzero(top2[:, 1] - top2[:, 0] < INT8_RECHECK_MARGIN)
        if not len(close):
            return
        width = int(mask[close].sum(1).max())  # rows are right-padded: cut the common padding
        feed = {"input_ids": input_ids[close, :width], "attention_mask": mask[close, :width]}
        logits[close] = exact.run(["logits"], feed)[0]
        with self._count:
            self.rechecked += len(close)


def resolve_backend(name: str, model_dir: Path, device: torch.device) -> tuple[str, str]:
    """The concrete backend for a setting, and why: `auto` reads the recorded measurement,
    falling back to torch when the measured backend cannot run here (no runtime or provider,
    INT8 unsafe on this CPU, an export missing or changed since); a named one fails at load."""
    if name != "auto":
        if name not in BACKENDS:
            raise BackendError(f"unknown backend {name!r}; use auto or one of {BACKENDS}")
        return name, "asked for"
    best, why = fastest_backend(model_dir, device.type)
    try:
        if best != "torch":
            checked_files(best, model_dir, device)
    except BackendError as exc:
        return "torch", f"{best} was measured fastest, but {exc}"
    return best, why


def checked_files(name: str, model_dir: Path, device: torch.device) -> tuple[Path, Path | None]:
    """The verified export ONNX Runtime backend `name` runs here and, for onnx-int8, the FP32
    graph it rechecks close answers on; BackendError says what is missing or stale."""
    reason = missing_provider(name, device)
    if reason is not None:
        hint = " TensorRT is untested in this project." if name == "tensorrt" else ""
        raise BackendError(f"backend {name!r} cannot run on {device}: {reason}.{hint}")
    if name == "onnx-int8" and device.type != "cpu":
        raise BackendError("onnx-int8 runs on the CPU only; use onnx or tensorrt on a GPU")
    if name == "onnx-int8" and (unsafe := int8_unsafe_here(model_dir)) is not None:
        raise BackendError(f"backend 'onnx-int8' cannot run here: {unsafe}")
    try:
        path = checked_export(model_dir, name)
    except ExportMismatch as exc:
        raise BackendError(str(exc)) from exc
    if name != "onnx-int8":
        return path, None
    try:
        return path, checked_export(model_dir, "onnx")
    except ExportMismatch as exc:
        raise BackendError(f"onnx-int8 rechecks close answers on the FP32 graph: {exc}") from exc


def load_ort(
    name: str,
    model_dir: Path,
    device: torch.device,
    threads: int | None = None,
    trt_shapes: tuple[int, int] = (512, 256),
) -> OrtBackend:
    """An ONNX Runtime backend on the verified export; BackendError says what is missing."""
    path, exact = checked_files(name, model_dir, device)
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Each forward runs on a forward thread of its own (service.forwards), its ops in order;
    # intra-op threads split each op.
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = threads or torch.get_num_threads()
    # Idle intra-op threads spin by default, taking the cores the ingress, HAProxy and Ray
    # need between forwards: at one client the served default model answered 21% more
    # requests without it (docs/benchmarks-history.md), and the in-process limit did not move.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = providers_for(name, device, model_dir)
    if name == "tensorrt":
        providers[0][1].update(trt_profile(*trt_shapes))
    session = ort.InferenceSession(str(path), options, providers=providers)
    if exact is None:
        return OrtBackend(name, session)
    recheck = ort.InferenceSession(str(exact), options, providers=providers)
    return OrtBackend(name, session, INT8_RUN_TOKENS, recheck)
