"""A briefly trained tiny BERT and its ONNX exports, and texts to compare backends on."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, BertForSequenceClassification

from service.artifacts import CALIBRATION_FILE
from service.export import export_onnx
from service.model import SentimentModel
from tests.tiny_bert import SAMPLE_TEXT

AGREEMENT = 0.995  # same label as torch FP32 on at least this share of texts
POSITIVE_WORDS = set(" ".join(SAMPLE_TEXT[0::2]).replace(",", "").split())


def review_texts(count: int = 400, seed: int = 0) -> list[str]:
    """Reviews of 1 to 40 words drawn from the tiny vocabulary's sample texts."""
    words = " ".join(SAMPLE_TEXT).replace(",", "").split()
    rng = random.Random(seed)
    return [" ".join(rng.choices(words, k=rng.randint(1, 40))) for _ in range(count)]


def _fit(model_dir: Path, out: Path, steps: int = 30) -> None:
    """A few steps of training (label: mostly words of the positive samples or not), so the
    model's probabilities spread over (0, 1) the way a real model's do; the random tiny model
    answers ~0.5 for everything, which would prove no parity."""
    torch.manual_seed(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = BertForSequenceClassification.from_pretrained(model_dir)
    texts = review_texts(64, seed=101)
    share = [sum(w in POSITIVE_WORDS for w in t.split()) / len(t.split()) for t in texts]
    labels = torch.tensor([int(s >= 0.5) for s in share])
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        model(**batch, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval().save_pretrained(out)
    tokenizer.save_pretrained(out)


def build_exported(tiny_model_dir: Path, out: Path) -> Path:
    """The tiny BERT briefly trained into `out`, with its FP32 and INT8 ONNX exports; INT8
    smoothed on calibration texts drawn apart from the texts the tests compare on."""
    _fit(tiny_model_dir, out)
    (out / CALIBRATION_FILE).write_text("\n".join(review_texts(64, seed=7)) + "\n")
    lines = export_onnx(out, quantize="int8")
    assert lines[-1].endswith(f"smoothed on {out / CALIBRATION_FILE})"), lines
    return out


def _batches(model: SentimentModel, texts: list[str]) -> Iterator[list[list[int]]]:
    """Length-sorted batches of mixed sizes, the shapes the service's planner sends."""
    ids = sorted((e.ids for e in model.encode(texts)), key=len)
    sizes = [1, 3, 16, 64]
    start = 0
    while start < len(ids):
        size = sizes[start % len(sizes)]
        yield ids[start : start + size]
        start += size


def probabilities(path: Path, backend: str, texts: list[str]) -> np.ndarray:
    """`texts` through `backend`, in batches of mixed sizes."""
    model = SentimentModel.load(path, device="cpu", max_length=64, backend=backend)
    assert model.backend_name == backend
    return np.concatenate([model.predict(b).numpy() for b in _batches(model, texts)])
