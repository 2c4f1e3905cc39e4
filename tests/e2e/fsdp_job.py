"""Run under torchrun by test_training_fsdp.py: the training CLI three times in one launch.

Starting Python, torch and transformers twice per process is most of an e2e run's time, so
this job makes the process group once (the CLI then leaves it alone) and runs:
  full      --strategy fsdp --gradient-checkpointing, 4 steps, a checkpoint every 2 (copies kept)
  resumed   the same from the step-2 copy to step 4
  ddp       the same 4 steps with --strategy ddp and no checkpointing, for comparison
Usage: fsdp_job.py ENCODER DATA WORK
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import torch.distributed as dist

import training.loop as loop
from training.__main__ import main


def _keep_copies(work: Path) -> None:
    save = loop.save_checkpoint

    def save_and_copy(path: Path, state: dict[str, Any]) -> None:
        save(path, state)
        shutil.copytree(path, work / f"step-{state['step']}", dirs_exist_ok=True)

    loop.save_checkpoint = save_and_copy


def run() -> int:
    encoder, data, work = (Path(a) for a in sys.argv[1:4])
    common = [
        "train", f"--model={encoder}", f"--data={data}", "--max-steps=4", "--batch-size=8",
        "--grad-accum=2", "--max-length=32", "--lr=1e-3", "--checkpoint-every=2",
    ]  # fmt: skip
    resume = work / "step-2"
    dist.init_process_group("gloo")
    _keep_copies(work)
    try:
        for name, extra in (
            ("full", ["--strategy=fsdp", "--gradient-checkpointing", "--keep-checkpoint"]),
            ("resumed", ["--strategy=fsdp", "--gradient-checkpointing", f"--resume={resume}"]),
            ("ddp", ["--strategy=ddp", "--checkpoint-every=0"]),
        ):
            if dist.get_rank() == 0:
                print(f"== {name}", flush=True)
            code = main([*common, f"--out={work / name}", *extra])
            if code != 0:
                return code
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(run())
