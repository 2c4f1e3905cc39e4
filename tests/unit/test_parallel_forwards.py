"""Parallel forwards on a CPU: two batches compute at once, and so do one batch's forwards; a
forward beside another runs on the narrow copy of the model, answers equal the model run
in-process, and where parallel forwards cannot run, asking for them is a clear error."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from service import placement
from service.encoding import OK, TextEncoder
from service.model import SentimentModel
from service.modelcore import ModelCore
from service.placement import intra_op_threads, parallel_forwards
from service.settings import Settings
from tests.tiny_bert import SAMPLE_TEXT

MAX_LEN = 32


class Overlap:
    """A forward that holds each call until two are in flight (or a second passes), noting how
    many ran at once at most."""

    def __init__(self, forward: Any, both: threading.Barrier, seen: list[int]) -> None:
        self.forward, self.both, self.seen = forward, both, seen
        self.calls = 0

    def __call__(self, rows: list[npt.NDArray[np.int32]]) -> Any:
        self.calls += 1
        try:
            self.seen.append(self.both.n_waiting + 1)
            self.both.wait(1.0)
        except threading.BrokenBarrierError:
            pass
        return self.forward(rows)


def core(model_dir: Path, **settings: Any) -> ModelCore:
    base = {"model_path": str(model_dir), "max_seq_len": MAX_LEN, "warmup": False}
    return ModelCore({**base, "inline_forward_ms": 0.0, "device": "cpu", **settings})


def test_two_calls_compute_at_once_and_answer_as_in_process(tiny_model_dir: Path) -> None:
    threads = torch.get_num_threads()
    tier = core(tiny_model_dir, parallel_forwards=2, torch_threads=2)
    seen: list[int] = []
    both = threading.Barrier(2)
    try:
        assert tier.parallel == 2 and tier.narrow is not tier.model
        tier.forwards.alone = Overlap(tier.forwards.alone, both, seen)
        tier.forwards.beside = Overlap(tier.forwards.beside, both, seen)
        encoder = TextEncoder.load(tiny_model_dir, MAX_LEN)
        first, _ = encoder.encode(SAMPLE_TEXT[:3])
        second, _ = encoder.encode(SAMPLE_TEXT[3:5])

        async def main() -> Any:
            one = asyncio.create_task(tier.infer(first, np.full(3, 30.0, dtype=np.float32)))
            for _ in range(500):  # until the first batch's forward has started
                if seen:
                    break
                await asyncio.sleep(0.002)
            two = tier.infer(second, np.full(2, 30.0, dtype=np.float32))
            return await asyncio.gather(one, two)

        (p1, s1, _), (p2, s2, _) = asyncio.run(main())
    finally:
        tier._stop.set()
        tier.forwards.executor.shutdown()
        torch.set_num_threads(threads)
    assert max(seen) == 2  # the second batch computed beside the first
    assert tier.forwards.alone.calls == 1 and tier.forwards.beside.calls == 1  # type: ignore[union-attr]
    assert tier.tally.batches == 2
    assert (s1 == OK).all() and (s2 == OK).all()
    local = SentimentModel.load(tiny_model_dir, device="cpu", max_length=MAX_LEN)
    expected = local.predict([e.ids for e in local.encode(SAMPLE_TEXT[:5])]).numpy()
    np.testing.assert_allclose(np.concatenate([p1, p2]), expected, atol=1e-5)


def test_one_batch_computes_its_forwards_side_by_side(tiny_model_dir: Path) -> None:
    threads = torch.get_num_threads()
    # A forward's budget of one full-length row: the five texts need three forwards at least.
    batch = {"micro_batch_tokens": MAX_LEN}
    tier = core(tiny_model_dir, parallel_forwards=2, torch_threads=2, batch=batch)
    seen: list[int] = []
    both = threading.Barrier(2)
    try:
        tier.forwards.alone = Overlap(tier.forwards.alone, both, seen)
        tier.forwards.beside = Overlap(tier.forwards.beside, both, seen)
        packed, _ = TextEncoder.load(tiny_model_dir, MAX_LEN).encode(SAMPLE_TEXT[:5])
        probs, status, _ = asyncio.run(tier.infer(packed, np.full(5, 30.0, dtype=np.float32)))
    finally:
        tier._stop.set()
        tier.forwards.executor.shutdown()
        torch.set_num_threads(threads)
    assert tier.tally.batches == 1 and tier.tally.forwards >= 3
    assert max(seen) == 2  # the batch's second forward computed beside its first
    assert tier.forwards.beside.calls >= 1  # type: ignore[union-attr]
    assert (status == OK).all()
    local = SentimentModel.load(tiny_model_dir, device="cpu", max_length=MAX_LEN)
    expected = local.predict([e.ids for e in local.encode(SAMPLE_TEXT[:5])]).numpy()
    np.testing.assert_allclose(probs, expected, atol=1e-5)


def settings(model_dir: Path, **values: Any) -> Settings:
    return Settings.model_validate({"model_path": str(model_dir), "device": "cpu", **values})


def test_auto_computes_two_at_once_only_on_onnx_runtime_with_two_threads(
    tiny_model_dir: Path,
) -> None:
    assert parallel_forwards(settings(tiny_model_dir, backend="onnx"), threads=2) == 2
    assert parallel_forwards(settings(tiny_model_dir, backend="onnx-int8"), threads=8) == 2
    assert parallel_forwards(settings(tiny_model_dir, backend="onnx"), threads=1) == 1
    assert parallel_forwards(settings(tiny_model_dir, backend="torch"), threads=2) == 1
    process = settings(tiny_model_dir, backend="onnx", forward_in="process")
    assert parallel_forwards(process, threads=2) == 1
    asked = settings(tiny_model_dir, backend="torch", parallel_forwards=3)
    assert parallel_forwards(asked, threads=2) == 3


def test_parallel_forwards_in_a_forward_process_is_refused(tiny_model_dir: Path) -> None:
    asked = settings(tiny_model_dir, parallel_forwards=2, forward_in="process")
    with pytest.raises(ValueError, match="forwards in a thread on the CPU"):
        parallel_forwards(asked, threads=2)


def test_a_gpu_replica_keeps_one_intra_op_thread(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert intra_op_threads(settings(tiny_model_dir), default=6) == 6
    assert intra_op_threads(settings(tiny_model_dir, torch_threads=3), default=6) == 3
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    on_gpu = settings(tiny_model_dir, device="cuda", torch_threads=16)
    assert intra_op_threads(on_gpu, default=6) == 1
    # A forward process (a GPU's default) is started with the threads it is given.
    started: list[int | None] = []
    monkeypatch.setattr(placement, "ForwardProcess", lambda load, threads: started.append(threads))
    placement.load_model(on_gpu.model_copy(update={"forward_in": "process"}), threads=1)
    assert started == [1]
