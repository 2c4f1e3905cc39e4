"""The in-process limit times a CUDA-graphs model replaying its graphs at every budget, as the
served replica runs them, not the first calls that run and record each shape."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import torch

from loadtest import corpus, limit
from service.backends import row_bucket
from service.batching import round_up
from service.encoding import TextEncoder
from service.model import encode_texts


class GraphsModel:
    """Answers instantly; notes, per call, whether CUDA graphs would run, record or replay."""

    records_graphs = True
    cuts_runs = False
    max_length = 64
    pad_multiple = 8
    device = torch.device("cpu")

    def __init__(self, model_dir: Path) -> None:
        self.encoder = TextEncoder.load(model_dir, self.max_length)
        self.calls: collections.Counter[tuple[int, int]] = collections.Counter()
        self.kinds: list[str] = []

    def encode(self, texts: list[str]) -> Any:
        return encode_texts(self.encoder, texts)

    def predict(self, batch: list[Any]) -> torch.Tensor:
        shape = (round_up(max(map(len, batch))), row_bucket(len(batch)))
        seen = self.calls[shape]
        self.calls[shape] += 1
        self.kinds.append("run" if seen == 0 else "record" if seen == 1 else "replay")
        return torch.full((len(batch), 2), 0.5)


def test_every_budget_is_timed_on_replayed_graphs(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = GraphsModel(tiny_model_dir)
    timed: list[list[str]] = []
    run_once = limit.run_once

    def noted(*args: Any, **kwargs: Any) -> float:
        start = len(model.kinds)
        rate = run_once(*args, **kwargs)
        timed.append(model.kinds[start:])
        return rate

    monkeypatch.setattr(limit, "run_once", noted)
    budgets = [256, 1024, 4096]
    limit.measure(model, corpus.load(None, 256), budgets)  # type: ignore[arg-type]
    # Per budget: two untimed runs, then the two timed (the first run_once is the warm-up's).
    per_budget = timed[1:]
    assert len(per_budget) == 4 * len(budgets)
    for i in range(len(budgets)):
        for kinds in per_budget[4 * i + 2 : 4 * i + 4]:
            assert set(kinds) == {"replay"}, (budgets[i], collections.Counter(kinds))
