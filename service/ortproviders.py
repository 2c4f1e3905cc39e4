"""Which ONNX Runtime execution providers each backend runs on, and whether this install has
them: CPU, CUDA, or TensorRT (FP16 engines cached beside the export) with CUDA under it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.artifacts import EXPORT_DIR

if TYPE_CHECKING:
    import torch


def missing_provider(name: str, device: torch.device) -> str | None:
    """Why backend `name` cannot run on `device`, or None when it can."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "onnxruntime is not installed (pip install 'sentiment-service[onnx]')"
    available = ort.get_available_providers()
    need = providers_for(name, device, Path("."))[0]
    provider = need if isinstance(need, str) else need[0]
    if provider not in available:
        return f"ONNX Runtime here has no {provider} (it has {', '.join(available)})"
    return None


def providers_for(name: str, device: torch.device, model_dir: Path) -> list[Any]:
    """ONNX Runtime's providers, with their options, for backend `name` on `device`."""
    gpu: dict[str, Any] = {"device_id": device.index or 0}
    if name == "tensorrt":
        cache = str(Path(model_dir) / EXPORT_DIR / "trt-cache")
        trt = {**gpu, "trt_fp16_enable": True, "trt_engine_cache_enable": True}
        trt["trt_engine_cache_path"] = cache
        return [("TensorrtExecutionProvider", trt), ("CUDAExecutionProvider", gpu)]
    if device.type == "cuda":
        return [("CUDAExecutionProvider", gpu)]
    return ["CPUExecutionProvider"]


def trt_profile(max_rows: int, max_length: int) -> dict[str, str]:
    """TensorRT optimisation profile covering every shape the service sends: 1..max_rows rows
    of 1..max_length tokens (one engine for all buckets, built once and cached)."""
    shapes = {
        "min": (1, 1),
        "opt": (max(1, max_rows // 4), min(64, max_length)),
        "max": (max_rows, max_length),
    }
    return {
        f"trt_profile_{k}_shapes": f"input_ids:{r}x{w},attention_mask:{r}x{w}"
        for k, (r, w) in shapes.items()
    }
