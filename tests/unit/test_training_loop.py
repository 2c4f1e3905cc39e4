"""Fine-tuning a tiny random BERT end to end: loss falls, output loads in the service, resume."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

import training.loop as loop
from service.model import SentimentModel
from tests.tiny_bert import build_tiny_bert
from training.batches import TokenizedDataset, encode_texts
from training.data import Example
from training.loop import TrainConfig
from training.optim import linear_warmup_decay, resolve_amp
from training.pipeline import RunSpec, encode_rows, fine_tune, load_for_training

GOOD = ["great", "excellent", "lovely", "fast", "recommended", "good"]
BAD = ["terrible", "awful", "broken", "slow", "cheap", "damaged"]
THINGS = ["the phone", "this shop", "the screen", "delivery", "the battery", "the camera"]


def make_examples(n: int, seed: int = 0) -> list[Example]:
    """Reviews whose sentiment is carried by one adjective among neutral filler."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = i % 2
        word = rng.choice(GOOD if label else BAD)
        parts = [rng.choice(THINGS), "was", word, *rng.sample(THINGS, rng.randint(0, 3))]
        rows.append(Example(" ".join(parts) + f" {i}", label, "generated"))
    return rows


def write_csv(path: Path, rows: list[Example]) -> Path:
    lines = ["text,label"] + [f"{r.text},{'positive' if r.label else 'negative'}" for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    texts = [e.text for e in make_examples(200)]
    return build_tiny_bert(tmp_path_factory.mktemp("tiny") / "encoder", texts=texts, seed=1)


FAST = TrainConfig(
    max_steps=80, batch_size=16, lr=5e-3, warmup_ratio=0.1, seed=5, checkpoint_each_epoch=False
)


@pytest.fixture(scope="module")
def trained(tiny_encoder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("run") / "model"
    spec = RunSpec(model_path=tiny_encoder, out=out, cfg=FAST, max_length=32, sources=["gen"])
    metrics = fine_tune(spec, make_examples(400, seed=1), make_examples(100, seed=2))
    assert metrics is not None
    return {"out": out, "metrics": metrics}


def test_loss_goes_down_and_model_learns(trained: dict[str, Any]) -> None:
    m = trained["metrics"]
    assert m["train_steps"] == 80
    assert m["last_loss"] < 0.5 * m["first_loss"]
    assert m["accuracy"] >= 0.9
    assert set(m["per_source"]) == {"generated"}


def test_saved_directory_loads_in_the_service_and_classifies(trained: dict[str, Any]) -> None:
    out = trained["out"]
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    assert config["label2id"] == {"negative": 0, "positive": 1}
    assert (out / "tokenizer.json").is_file()
    assert not (out / "checkpoint").exists()  # removed after a finished run
    model = SentimentModel.load(out, device="cpu", dtype="auto", max_length=256)
    probs = model.classify(["the phone was excellent", "the phone was terrible"])
    assert [set(p) for p in probs] == [{"negative", "positive"}] * 2
    assert all(abs(sum(p.values()) - 1) < 1e-5 for p in probs)
    assert probs[0]["positive"] > 0.5 > probs[1]["positive"]


def test_metrics_and_model_card_are_written(trained: dict[str, Any]) -> None:
    out = trained["out"]
    saved = json.loads((out / "metrics.json").read_text())
    for key in ("accuracy", "macro_f1", "train_seconds", "hardware", "config", "train_rows"):
        assert key in saved
    card = (out / "README.md").read_text()
    assert "accuracy" in card and "Hardware" in card and "gen" in card


def test_rows_with_their_own_token_limit_are_cut_there(tiny_encoder: Path) -> None:
    _, tok = load_for_training(tiny_encoder)
    words = " ".join(GOOD * 10)
    rows = [Example(words, 1), Example(words, 0, max_tokens=24), Example("good", 1)]
    ids = encode_rows(tok, rows, max_length=12)
    assert [len(r) for r in ids] == [12, 24, len(encode_texts(tok, ["good"], 12)[0])]
    assert ids[1][:11] == ids[0][:11]  # the same text, in order, cut later


def _run(tiny_encoder: Path, cfg: TrainConfig, **kw: Any) -> tuple[loop.TrainResult, Any]:
    loop.seed_everything(cfg.seed)
    model, tok = load_for_training(tiny_encoder)
    rows = make_examples(96, seed=3)
    ds = TokenizedDataset(encode_texts(tok, [e.text for e in rows], 32), [e.label for e in rows])
    result = loop.train(model, ds, cfg, loop.DistContext(), int(tok.pad_token_id), **kw)
    return result, model


def test_same_seed_repeats_exactly(tiny_encoder: Path) -> None:
    cfg = TrainConfig(max_steps=4, batch_size=8, lr=1e-3, seed=9, checkpoint_each_epoch=False)
    first, _ = _run(tiny_encoder, cfg)
    second, _ = _run(tiny_encoder, cfg)
    assert first.losses == second.losses


def test_resume_continues_where_the_checkpoint_left_off(
    tiny_encoder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 96 rows / batch 8 = 12 micro-batches = 6 steps per epoch with accumulation 2, so a
    # checkpoint every 4 steps lands mid-epoch: resuming must skip the batches already seen.
    cfg = TrainConfig(max_steps=10, batch_size=8, grad_accum=2, lr=1e-3, seed=4, checkpoint_every=4)
    saved = loop.save_checkpoint

    def keep_copies(path: Path, state: dict[str, Any]) -> None:
        saved(path, state)
        shutil.copytree(path, tmp_path / f"step-{state['step']}")

    monkeypatch.setattr(loop, "save_checkpoint", keep_copies)
    full, full_model = _run(tiny_encoder, cfg, checkpoint_dir=tmp_path / "ckpt")
    assert full.steps == 10 and (tmp_path / "step-4").is_dir() and (tmp_path / "step-6").is_dir()
    resumed, resumed_model = _run(tiny_encoder, cfg, resume=tmp_path / "step-4")
    assert resumed.resumed_from_step == 4 and resumed.steps == 10
    assert resumed.losses == pytest.approx(full.losses[8:], rel=1e-5)
    for a, b in zip(full_model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_resume_rejects_a_checkpoint_from_other_data(tiny_encoder: Path, tmp_path: Path) -> None:
    cfg = TrainConfig(max_steps=2, batch_size=8, seed=4, checkpoint_every=2)
    _run(tiny_encoder, cfg, checkpoint_dir=tmp_path / "ckpt")
    state = loop.load_checkpoint(tmp_path / "ckpt")
    state["num_train"] = 5
    torch.save(state, tmp_path / "ckpt" / loop.CHECKPOINT_FILE)
    with pytest.raises(ValueError, match="made with 5 rows"):
        _run(tiny_encoder, cfg, resume=tmp_path / "ckpt")


def test_bf16_autocast_and_frozen_embeddings_run_on_cpu(tiny_encoder: Path) -> None:
    cfg = TrainConfig(max_steps=2, batch_size=8, amp="bf16", freeze_embeddings=True)
    result, model = _run(tiny_encoder, cfg)
    assert result.steps == 2 and all(torch.isfinite(torch.tensor(result.losses)))
    assert not model.get_input_embeddings().weight.requires_grad


def test_amp_resolution() -> None:
    cpu = torch.device("cpu")
    assert resolve_amp("auto", cpu) is None
    assert resolve_amp("off", cpu) is None
    assert resolve_amp("bf16", cpu) is torch.bfloat16
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        resolve_amp("fp16", cpu)


def test_linear_warmup_then_decay() -> None:
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = linear_warmup_decay(opt, warmup=4, total=10)
    rates = []
    for _ in range(10):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rates[:4] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert rates[4] == pytest.approx(1.0)
    assert rates[4:] == sorted(rates[4:], reverse=True) and rates[-1] > 0


def test_cli_train_writes_a_model(tiny_encoder: Path, tmp_path: Path) -> None:
    from training.__main__ import main

    data = write_csv(tmp_path / "reviews.csv", make_examples(120, seed=6))
    out = tmp_path / "out"
    args = ["train", "--model", str(tiny_encoder), "--data", str(data), "--out", str(out)]
    assert main([*args, "--max-steps", "3", "--batch-size", "8", "--max-length", "32"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 3 and metrics["test_rows"] == 12
