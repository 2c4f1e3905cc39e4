"""Where a process sits in a torchrun job: join the process group, wait, leave.

gloo on the CPU, NCCL on GPUs; a process started without torchrun runs alone (no group).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist


@dataclass
class DistContext:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False  # this process joined the group in `setup_distributed`

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


DEVICES = ("auto", "cpu", "cuda")  # a process's GPU is its LOCAL_RANK's


def setup_distributed(device: str = "auto") -> DistContext:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1), else run alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if use_cuda and not torch.cuda.is_available():
        raise RuntimeError(f"device {device!r} was asked for but no CUDA GPU is visible")
    dev = torch.device("cuda", local) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(dev)
    joined = world > 1 and not dist.is_initialized()
    if joined:
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistContext(rank, world, local, dev, joined)


def teardown_distributed(ctx: DistContext | None = None) -> None:
    """Leave the process group cleanly (avoids a warning and a hang at exit).

    With `ctx`, only a group that `setup_distributed` joined: a caller that made its own group
    (to run several jobs in one launch) keeps it.
    """
    if dist.is_initialized() and (ctx is None or ctx.owns_group):
        dist.barrier()
        dist.destroy_process_group()


def barrier(ctx: DistContext) -> None:
    """Wait for all ranks; a no-op when running alone."""
    if ctx.distributed and dist.is_initialized():
        dist.barrier()
