"""Load a Hugging Face sequence-classification directory and run forwards on token ids.

This is the one narrow interface the rest of the service sees: load once, encode texts to
token ids, `predict(batch of id lists) -> probabilities`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

from service.backends import (
    Backend,
    BackendError,
    OrtBackend,
    TorchBackend,
    compile_mode,
    load_ort,
    resolve_backend,
)
from service.batching import pad_multiple, padded_cost, round_up
from service.encoding import TextEncoder, sequence_limit
from service.modeldir import ModelLoadError, check_model_dir
from service.settings import check_device

logger = logging.getLogger(__name__)

__all__ = ["ModelLoadError", "SentimentModel", "check_model_dir"]


_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Encoded:
    """One text as token ids, and whether it was cut to the maximum length."""

    ids: list[int]
    truncated: bool


def encode_texts(encoder: TextEncoder, texts: list[str]) -> list[Encoded]:
    """Each text's token ids (special tokens included, cut at the encoder's `max_length`) in
    one tokenizer call, and whether it was cut."""
    packed, truncated = encoder.encode(texts)
    return [Encoded(packed.row(i).tolist(), truncated[i]) for i in range(len(texts))]


def resolve_device(device: str) -> torch.device:
    """`auto` means the first GPU when there is one, else the CPU."""
    try:
        check_device(device)
    except ValueError as exc:
        raise ModelLoadError(f"device: {exc}") from None
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} was asked for but no CUDA GPU is visible")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """`auto` means FP16 on a GPU and FP32 on the CPU (CPU half precision is slow)."""
    if dtype == "auto":
        return torch.float16 if device.type == "cuda" else torch.float32
    try:
        return _DTYPES[dtype]
    except KeyError:
        choices = ", ".join(_DTYPES)
        raise ModelLoadError(f"unknown dtype {dtype!r}; use one of auto, {choices}") from None


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.float16` -> `float16`, for labels and JSON."""
    return str(dtype).removeprefix("torch.")


def parameter_count(path: Path) -> int:
    """Parameters in a directory's safetensors files, read from their headers alone."""
    from safetensors import safe_open

    total = 0
    for file in sorted(Path(path).glob("*.safetensors")):
        with safe_open(str(file), "np") as f:
            total += sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys())  # noqa: SIM118
    return total


class SentimentModel:
    """A loaded classifier: tokenizer, a backend that runs forwards, label names."""

    def __init__(
        self,
        backend: Backend,
        encoder: TextEncoder,
        labels: list[str],
        name: str,
        device: torch.device,
        dtype: torch.dtype,
        max_length: int,
        pad_id: int,
        parameters: int,
        backend_reason: str = "asked for",
    ) -> None:
        self.backend = backend
        self.encoder = encoder
        self.labels = labels
        self.name = name
        self.device = device
        self.dtype = dtype
        self.max_length = max_length
        self.pad_id = pad_id
        self.parameters = parameters
        self.backend_reason = backend_reason

    @property
    def backend_name(self) -> str:
        """`torch`, `onnx`, `onnx-int8` or `tensorrt`: what runs the forwards."""
        return self.backend.name

    @property
    def model(self) -> torch.nn.Module:
        """The PyTorch module (the torch backend only)."""
        if not isinstance(self.backend, TorchBackend):
            raise AttributeError(f"backend {self.backend_name!r} holds no PyTorch module")
        return self.backend.module

    @classmethod
    def load(
        cls,
        path: Path,
        device: str = "auto",
        dtype: str = "auto",
        max_length: int = 256,
        name: str | None = None,
        allow_pickle: bool = False,
        backend: str = "torch",
        max_rows: int = 512,
        torch_compile: str = "off",
        threads: int | None = None,
        one_thread: bool = True,
    ) -> SentimentModel:
        """Load the tokenizer and the backend from a local directory; never touches a model
        hub. ONNX backends load the verified export instead of the PyTorch weights
        (`max_rows` sizes TensorRT's shape profile; `threads`: their sessions' intra-op threads,
        default torch's count); `torch_compile` compiles the torch backend's module
        (settings.COMPILE_MODES; auto: CUDA graphs for torch on a GPU when the warm-up and
        every forward run on `one_thread`, backends.compile_mode)."""
        path = Path(path)
        check_model_dir(path, allow_pickle)
        dev = resolve_device(device)
        try:
            chosen, why = resolve_backend(backend, path, dev)
        except BackendError as exc:
            raise ModelLoadError(str(exc)) from None
        asked, torch_compile = torch_compile, compile_mode(torch_compile, chosen, dev, one_thread)
        if torch_compile != "off" and chosen != "torch":
            raise ModelLoadError(
                f"torch_compile={torch_compile!r} compiles the torch backend, but this model "
                f"serves {chosen} ({why}); set SENTIMENT_BACKEND=torch to compile it"
            )
        encoder = TextEncoder.load(path, max_length)
        limit = sequence_limit(path, max_length)
        if chosen != "torch":
            exported = (path, chosen, why, dev, dtype, encoder, limit, name, max_rows, threads)
            return cls._load_exported(*exported)
        torch_dtype = resolve_dtype(dtype, dev)
        model = AutoModelForSequenceClassification.from_pretrained(
            path,
            local_files_only=True,
            dtype=torch_dtype,
            attn_implementation="sdpa",
            use_safetensors=None if allow_pickle else True,
        )
        model.to(dev).eval()
        config = model.config
        labels = [str(config.id2label[i]) for i in range(config.num_labels)]
        pad_id = getattr(config, "pad_token_id", None) or 0
        count = sum(p.numel() for p in model.parameters())
        try:
            backend_ = TorchBackend(model, dev, torch_compile)
        except BackendError as exc:
            raise ModelLoadError(str(exc)) from None
        if torch_compile != "off":
            why = f"{why}; torch.compile {torch_compile}"
        if asked == "auto" and torch_compile != "off":
            try:  # compiles now (tens of seconds); a GPU image without a C compiler fails here
                backend_.logits(np.full((1, 8), pad_id, np.int64), np.ones((1, 8), np.int64))
            except Exception as exc:  # auto means the best that runs here: eager
                logger.warning("torch.compile %s failed, serving eager: %s", torch_compile, exc)
                backend_ = TorchBackend(model, dev)
                why = f"{why} failed ({type(exc).__name__}), eager"
        return cls(
            backend_,
            encoder,
            labels,
            name or path.name,
            dev,
            torch_dtype,
            limit,
            pad_id,
            count,
            why,
        )

    @classmethod
    def _load_exported(
        cls,
        path: Path,
        backend: str,
        why: str,
        dev: torch.device,
        dtype: str,
        encoder: TextEncoder,
        limit: int,
        name: str | None,
        max_rows: int,
        threads: int | None,
    ) -> SentimentModel:
        # TensorRT builds FP16 engines; ONNX Runtime's CPU and CUDA providers run the FP32 graph.
        runs = torch.float16 if backend == "tensorrt" else torch.float32
        if dtype not in ("auto", dtype_name(runs)):
            raise ModelLoadError(
                f"backend {backend!r} runs {dtype_name(runs)}; set SENTIMENT_DTYPE=auto or "
                f"{dtype_name(runs)}, or SENTIMENT_BACKEND=torch for {dtype}"
            )
        try:
            runner = load_ort(backend, path, dev, threads, trt_shapes=(max_rows, limit))
        except BackendError as exc:
            raise ModelLoadError(str(exc)) from None
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        labels = [str(config.id2label[i]) for i in range(config.num_labels)]
        pad_id = getattr(config, "pad_token_id", None) or 0
        count = parameter_count(path)
        return cls(runner, encoder, labels, name or path.name, dev, runs, limit, pad_id, count, why)

    def encode(self, texts: list[str]) -> list[Encoded]:
        """Tokenize texts (with special tokens) in one call, cutting each at `max_length`."""
        return encode_texts(self.encoder, texts)

    def predict(self, batch: Sequence[Sequence[int] | npt.NDArray[np.int32]]) -> torch.Tensor:
        """Probabilities (float32, CPU) for a batch of token-id rows (lists or arrays), padded
        to a multiple of `pad_multiple`."""
        width = round_up(max(len(ids) for ids in batch), self.pad_multiple)
        input_ids = np.full((len(batch), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        probs = self.backend.logits(input_ids, mask).softmax(dim=-1)
        if probs.shape != (len(batch), len(self.labels)):
            raise RuntimeError(f"model returned {tuple(probs.shape)} for {len(batch)} inputs")
        return probs

    @property
    def pad_multiple(self) -> int:
        """What a forward's width is rounded up to (service.batching.pad_multiple)."""
        return pad_multiple(self.backend_name, self.device.type)

    def padded_tokens(self, lengths: Sequence[int]) -> int:
        """Tokens a forward of rows this long computes, padding included: rows x the longest
        (rounded up), or, where the backend cuts runs (onnx-int8), each run's rows x its width."""
        backend = self.backend
        if not lengths or not (isinstance(backend, OrtBackend) and backend.run_tokens):
            return padded_cost(lengths, self.pad_multiple)
        width = round_up(max(lengths), self.pad_multiple)  # what predict pads the rows to
        return sum(w * len(rows) for rows, w in backend.plan_runs(list(lengths), width))

    @property
    def cuts_runs(self) -> bool:
        """Whether the backend cuts each forward into runs at their own widths (onnx-int8):
        merging lengths then costs little padding (BatchConfig.overhead_for)."""
        return bool(getattr(self.backend, "run_tokens", 0))

    @property
    def records_graphs(self) -> bool:
        """Whether forwards replay CUDA graphs (torch_compile=reduce-overhead on a GPU): the
        warm-up then runs every shape a forward can have (service.calibration)."""
        return bool(getattr(self.backend, "graphs", False)) and self.device.type == "cuda"

    @property
    def rechecked_texts(self) -> int:
        """Texts recomputed on the FP32 graph so far (onnx-int8; 0 for other backends)."""
        return int(getattr(self.backend, "rechecked", 0))

    def gpu_memory(self) -> tuple[int, int, int]:
        """Allocated, reserved and peak GPU bytes of this process (zeros on the CPU)."""
        if self.device.type != "cuda":
            return (0, 0, 0)
        return (
            torch.cuda.memory_allocated(self.device),
            torch.cuda.memory_reserved(self.device),
            torch.cuda.max_memory_allocated(self.device),
        )

    def classify(self, texts: list[str]) -> list[dict[str, float]]:
        """Convenience for scripts and tests: texts in, label probabilities out."""
        probs = self.predict([e.ids for e in self.encode(texts)])
        return [dict(zip(self.labels, row.tolist(), strict=True)) for row in probs]
