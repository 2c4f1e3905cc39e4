"""A forward whose every text expired before it started is not computed, on a forward thread
or on the event loop: nobody reads it, and the requests queued behind it would wait for it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from service.calibration import Calibration
from service.encoding import EXPIRED, OK, TextEncoder
from service.modelcore import ModelCore

MAX_LEN = 32
# Each text fills a forward of its own (the budget is one full-length row).
LONG_TEXTS = [f"review {i}: " + "the strap broke after a week of daily use " * 8 for i in range(4)]


class Slow:
    """The replica's own forward, slowed down, counting its calls."""

    def __init__(self, forward: Any, seconds: float) -> None:
        self.forward, self.seconds, self.calls = forward, seconds, 0

    def __call__(self, rows: list[npt.NDArray[np.int32]]) -> Any:
        self.calls += 1
        time.sleep(self.seconds)
        return self.forward(rows)


@pytest.mark.parametrize("on_loop", [False, True], ids=["thread", "event_loop"])
def test_forwards_of_expired_texts_are_skipped(tiny_model_dir: Path, on_loop: bool) -> None:
    tier = ModelCore(
        {
            "model_path": str(tiny_model_dir),
            "max_seq_len": MAX_LEN,
            "warmup": False,
            "device": "cpu",
            "parallel_forwards": 1,
            "inline_forward_ms": 5.0 if on_loop else 0.0,
            "batch": {"micro_batch_tokens": MAX_LEN},
        }
    )
    if on_loop:  # a known cost, so these one-row forwards run on the loop
        tier.calibration = Calibration(fixed_s=1e-3, per_token_s=1e-5, shapes=2)
    slow = Slow(tier.forwards.alone, seconds=0.4)
    tier.forwards.alone = slow
    packed, cut = TextEncoder.load(tiny_model_dir, MAX_LEN).encode(LONG_TEXTS)
    assert all(cut)
    try:
        budgets = np.full(len(LONG_TEXTS), 0.2, dtype=np.float32)
        _, status, _ = asyncio.run(tier.infer(packed, budgets))
    finally:
        tier._stop.set()
        tier.forwards.executor.shutdown()
    # The first forward started in time and outlived every deadline; the other three never ran.
    assert slow.calls == 1
    assert tier.tally.forwards == 1 and tier.tally.forward_texts == 1
    assert sorted(status.tolist()) == [OK, EXPIRED, EXPIRED, EXPIRED]
