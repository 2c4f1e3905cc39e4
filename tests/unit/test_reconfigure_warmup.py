"""A model replica that recorded CUDA graphs (or built TensorRT shapes) for its forward budget
refuses a user_config raising that budget, and says why; a CPU replica takes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.model import SentimentModel
from service.modelcore import ModelCore


@pytest.fixture
def replica(tiny_model_dir: Path) -> Iterator[ModelCore]:
    settings = {"model_path": str(tiny_model_dir), "warmup": False, "device": "cpu"}
    tier = ModelCore({**settings, "batch": {"micro_batch_tokens": 1024}})
    yield tier
    tier._stop.set()
    tier.forwards.executor.shutdown()


def test_a_graphs_replica_refuses_a_larger_forward_budget(
    replica: ModelCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SentimentModel, "records_graphs", True)
    replica.reconfigure({"micro_batch_tokens": 2048, "max_batch_texts": 64})
    assert replica.batch.micro_batch_tokens == 1024 and replica.batch.max_batch_texts != 64
    assert replica.live.refused is not None
    assert "micro_batch_tokens 2048 is above the 1024" in replica.live.refused
    assert "CUDA graphs" in replica.live.refused
    replica.reconfigure({"micro_batch_tokens": 512, "max_batch_texts": 64})  # within: taken
    assert replica.live.refused is None and replica.batch.micro_batch_tokens == 512


def test_a_cpu_replica_takes_a_larger_forward_budget(replica: ModelCore) -> None:
    assert not replica.model.records_graphs
    replica.reconfigure({"micro_batch_tokens": 2048})
    assert replica.live.refused is None and replica.batch.micro_batch_tokens == 2048
