"""torch.compile for the torch backend (SENTIMENT_TORCH_COMPILE): the compiled model answers as
the eager one, rows padded for CUDA graphs never reach an answer, and the setting reaches the
model wherever its forwards run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from service.backends import BackendError, TorchBackend, row_bucket
from service.forwardproc import ForwardProcess
from service.model import ModelLoadError, SentimentModel
from service.placement import load_model
from service.settings import Settings
from tests.tiny_bert import SAMPLE_TEXT


def test_row_buckets_are_powers_of_two_and_one_and_a_half_times_them() -> None:
    assert [row_bucket(n) for n in range(1, 14)] == [1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 12, 16]
    for rows in range(1, 5000):
        bucket = row_bucket(rows)
        assert rows <= bucket < rows * 1.5 or bucket == rows
    assert len({row_bucket(n) for n in range(1, 1025)}) == 20  # two per doubling


def test_reduce_overhead_answers_as_eager_for_every_row_count(tiny_model_dir: Path) -> None:
    eager = SentimentModel.load(tiny_model_dir, device="cpu")
    compiled = SentimentModel.load(tiny_model_dir, device="cpu", torch_compile="reduce-overhead")
    assert isinstance(compiled.backend, TorchBackend) and compiled.backend.graphs
    assert "torch.compile reduce-overhead" in compiled.backend_reason
    assert not compiled.records_graphs  # CUDA graphs on a GPU only: no graph warm-up here
    ids = [e.ids for e in eager.encode(SAMPLE_TEXT)]
    for rows in (1, 5, 7, 8):  # 5 and 7 are padded to 6 and 8 rows, then cut back
        want, got = eager.predict(ids[:rows]), compiled.predict(ids[:rows])
        assert got.shape == want.shape == (rows, len(eager.labels))
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_compile_applies_to_the_torch_backend_only(tiny_model_dir: Path) -> None:
    with pytest.raises(ModelLoadError, match="SENTIMENT_BACKEND=torch"):
        SentimentModel.load(tiny_model_dir, device="cpu", backend="onnx", torch_compile="default")
    with pytest.raises(BackendError, match=r"unknown torch\.compile mode"):
        TorchBackend(torch.nn.Identity(), torch.device("cpu"), "max-speed")


def test_setting_reaches_the_model_in_a_thread_and_in_a_forward_process(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTIMENT_TORCH_COMPILE", "default")
    settings = Settings(model_path=tiny_model_dir, device="cpu", backend="torch")
    assert settings.torch_compile == "default"
    # torch.compile compiles at the first forward: loading alone is quick.
    here = load_model(settings.model_copy(update={"forward_in": "thread"}))
    assert isinstance(here, SentimentModel) and "torch.compile default" in here.backend_reason
    child = load_model(settings.model_copy(update={"forward_in": "process"}))
    try:
        assert isinstance(child, ForwardProcess)
        assert "torch.compile default" in child.backend_reason
        assert child.records_graphs is False
    finally:
        child.close()
    monkeypatch.setenv("SENTIMENT_TORCH_COMPILE", "fast")
    with pytest.raises(ValueError, match="torch_compile"):
        Settings()
