"""A model call reports the time it sat in an idle model waiting for company, so an ingress
can tell that wait from work (service.admission.Pace)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from service.encoding import OK, CallResult, TextEncoder
from service.modelcore import ModelCore
from tests.tiny_bert import SAMPLE_TEXT

MAX_LEN = 32
WAIT_S = 0.2


def test_a_lone_call_reports_the_batch_wait_it_sat_out(tiny_model_dir: Path) -> None:
    tier = ModelCore(
        {
            "model_path": str(tiny_model_dir),
            "max_seq_len": MAX_LEN,
            "warmup": False,
            "device": "cpu",
            "batch": {"batch_wait_timeout_s": WAIT_S},
        }
    )
    packed, _ = TextEncoder.load(tiny_model_dir, MAX_LEN).encode(SAMPLE_TEXT[:2])
    budgets = np.full(2, 30.0, dtype=np.float32)

    async def both() -> tuple[CallResult, CallResult]:
        # One event loop for both calls: the core's batcher lives on the loop it started on.
        waited = await tier.infer(packed, budgets)
        tier.reconfigure({"batch_wait_timeout_s": 0.0})  # a user_config's batch knob
        assert tier.live.refused is None and tier.batch.batch_wait_timeout_s == 0.0
        return waited, await tier.infer(packed, budgets)

    try:
        (probs, status, idle_s), (_, no_wait_status, no_wait_s) = asyncio.run(both())
    finally:
        tier._stop.set()
        tier.forwards.executor.shutdown()
    assert (status == OK).all() and (no_wait_status == OK).all() and probs.shape == (2, 2)
    assert WAIT_S <= idle_s < 10 * WAIT_S  # alone, it waited the whole timeout for company
    assert no_wait_s < WAIT_S
