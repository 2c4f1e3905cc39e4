"""A bench stopped part way (a GPU machine's time ran out) keeps what it measured so far."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from loadtest import bench


class OutOfTime(Exception):
    """Stands in for the kill at the time limit."""


def test_a_bench_stopped_in_the_service_runs_keeps_the_limit(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def stopped(*args: Any, **kwargs: Any) -> Any:
        raise OutOfTime

    monkeypatch.setattr(bench, "serve_and_measure", stopped)
    # The bench sets these for the service it would start, and torch's thread count: undone
    # after the test, so the tests after it see what they would have.
    monkeypatch.setenv("SENTIMENT_BACKEND", "auto")
    monkeypatch.setenv("SENTIMENT_TORCH_COMPILE", "auto")
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    argv = ["--quick", "--no-overhead", "--model-path", str(tiny_model_dir), "--out", str(tmp_path)]
    with pytest.raises(OutOfTime):
        bench.main(argv)
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert doc["partial"] == "stopped before the service runs"
    assert doc["limit"]["texts_per_s"] > 0 and "runs" not in doc
    assert doc["model"]["records_graphs"] is False and doc["model"]["backend_reason"]
    assert (tmp_path / "bench.md").read_text().startswith("Hardware:")
