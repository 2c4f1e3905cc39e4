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


# Settings a resumed run may change: they decide when checkpoints are written, or (activation
# checkpointing) trade memory for compute with the same losses. Every other setting shapes the
# optimisation the checkpoint is part of; a new field is compared unless it is listed here.
FREE_TO_CHANGE = frozenset({"checkpoint_every", "checkpoint_each_epoch", "gradient_checkpointing"})


def config_changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """`--flag OLD (now NEW)` for each setting of `now` that differs from the checkpoint's.

    A setting the checkpoint does not record (an older checkpoint) cannot be compared. With
    the same `max_steps` set, `epochs` has no effect, so it may differ."""
    same_steps = bool(saved.get("max_steps")) and saved.get("max_steps") == now.get("max_steps")
    changes = []
    for key, value in now.items():
        if key in FREE_TO_CHANGE or key not in saved or (key == "epochs" and same_steps):
            continue
        if saved[key] != value:
            changes.append(f"--{key.replace('_', '-')} {saved[key]} (now {value})")
    return changes
