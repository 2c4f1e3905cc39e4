"""`--resume` refuses settings that differ from the checkpoint's where they shape the run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_training_loop import make_examples
from training import loop
from training.batches import TokenizedDataset, encode_texts
from training.checkpoints import config_changes
from training.loop import TrainConfig
from training.pipeline import load_for_training
from training.strategy import SetupError

CFG = TrainConfig(max_steps=2, batch_size=8, lr=1e-3, seed=4, checkpoint_every=2)


def _run(encoder: Path, cfg: TrainConfig, **kw: Any) -> loop.TrainResult:
    loop.seed_everything(cfg.seed)
    model, tok = load_for_training(encoder)
    rows = make_examples(48, seed=3)
    ds = TokenizedDataset(encode_texts(tok, [e.text for e in rows], 32), [e.label for e in rows])
    return loop.train(
        model, ds, cfg, loop.DistContext(), int(tok.pad_token_id), progress=False, **kw
    )


@pytest.fixture(scope="module")
def checkpoint(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    ckpt = tmp_path_factory.mktemp("resume") / "checkpoint"
    _run(tiny_model_dir, CFG, checkpoint_dir=ckpt, setup={"max_length": 32, "model": "enc"})
    return ckpt


def test_changed_optimisation_settings_are_refused_with_old_and_new_values(
    tiny_model_dir: Path,
    checkpoint: Path,
) -> None:
    changed = replace(CFG, lr=1.0, batch_size=16, max_steps=8, weight_decay=0.5)
    with pytest.raises(SetupError) as info:
        _run(tiny_model_dir, changed, resume=checkpoint, setup={"max_length": 64, "model": "enc"})
    message = str(info.value)
    for part in (
        "--lr 0.001 (now 1.0)",
        "--batch-size 8 (now 16)",
        "--max-steps 2 (now 8)",
        "--weight-decay 0.01 (now 0.5)",
        "--max-length 32 (now 64)",
    ):
        assert part in message
    assert "--model" not in message and "--seed" not in message


def test_checkpoint_timing_may_change_on_resume(
    tiny_model_dir: Path,
    checkpoint: Path,
    tmp_path: Path,
) -> None:
    cfg = replace(CFG, checkpoint_every=0, checkpoint_each_epoch=False)
    result = _run(tiny_model_dir, cfg, resume=checkpoint, setup={"max_length": 32, "model": "enc"})
    assert result.resumed_from_step == 2 and result.steps == 2


def test_config_changes_rules() -> None:
    saved = {"epochs": 1, "max_steps": 10, "lr": 1e-3, "gradient_checkpointing": False}
    same_steps = {**saved, "epochs": 3, "gradient_checkpointing": True, "model": "new"}
    assert config_changes(saved, same_steps) == []  # epochs unused; model not recorded then
    by_epochs = {"epochs": 1, "max_steps": 0}
    assert config_changes(by_epochs, {"epochs": 2, "max_steps": 0}) == ["--epochs 1 (now 2)"]
