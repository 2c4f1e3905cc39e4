"""Resumable training state on disk: one directory, one file, replaced atomically."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FILE = "training_state.pt"


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    """Write atomically: a crash mid-save must not destroy the previous checkpoint."""
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(state, tmp / CHECKPOINT_FILE)
    shutil.rmtree(path, ignore_errors=True)
    tmp.rename(path)


def load_checkpoint(path: Path, mmap: bool = False) -> dict[str, Any]:
    """Read a checkpoint directory written by `save_checkpoint`.

    `mmap`: map the file instead of reading it, so N processes on one host share its pages
    while each copies out only its own slice (FSDP).
    """
    file = Path(path) / CHECKPOINT_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{path} is not a checkpoint directory ({CHECKPOINT_FILE} missing)")
    state: dict[str, Any] = torch.load(file, map_location="cpu", weights_only=True, mmap=mmap)
    return state
