"""Forwards the calibration predicts to be cheaper than a thread hand-off run on the event loop;
the others, and every forward when faults are injected, on the forward thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from service.calibration import Calibration
from service.encoding import OK, TextEncoder
from service.model import SentimentModel
from service.modelcore import ModelCore
from service.placement import inline_limit_s
from service.settings import Settings
from tests.tiny_bert import SAMPLE_TEXT

MAX_LEN = 32
# 1 ms a forward plus 10 us a padded token: one short text ~1.1 ms, 32 long ones ~11 ms.
KNOWN_COST = Calibration(fixed_s=1e-3, per_token_s=1e-5, shapes=2)


class Where:
    """The replica's own forward, noting the thread each forward ran on."""

    def __init__(self, forward: Any) -> None:
        self.forward = forward
        self.threads: list[str] = []

    def __call__(self, rows: list[npt.NDArray[np.int32]]) -> Any:
        self.threads.append(threading.current_thread().name)
        return self.forward(rows)


def core(model_dir: Path, **settings: Any) -> ModelCore:
    base = {"model_path": str(model_dir), "max_seq_len": MAX_LEN, "warmup": True}
    return ModelCore({**base, **settings, "batch": {"micro_batch_tokens": 1024}})


@pytest.fixture
def replica(tiny_model_dir: Path) -> Iterator[ModelCore]:
    tier = core(tiny_model_dir, inline_forward_ms=5.0)
    tier.calibration = KNOWN_COST  # measured costs vary by machine; the rule is what is tested
    tier.forwards.alone = Where(tier.forwards.alone)
    yield tier
    tier._stop.set()
    tier.forwards.executor.shutdown()


def infer(replica: ModelCore, texts: list[str]) -> tuple[npt.NDArray[np.float32], Any, float]:
    encoder = TextEncoder.load(replica.settings.model_path, MAX_LEN)
    packed, _ = encoder.encode(texts)

    async def main() -> Any:
        return await replica.infer(packed, np.full(len(texts), 30.0, dtype=np.float32))

    return asyncio.run(main())  # type: ignore[no-any-return]


def test_a_cheap_forward_runs_on_the_event_loop(replica: ModelCore, tiny_model_dir: Path) -> None:
    probs, status, _ = infer(replica, SAMPLE_TEXT[:1])
    assert replica.forwards.alone.threads == [threading.current_thread().name]  # type: ignore[attr-defined]
    assert (status == OK).all()
    # Its CPU is counted apart from the loop's own work (/readyz; the bench reads it).
    assert replica.tally.loop_forward_cpu_s > 0
    local = SentimentModel.load(tiny_model_dir, device="cpu", max_length=MAX_LEN)
    expected = local.predict([e.ids for e in local.encode(SAMPLE_TEXT[:1])]).numpy()
    np.testing.assert_allclose(probs, expected, atol=1e-5)


def test_a_costly_forward_runs_on_the_forward_thread(replica: ModelCore) -> None:
    long_texts = [" ".join(SAMPLE_TEXT)] * 32  # 32 rows of 32 tokens: ~11 ms predicted
    probs, status, _ = infer(replica, long_texts)
    threads = replica.forwards.alone.threads  # type: ignore[attr-defined]
    assert threads and all(name.startswith("forward") for name in threads)
    assert (status == OK).all() and probs.shape == (32, 2)
    assert replica.tally.loop_forward_cpu_s == 0


def test_without_a_calibration_nothing_runs_inline(tiny_model_dir: Path) -> None:
    tier = core(tiny_model_dir, inline_forward_ms=5.0, warmup=False)
    try:
        tier.forwards.alone = Where(tier.forwards.alone)
        infer(tier, SAMPLE_TEXT[:1])
        assert tier.forwards.alone.threads[0].startswith("forward")  # type: ignore[attr-defined]
    finally:
        tier._stop.set()
        tier.forwards.executor.shutdown()


def test_a_calibration_without_a_cost_per_token_predicts_nothing(replica: ModelCore) -> None:
    # One token count only (a tiny max_seq_len and budget): the fit failed, both costs 0.
    replica.calibration = Calibration(fixed_s=0.0, per_token_s=0.0, shapes=1)
    infer(replica, SAMPLE_TEXT[:1])
    assert replica.forwards.alone.threads[0].startswith("forward")  # type: ignore[attr-defined]


def test_no_forward_runs_inline_with_a_fault_injected_or_the_limit_at_zero(
    tiny_model_dir: Path,
) -> None:
    model = SentimentModel.load(tiny_model_dir, device="cpu", max_length=MAX_LEN)
    base = {"model_path": str(tiny_model_dir), "inline_forward_ms": 2.0}
    assert inline_limit_s(Settings.model_validate(base), model) == pytest.approx(0.002)
    for fault in ({"fault_hang_min_tokens": 9}, {"fault_slow_forward_s": 1.0}):
        assert inline_limit_s(Settings.model_validate({**base, **fault}), model) == 0.0
    assert inline_limit_s(Settings.model_validate({**base, "inline_forward_ms": 0}), model) == 0.0
