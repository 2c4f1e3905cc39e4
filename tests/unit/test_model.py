"""The model loader on a real (tiny, random) BERT directory saved to disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from service.model import ModelLoadError, SentimentModel, check_model_dir, resolve_dtype


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path) -> SentimentModel:
    return SentimentModel.load(tiny_model_dir, device="cpu", max_length=32)


def test_labels_come_from_id2label(model: SentimentModel) -> None:
    assert model.labels == ["negative", "positive"]
    assert model.name == "tiny"
    assert model.dtype == torch.float32  # auto on CPU


def test_probabilities_are_a_distribution_per_text(model: SentimentModel) -> None:
    out = model.classify(["great phone", "broke after a day", "ok"])
    assert len(out) == 3
    for probs in out:
        assert set(probs) == {"negative", "positive"}
        assert sum(probs.values()) == pytest.approx(1.0, abs=1e-5)


def test_padding_does_not_change_answers(model: SentimentModel) -> None:
    short = model.encode(["great"])[0].ids
    long = model.encode(["the battery lasts for days and the screen is bright"])[0].ids
    alone = model.predict([short])
    padded = model.predict([short, long])
    torch.testing.assert_close(alone[0], padded[0], atol=1e-5, rtol=1e-4)


def test_long_texts_are_cut_and_flagged(model: SentimentModel) -> None:
    short, long = model.encode(["great phone", "great phone " * 50])
    assert not short.truncated
    assert long.truncated and len(long.ids) == 32


def test_missing_directory_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="the default model with `make model`"):
        check_model_dir(tmp_path / "nope")
    # The README's `SENTIMENT_MODEL_PATH=models/multilingual make serve`, before the build.
    with pytest.raises(ModelLoadError, match="`make model-multilingual`"):
        check_model_dir(tmp_path / "models" / "multilingual")


def test_directory_without_labels_is_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_model_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    del config["id2label"]
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="id2label"):
        SentimentModel.load(broken, device="cpu")


def test_directory_without_vocabulary_is_refused(tiny_model_dir: Path, tmp_path: Path) -> None:
    """transformers would build a tokenizer of the special tokens alone from the config."""
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "tokenizer_config.json"):
        shutil.copy(tiny_model_dir / name, bare / name)
    with pytest.raises(ModelLoadError, match="no tokenizer files"):
        check_model_dir(bare)
    shutil.copy(tiny_model_dir / "tokenizer.json", bare / "tokenizer.json")
    check_model_dir(bare)


def test_dtype_auto_is_fp16_on_gpu_fp32_on_cpu() -> None:
    assert resolve_dtype("auto", torch.device("cuda")) == torch.float16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        resolve_dtype("int4", torch.device("cpu"))


def test_one_pass_encoding_matches_plain_truncation(
    model: SentimentModel, tiny_model_dir: Path
) -> None:
    hf = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = ["great phone " * k for k in range(1, 25)] + ["ok", "broke after a day"]
    encoded = model.encode(texts)
    for text, enc in zip(texts, encoded, strict=True):
        cut = hf(text, truncation=True, max_length=32)["input_ids"]
        whole = hf(text)["input_ids"]
        assert enc.ids == cut
        assert enc.truncated == (len(whole) > 32)
    assert any(e.truncated for e in encoded) and not all(e.truncated for e in encoded)


def test_pickle_only_weights_are_refused_unless_allowed(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir, pickled)
    model = SentimentModel.load(tiny_model_dir, device="cpu").model
    for weights in pickled.glob("*.safetensors"):
        weights.unlink()
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    with pytest.raises(ModelLoadError, match="SENTIMENT_ALLOW_PICKLE"):
        check_model_dir(pickled)
    with pytest.raises(ModelLoadError, match="pickle weights"):
        SentimentModel.load(pickled, device="cpu")
    loaded = SentimentModel.load(pickled, device="cpu", allow_pickle=True)
    assert loaded.classify(["great"])[0].keys() == {"negative", "positive"}
