"""How the model is spread over the processes of a job: `--strategy ddp` (default) or `fsdp`.

- `ddp`: every process holds the whole model, gradients and AdamW state; gradients are
  all-reduced once per optimizer step. One process alone is the same path without the wrapper.
- `fsdp` (training/fsdp.py): PyTorch's `fully_shard` (FSDP2) splits parameters, gradients and
  optimizer state across the processes, gathering one layer's parameters at a time.

A strategy wraps the model, says how micro-steps accumulate, and turns model and optimizer
state into a checkpoint and back. Checkpoints of both hold full (unsharded) tensors in one file
written by rank 0, so the format, the atomic save and the servable output are the same.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

import torch
from torch.nn.parallel import DistributedDataParallel

from training.distributed import DistContext

STRATEGIES = ("ddp", "fsdp")
M = TypeVar("M", bound=torch.nn.Module)


class SetupError(ValueError):
    """Flags or a model that cannot train as asked; the message says what to do instead."""


class Strategy(Protocol):
    """What the training loop needs from a strategy."""

    name: str

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module: ...

    def micro_step(self, boundary: bool) -> AbstractContextManager[Any]: ...

    def state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[dict[str, Any], dict[str, Any]]: ...

    def load(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        model_state: dict[str, Any],
        optimizer_state: dict[str, Any],
    ) -> None: ...


class DataParallel:
    """DistributedDataParallel across processes; the bare model in a single process."""

    name = "ddp"

    def __init__(self, ctx: DistContext) -> None:
        self.ctx = ctx
        self._ddp: DistributedDataParallel | None = None

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The module to call in the loop (the model itself stays the unwrapped one)."""
        if not self.ctx.distributed:
            return model
        ids = [self.ctx.device.index] if self.ctx.device.type == "cuda" else None
        self._ddp = DistributedDataParallel(model, device_ids=ids)
        return self._ddp

    def micro_step(self, boundary: bool) -> AbstractContextManager[Any]:
        """Skip the gradient all-reduce on inner micro-steps; it happens once per group."""
        if self._ddp is not None and not boundary:
            return self._ddp.no_sync()
        return contextlib.nullcontext()

    def state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Model and optimizer state to checkpoint (rank 0's copy is the one written)."""
        return model.state_dict(), optimizer.state_dict()

    def load(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        model_state: dict[str, Any],
        optimizer_state: dict[str, Any],
    ) -> None:
        """Restore what `state` returned."""
        model.load_state_dict(model_state)
        optimizer.load_state_dict(optimizer_state)


def make_strategy(name: str, ctx: DistContext, amp_dtype: torch.dtype | None) -> Strategy:
    """The strategy object for `--strategy NAME`; SetupError when it cannot run here."""
    if name == "ddp":
        return DataParallel(ctx)
    if name == "fsdp":
        from training.fsdp import FullyShardedParallel

        return FullyShardedParallel(ctx, amp_dtype)
    raise SetupError(f"unknown --strategy {name!r}; use one of {', '.join(STRATEGIES)}")


def servable_model(model: M, ctx: DistContext) -> M | None:
    """The trained model as a plain module on rank 0 (None elsewhere), ready to save.

    Under FSDP every rank must call this: the shards are gathered collectively.
    """
    from torch.distributed.fsdp import FSDPModule

    if isinstance(model, FSDPModule):
        from training.fsdp import gather_full_model

        return gather_full_model(model, ctx)
    return model if ctx.is_main else None
