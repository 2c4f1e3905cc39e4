"""Activation checkpointing changes memory, not results; bad setups (strategy, flags, model
and output directories) fail clearly, before any training."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import training.loop as loop
from tests.unit.test_training_loop import make_examples, write_csv
from training.activations import is_checkpointing, set_activation_checkpointing
from training.batches import TokenizedDataset, encode_texts
from training.loop import TrainConfig
from training.pipeline import load_for_training
from training.strategy import SetupError, make_strategy


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    # A tiny model gains nothing from threads, and on a shared machine their spin-waits cost.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _run(model_dir: Path, cfg: TrainConfig) -> tuple[list[float], torch.nn.Module]:
    loop.seed_everything(cfg.seed)
    model, tok = load_for_training(model_dir)
    rows = make_examples(48, seed=3)
    ds = TokenizedDataset(encode_texts(tok, [e.text for e in rows], 32), [e.label for e in rows])
    result = loop.train(model, ds, cfg, loop.DistContext(), int(tok.pad_token_id), progress=False)
    return result.losses, model


@pytest.mark.parametrize("freeze_layers", [0, 1], ids=["all-layers", "lowest-frozen"])
def test_checkpointing_gives_the_same_losses_with_dropout_on(
    tiny_model_dir: Path, freeze_layers: int
) -> None:
    # Dropout is on (BERT's 0.1): equal losses mean the recompute replayed the same masks.
    # With the lowest layer frozen, the checkpointed layers' input needs no grad: the
    # non-reentrant variant must still train them.
    cfg = TrainConfig(
        max_steps=3, batch_size=8, grad_accum=2, lr=1e-3, seed=7, freeze_layers=freeze_layers
    )
    plain, plain_model = _run(tiny_model_dir, cfg)
    cfg.gradient_checkpointing = True
    recomputed, model = _run(tiny_model_dir, cfg)
    assert model.config.hidden_dropout_prob > 0 and is_checkpointing(model)
    assert not is_checkpointing(plain_model)
    assert recomputed == pytest.approx(plain, rel=1e-5, abs=1e-6)
    for a, b in zip(plain_model.parameters(), model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    before = load_for_training(tiny_model_dir)[0].bert.encoder.layer[-1].output.dense.weight
    assert not torch.equal(model.bert.encoder.layer[-1].output.dense.weight, before)


def test_checkpointing_can_be_turned_off_again(tiny_model_dir: Path) -> None:
    model, _ = load_for_training(tiny_model_dir)
    set_activation_checkpointing(model, True)
    assert is_checkpointing(model)
    set_activation_checkpointing(model, False)
    assert not is_checkpointing(model)


def test_checkpointing_a_model_without_support_is_a_clear_error() -> None:
    with pytest.raises(SetupError, match="no gradient checkpointing support"):
        set_activation_checkpointing(torch.nn.Linear(2, 2), True)
    set_activation_checkpointing(torch.nn.Linear(2, 2), False)  # off is always fine


def test_fsdp_without_torchrun_is_a_clear_error(tiny_model_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(SetupError, match="torchrun"):
        make_strategy("fsdp", loop.DistContext(), None)
    with pytest.raises(SetupError, match="unknown --strategy"):
        make_strategy("zero3", loop.DistContext(), None)
    from training.__main__ import main

    data = write_csv(tmp_path / "reviews.csv", make_examples(40, seed=6))
    args = ["train", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(tmp_path)]
    assert main([*args, "--strategy", "fsdp", "--max-steps", "1"]) == 2


def test_bad_training_flags_stop_before_any_work(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Usage errors naming the flag (a zero --grad-accum divided by zero in the loop), and
    a model that cannot do what a flag asks is an error line, not a traceback."""
    from training.__main__ import main

    data = write_csv(tmp_path / "reviews.csv", make_examples(40, seed=6))
    out = tmp_path / "out"
    args = ["train", "--model", str(tiny_model_dir), "--data", str(data), "--out", str(out)]
    for flag, value in [("--grad-accum", "0"), ("--test-fraction", "1"), ("--lr", "-1")]:
        with pytest.raises(SystemExit) as info:
            main([*args, flag, value])
        assert info.value.code == 2
        assert f"argument {flag}: expected" in capsys.readouterr().err
    assert main([*args, "--freeze-layers", "99", "--max-steps", "1"]) == 2
    assert "cannot freeze 99 layers: the encoder has 2 layers" in capsys.readouterr().err
    assert not (out / "config.json").exists()


def test_a_model_or_out_directory_that_cannot_serve_stops_before_training(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without vocabulary files transformers builds a tokenizer of the special tokens alone,
    and training went on with every word unknown; an --out that cannot be made failed only
    once training was done."""
    from training.__main__ import main

    data = write_csv(tmp_path / "reviews.csv", make_examples(40, seed=6))
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_dir / name, bare / name)
    out = tmp_path / "out"
    train = ["train", "--data", str(data), "--max-steps", "1"]
    assert main([*train, "--model", str(bare), "--out", str(out)]) == 2
    assert "no tokenizer files there" in capsys.readouterr().err
    assert not out.exists()
    taken = tmp_path / "taken"
    taken.write_text("a file")
    assert main([*train, "--model", str(tiny_model_dir), "--out", str(taken)]) == 2
    assert f"--out {taken}: cannot make a directory there" in capsys.readouterr().err


def test_a_model_in_out_is_replaced_only_when_asked(
    tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--out models/default` replaced the model `make serve` serves, without a word."""
    from training.__main__ import main

    data = write_csv(tmp_path / "reviews.csv", make_examples(40, seed=6))
    served = tmp_path / "served"
    shutil.copytree(tiny_model_dir, served)
    weights = (served / "model.safetensors").read_bytes()
    train = ["train", "--model", str(tiny_model_dir), "--data", str(data), "--max-steps", "1"]
    assert main([*train, "--out", str(served)]) == 2
    assert f"--out {served} already holds a model" in capsys.readouterr().err
    assert (served / "model.safetensors").read_bytes() == weights
    assert main([*train, "--out", str(served), "--lr", "1e-2", "--overwrite"]) == 0
    assert (served / "model.safetensors").read_bytes() != weights
