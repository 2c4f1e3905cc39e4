"""`python -m service export`: ONNX copies of a model directory's weights for ONNX Runtime.

Writes into `DIR/onnx/` (see service.artifacts) and leaves the Hugging Face files alone:
  model.onnx       FP32, standard ONNX operators, dynamic batch and sequence axes; inputs
                   input_ids and attention_mask (int64), output logits. TensorRT reads this one.
  model-opt.onnx   the same graph with ONNX Runtime's BERT fusions (attention, embedding and
                   skip layer norms, bias+GELU): what the `onnx` backend runs.
  model-int8.onnx  (--quantize int8) dynamic INT8 of the fused graph, smoothed on calibration
                   texts (see service.int8).
Every file is checked against torch (INT8 within a looser bound) before any of them replaces
anything; running again with the same weights, options and library versions does nothing.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from service.artifacts import (
    CALIBRATION_FILE,
    ExportMismatch,
    export_dir,
    file_sha256,
    read_manifest,
    versions,
    weights_sha256,
    write_manifest,
)
from service.int8 import int8_options
from service.int8 import quantize as quantize_int8
from service.textfile import TextFileError, text_lines

if TYPE_CHECKING:
    from service.settings import Settings

OPSET = 17
PLAIN, FUSED, INT8 = "model.onnx", "model-opt.onnx", "model-int8.onnx"
FP32_TOLERANCE = 1e-4  # max abs difference of probabilities vs torch on the export check
# INT8 moves probabilities more: on the check rows the default model's INT8 graph read 0.005
# (7-bit or unsmoothed: 0.008-0.012), while a graph that computes another model (INT8 gone
# wrong) moves them by tenths. Several times what was measured leaves room for other CPUs.
INT8_TOLERANCE = 0.05
FUSABLE = ("bert", "roberta", "distilbert", "xlm-roberta", "electra")
FP32_OPTIONS: dict[str, Any] = {"opset": OPSET, "exporter": "torchscript", "fusions": "bert"}
CALIBRATION_MAX_TOKENS = 256  # INT8 calibration texts are cut as the service cuts them


def _load_torch(model_dir: Path) -> Any:
    from transformers import AutoModelForSequenceClassification

    # Eager attention: its MatMul/Softmax pattern is what ONNX Runtime's fusion recognises.
    model = AutoModelForSequenceClassification.from_pretrained(
        model_dir, local_files_only=True, attn_implementation="eager", dtype="float32"
    )
    return model.eval()


def _sample(vocab: int, pad_id: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Three rows of different lengths, right-padded as the service pads them."""
    rng = np.random.default_rng(0)
    ids = rng.integers(min(5, vocab - 1), vocab, size=(3, 24), dtype=np.int64)
    mask = np.ones_like(ids)
    for row, length in enumerate((24, 9, 3)):
        ids[row, length:], mask[row, length:] = pad_id, 0
    return ids, mask


def _torch_to_onnx(model: Any, out: Path) -> None:
    import torch

    ids, mask = (torch.from_numpy(a) for a in _sample(model.config.vocab_size, 0))
    axes = {0: "batch", 1: "sequence"}
    # The TorchScript exporter: its graph is the one ONNX Runtime's BERT fusions match (the
    # torch.export-based exporter's graph kept attention unfused and ran ~1.5x slower here).
    # It warns that it is deprecated and that tracing fixes Python branches; BERT's forward
    # has none that depend on the shapes the axes leave free (the export check runs others).
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (ids, mask),
            str(out),
            dynamo=False,
            input_names=["input_ids", "attention_mask"],
            output_names=["logits"],
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": {0: "batch"}},
            opset_version=OPSET,
        )


def _fuse(plain: Path, out: Path, config: Any) -> None:
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(
        str(plain),
        model_type="bert",
        num_heads=config.num_attention_heads,
        hidden_size=config.hidden_size,
        opt_level=0,  # only the offline fusions; the session applies its own at load
    )
    optimized.save_model_to_file(str(out))


def _check(model: Any, path: Path) -> float:
    """Max abs difference of probabilities between an ONNX file and torch on padded rows."""
    import onnxruntime as ort
    import torch

    ids, mask = _sample(model.config.vocab_size, model.config.pad_token_id or 0)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]
    with torch.inference_mode():
        ref = model(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    got = torch.from_numpy(np.asarray(logits, dtype=np.float32)).softmax(-1)
    return float((got - ref.logits.softmax(-1)).abs().max())


def _options(name: str, calibration: Path | None) -> dict[str, Any]:
    if name != INT8:
        return FP32_OPTIONS
    return {**FP32_OPTIONS, "int8": int8_options(file_sha256(calibration) if calibration else None)}


def calibration_rows(model_dir: Path, calibration: Path) -> list[list[int]]:
    """Token ids of the calibration texts (one per line), cut as the service cuts them."""
    from transformers import AutoTokenizer

    try:
        texts = text_lines(calibration)
    except TextFileError as exc:
        raise ExportMismatch(f"--calibration {exc}") from None
    if not texts:
        raise ExportMismatch(f"{calibration} holds no texts; INT8 smoothing needs some")
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    encoded = tokenizer(texts, truncation=True, max_length=CALIBRATION_MAX_TOKENS)
    return [list(ids) for ids in encoded["input_ids"]]


def _current(
    entry: dict[str, Any] | None, weights: str, name: str, folder: Path, calibration: Path | None
) -> bool:
    """True when `entry` describes `folder/name` as made now from these weights."""
    if not entry or not (folder / name).is_file():
        return False
    options = _options(name, calibration)
    if entry.get("weights_sha256") != weights or entry.get("options") != options:
        return False
    same_tools = entry.get("versions") == versions()
    return same_tools and entry.get("sha256") == file_sha256(folder / name)


def export_onnx(
    model_dir: Path,
    quantize: str | None = None,
    force: bool = False,
    calibration: Path | None = None,
) -> list[str]:
    """Export (and quantize) unless up-to-date files are there; one line per file on what
    was done. INT8 is smoothed on `calibration` (texts, one per line; default: the model
    directory's calibration.txt when there is one). Raises ExportMismatch when a fresh export
    disagrees with torch."""
    from transformers import AutoConfig

    model_dir = Path(model_dir)
    folder = export_dir(model_dir)
    weights = weights_sha256(model_dir)
    manifest = read_manifest(model_dir)
    exports: dict[str, Any] = manifest.get("exports", {})
    fuse = AutoConfig.from_pretrained(model_dir, local_files_only=True).model_type in FUSABLE
    wanted = [PLAIN] + ([FUSED] if fuse else []) + ([INT8] if quantize == "int8" else [])
    if calibration is None and (model_dir / CALIBRATION_FILE).is_file():
        calibration = model_dir / CALIBRATION_FILE
    current = [_current(exports.get(n), weights, n, folder, calibration) for n in wanted]
    if not force and all(current):
        return [f"{folder / n}: up to date" for n in wanted]
    folder.mkdir(exist_ok=True)
    model = _load_torch(model_dir)
    tmp = {name: folder / f".{os.getpid()}-{name}" for name in wanted}
    done = []
    try:
        _torch_to_onnx(model, tmp[PLAIN])
        if fuse:
            _fuse(tmp[PLAIN], tmp[FUSED], model.config)
        if quantize == "int8":
            rows = calibration_rows(model_dir, calibration) if calibration else None
            layers = model.config.num_hidden_layers
            quantize_int8(tmp[FUSED] if fuse else tmp[PLAIN], tmp[INT8], layers, rows)
        # Every file is checked before any replaces its old copy: a failure writes nothing.
        diffs = {name: _check(model, tmp[name]) for name in wanted}
        for name, diff in diffs.items():
            bound = INT8_TOLERANCE if name == INT8 else FP32_TOLERANCE
            if not diff <= bound:  # NaN too
                raise ExportMismatch(
                    f"{name} differs from torch by {diff:.1e} (at most {bound:g} allowed); "
                    "nothing written"
                )
        for name, diff in diffs.items():
            exports[name] = {
                "sha256": file_sha256(tmp[name]),
                "weights_sha256": weights,
                "options": _options(name, calibration),
                "versions": versions(),
                "check_max_abs_diff": float(f"{diff:.3g}"),
                "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            }
            os.replace(tmp[name], folder / name)
            note = (
                ""
                if name != INT8
                else f", smoothed on {calibration}"
                if calibration
                else (", not smoothed: no calibration texts (--calibration FILE)")
            )
            done.append(f"{folder / name}: exported (max abs diff vs torch {diff:.1e}{note})")
    finally:
        for leftover in tmp.values():
            leftover.unlink(missing_ok=True)
    if not fuse:  # the onnx backend then runs the plain graph
        exports.pop(FUSED, None)
        (folder / FUSED).unlink(missing_ok=True)
    # New files: the parity and speed `make parity` measured on the old ones (a different INT8
    # graph, say) say nothing about them, so `auto` goes back to torch until it runs again.
    manifest.update(weights_sha256=weights, exports=exports, measurements={})
    write_manifest(model_dir, manifest)
    return done


def build_tensorrt(model_dir: Path, max_rows: int, max_length: int) -> list[str]:
    """Export, then build and cache TensorRT FP16 engines by running every shape bucket once.

    Untested here (no GPU): fails with BackendError when ONNX Runtime has no TensorRT provider.
    """
    from service.backends import BackendError
    from service.batching import round_up
    from service.model import ModelLoadError, SentimentModel

    lines = export_onnx(model_dir)
    try:
        model = SentimentModel.load(
            model_dir, "cuda", "auto", max_length, backend="tensorrt", max_rows=max_rows
        )
    except ModelLoadError as exc:
        raise BackendError(f"TensorRT engines are built on the GPU that serves: {exc}") from None
    t0 = time.perf_counter()
    seed = model.encode(["warm up the engine"])[0].ids
    width = 8
    while True:
        ids = (seed * (width // len(seed) + 1))[: min(width, model.max_length)]
        for rows in sorted({1, max(1, max_rows * 8 // round_up(len(ids)))}):
            model.predict([ids] * min(rows, max_rows))
        if width >= model.max_length:
            break
        width *= 2
    cache = export_dir(model_dir) / "trt-cache"
    return [*lines, f"{cache}: engines built in {time.perf_counter() - t0:.0f} s"]


def run_export(
    settings: Settings,
    fmt: str,
    quantize: str | None,
    force: bool,
    calibration: Path | None = None,
) -> int:
    """The `export` command: print what was written; a one-line error and exit 2 on failure."""
    from service.backends import BackendError
    from service.model import ModelLoadError

    try:
        if fmt == "tensorrt":
            rows = max(1, settings.batch.micro_batch_tokens // 8)
            lines = build_tensorrt(settings.model_path, rows, settings.max_seq_len)
        else:
            if calibration is not None and not calibration.is_file():
                raise ExportMismatch(f"--calibration {calibration}: no such file")
            lines = export_onnx(settings.model_path, quantize, force, calibration)
    except ImportError as exc:
        print(
            f"error: {exc.name or exc} is missing: pip install 'sentiment-service[onnx]'",
            file=sys.stderr,
        )
        return 2
    except (ExportMismatch, BackendError, ModelLoadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0
