"""torch.compile for the torch backend (SENTIMENT_TORCH_COMPILE): the compiled model answers as
the eager one, rows padded for CUDA graphs never reach an answer, and the setting reaches the
model wherever its forwards run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from service.backends import BackendError, TorchBackend, compile_mode, row_bucket
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


def test_auto_means_cuda_graphs_for_torch_on_a_gpu_and_off_elsewhere() -> None:
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert compile_mode("auto", "torch", cuda) == "reduce-overhead"
    assert compile_mode("auto", "torch", cpu) == "off"
    assert compile_mode("auto", "tensorrt", cuda) == "off"
    # Graphs are per thread: none where the warm-up and the forwards do not share one.
    assert compile_mode("auto", "torch", cuda, one_thread=False) == "off"
    assert compile_mode("reduce-overhead", "torch", cuda, one_thread=False) == "reduce-overhead"
    assert compile_mode("default", "torch", cpu) == "default"  # an explicit mode is kept
    assert Settings().torch_compile == "auto"
    with pytest.raises(BackendError, match=r"unknown torch\.compile mode"):
        TorchBackend(torch.nn.Identity(), cpu, "auto")  # resolved before a backend is built


def test_auto_serves_eager_when_compiling_fails(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU image that cannot compile (no C compiler for Triton) still serves, eager."""
    import service.model

    def broken(module: torch.nn.Module, **_: object) -> object:
        def forward(**__: object) -> object:
            raise RuntimeError("no C compiler found")

        return forward

    on_gpu = {"auto": "default"}  # what compile_mode makes of auto there, a mode we can run
    monkeypatch.setattr(service.model, "compile_mode", lambda mode, *_: on_gpu.get(mode, mode))
    monkeypatch.setattr(torch, "compile", broken)
    eager = SentimentModel.load(tiny_model_dir, device="cpu")
    served = SentimentModel.load(tiny_model_dir, device="cpu", torch_compile="auto")
    assert "torch.compile default failed (RuntimeError), eager" in served.backend_reason
    ids = [e.ids for e in eager.encode(SAMPLE_TEXT)]
    torch.testing.assert_close(served.predict(ids), eager.predict(ids))
    with pytest.raises(RuntimeError, match="no C compiler"):  # an explicit mode fails loudly
        SentimentModel.load(tiny_model_dir, device="cpu", torch_compile="default").predict(ids)


def test_auto_records_no_graphs_where_forwards_share_threads(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch keeps CUDA graphs per thread: in a replica (warm-up on one thread, forwards on
    others) auto compiles nothing; an explicit mode still compiles there."""
    import service.model

    asked: list[bool] = []

    def as_on_a_gpu(mode: str, backend: str, _: torch.device, one_thread: bool = True) -> str:
        asked.append(one_thread)
        return compile_mode(mode, backend, torch.device("cuda"), one_thread)

    monkeypatch.setattr(service.model, "compile_mode", as_on_a_gpu)
    settings = Settings(model_path=tiny_model_dir, device="cpu", forward_in="thread")
    here = load_model(settings)
    assert isinstance(here, SentimentModel) and "torch.compile" not in here.backend_reason
    explicit = load_model(settings.model_copy(update={"torch_compile": "default"}))
    assert isinstance(explicit, SentimentModel)
    assert asked == [False, False]  # a replica's forwards do not share the warm-up's thread
    assert "torch.compile default" in explicit.backend_reason
