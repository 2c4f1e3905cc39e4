"""Checking a model directory before anything loads it, without importing torch or
transformers: the ingress replicas only tokenize, and start faster and smaller without them."""

from __future__ import annotations

import json
from pathlib import Path


class ModelLoadError(RuntimeError):
    """The model directory is missing or is not a sequence-classification model."""


PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")


# A tokenizer_config.json alone is not a vocabulary.
VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "tokenizer.model")


def has_tokenizer_files(path: Path) -> bool:
    """Whether `path` holds a vocabulary. Without one, transformers still builds a tokenizer,
    of the special tokens alone: every word would read as unknown."""
    return any((path / name).is_file() for name in VOCABULARY_FILES) or any(
        path.glob("sentencepiece*.model")
    )


# The models the Makefile builds, by directory name, and the target that builds each.
_BUILDS = {
    "default": "the default model with `make model`",
    "multilingual": "the multilingual model with `make model-multilingual`",
}


def check_model_dir(path: Path, allow_pickle: bool = False) -> None:
    """Fail with a readable message when `path` is not a usable model directory, or when its
    only weights are pickle files and `allow_pickle` is off (unpickling can run any code)."""
    config = path / "config.json"
    if not config.is_file():
        build = _BUILDS.get(Path(path).name, _BUILDS["default"])
        raise ModelLoadError(
            f"no model at {path} (config.json missing). Build {build}, or set "
            "SENTIMENT_MODEL_PATH to a Hugging Face sequence-classification model directory."
        )
    if not has_tokenizer_files(path):
        raise ModelLoadError(f"{path} has no tokenizer files (tokenizer.json or vocab.txt)")
    id2label = json.loads(config.read_text()).get("id2label")
    if not id2label:
        raise ModelLoadError(f"{config} has no id2label: it is not a classification model")
    if allow_pickle or any(path.glob("*.safetensors")):
        return
    pickles = sorted(p.name for pattern in PICKLE_WEIGHTS for p in path.glob(pattern))
    if pickles:
        raise ModelLoadError(
            f"{path} has only pickle weights ({', '.join(pickles[:3])}), which can run code "
            "when loaded. Convert them to safetensors (save_pretrained does by default), or "
            "set SENTIMENT_ALLOW_PICKLE=true if you trust this directory."
        )
