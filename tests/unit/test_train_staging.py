"""`train --overwrite` builds beside OUT and swaps it in only when everything is written: a
stopped run leaves the old model whole, and a finished one leaves nothing of the old model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import training.pipeline as pipeline
from tests.unit.test_training_loop import make_examples, write_csv
from training.__main__ import main
from training.staging import begin, staged, staging_dir


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_stopped_overwrite_leaves_the_old_model_whole_and_a_finished_one_replaces_it(
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    served = tmp_path / "served"
    shutil.copytree(tiny_model_dir, served)
    (served / "metrics.json").write_text('{"old": true}\n')
    (served / "README.md").write_text("old card\n")
    (served / "calibration.txt").write_text("the old model's training texts\n")
    (served / "onnx").mkdir()
    (served / "onnx" / "model.onnx").write_bytes(b"old export")
    before = _files(served)
    data = write_csv(tmp_path / "reviews.csv", make_examples(40, seed=6))
    args = ["train", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(served)]
    args += ["--overwrite", "--max-steps", "2", "--checkpoint-every", "1", "--lr", "1e-2"]

    def stop(*_: object, **__: object) -> list[int]:
        raise KeyboardInterrupt  # stands in for Ctrl-C or a kill after the weights are saved

    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "_predict_held_out", stop)
        with pytest.raises(KeyboardInterrupt):
            main(args)
    assert _files(served) == before
    staging = staging_dir(served)
    assert (staging / "model.safetensors").is_file()
    err = capsys.readouterr().err
    assert f"stopped: {served} is unchanged" in err
    assert f"--resume {staging / 'checkpoint'}" in err

    assert main(args) == 0
    assert not staging.exists() and not served.with_name("served.old").exists()
    assert not (served / "calibration.txt").exists() and not (served / "onnx").exists()
    assert (served / "model.safetensors").read_bytes() != before["model.safetensors"]
    assert json.loads((served / "metrics.json").read_text())["train_steps"] == 2
    assert "removing what a stopped run left" in capsys.readouterr().out


def test_begin_keeps_only_the_checkpoint_a_run_resumes_from(tmp_path: Path) -> None:
    out = tmp_path / "model"
    staging = staging_dir(out)
    (staging / "checkpoint").mkdir(parents=True)
    (staging / "checkpoint" / "training_state.pt").write_bytes(b"state")
    (staging / "model.safetensors").write_bytes(b"partial")
    assert begin(out, keep=staging / "checkpoint") == staging
    assert _files(staging) == {"checkpoint/training_state.pt": b"state"}
    begin(out)
    assert _files(staging) == {}


def test_a_failure_before_anything_is_written_leaves_no_staging_folder(tmp_path: Path) -> None:
    out = tmp_path / "model"
    with pytest.raises(RuntimeError), staged(out):
        raise RuntimeError("bad flags")
    assert not staging_dir(out).exists() and not out.exists()


def test_other_ranks_neither_clear_nor_swap(tmp_path: Path) -> None:
    out = tmp_path / "model"
    staging = staging_dir(out)
    staging.mkdir()
    (staging / "rank0.txt").write_text("rank 0's file")
    with staged(out, writer=False) as path:
        assert path == staging
    assert (staging / "rank0.txt").exists() and not out.exists()
