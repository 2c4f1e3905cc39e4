"""`--strategy fsdp`: PyTorch's `fully_shard` (FSDP2) across the processes torchrun starts.

Each encoder block (the model's `_no_split_modules`: for BERT the embeddings and every layer)
is its own shard unit, then the root takes what is left (the pooler and the head). Between uses
a process keeps only its 1/N slice of every parameter, gradient and AdamW moment; a unit's full
parameters exist only while it runs. gloo on CPU, NCCL on GPUs (training.loop picks).

Checkpoints are gathered, not sharded: all ranks gather full model and optimizer state to rank 0,
which writes the same single file as DDP (atomic rename, same resume checks). For encoders up to
BERT-large (335M parameters: ~5.4 GB of FP32 weights and AdamW state) one host holds that easily,
the output must be one full model directory anyway, and a checkpoint stays readable without a
process group. Sharded `torch.distributed.checkpoint` files would pay off for models whose full
state does not fit one host's memory, which this service does not train.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from training.distributed import DistContext
from training.strategy import SetupError

M = TypeVar("M", bound=torch.nn.Module)
# Full tensors, on the CPU, on rank 0 only (the other ranks get empty dicts).
_GATHER = StateDictOptions(full_state_dict=True, cpu_offload=True)
# Every rank reads the full checkpoint and keeps its own slice.
_SCATTER = StateDictOptions(full_state_dict=True)


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks to shard one by one, innermost first; empty means the root alone."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    units = [m for m in model.modules() if m is not model and type(m).__name__ in names]
    if not units:
        base = getattr(model, "base_model", model)
        layers = getattr(getattr(base, "encoder", None), "layer", None)
        units = list(layers) if isinstance(layers, torch.nn.ModuleList) else []
    return units[::-1]  # fully_shard wants children sharded before their parents


class FullyShardedParallel:
    """FSDP2 over all processes of the job (one data-parallel mesh dimension)."""

    name = "fsdp"

    def __init__(self, ctx: DistContext, amp_dtype: torch.dtype | None) -> None:
        if not ctx.distributed:
            raise SetupError(
                "--strategy fsdp shards the model across processes: launch it with "
                "`torchrun --nproc-per-node N -m training ...` (N >= 2); one process trains "
                "with --strategy ddp"
            )
        self.ctx = ctx
        self.mp = MixedPrecisionPolicy()
        if amp_dtype is not None and ctx.device.type == "cuda":
            # Gather and compute in the AMP dtype (half the all-gather traffic and the memory
            # of a unit's unsharded parameters), reduce gradients in FP32; the FP32 shards
            # stay the optimizer's master weights. On the CPU, AMP is autocast only, as in DDP.
            self.mp = MixedPrecisionPolicy(param_dtype=amp_dtype, reduce_dtype=torch.float32)

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """Shard `model` in place (once: a model that is already sharded is kept as is)."""
        if isinstance(model, FSDPModule):
            return model
        for unit in shard_units(model):
            fully_shard(unit, mp_policy=self.mp)
        fully_shard(model, mp_policy=self.mp)
        return model

    def micro_step(self, boundary: bool) -> AbstractContextManager[Any]:
        # Gradients are reduce-scattered after every micro-step instead of accumulating
        # unsharded (set_requires_gradient_sync(False)): that would hold a full gradient
        # copy per process, the very memory FSDP is here to save.
        return contextlib.nullcontext()

    def state(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Full model and optimizer state on rank 0 (collective: every rank calls it)."""
        return (
            get_model_state_dict(model, options=_GATHER),
            dict(get_optimizer_state_dict(model, optimizer, options=_GATHER)),
        )

    def load(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        model_state: dict[str, Any],
        optimizer_state: dict[str, Any],
    ) -> None:
        """Every rank takes its slice of the full state `state` saved."""
        set_model_state_dict(model, model_state, options=_SCATTER)
        set_optimizer_state_dict(model, optimizer, optimizer_state, options=_SCATTER)  # type: ignore[arg-type]


def gather_full_model(model: M, ctx: DistContext) -> M | None:
    """A plain copy of the sharded model on rank 0, on the training device (collective)."""
    state = get_model_state_dict(model, options=_GATHER)
    if not ctx.is_main:
        return None
    # fully_shard swapped the class for a subclass of FSDPModule; build the original one.
    plain_class: Any = next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule))
    with torch.random.fork_rng(devices=[]):  # its throwaway init must not move the seed
        plain: M = plain_class(model.config)
    plain.load_state_dict(state)
    return plain.to(ctx.device)
