"""What a long text's answer must be, worked out apart from the service's own chunking code:
windows cut from the Hugging Face tokenizer's ids, each run alone through SentimentModel, and
their probabilities averaged with weights by window length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from service.model import SentimentModel
from tests.tiny_bert import build_tiny_bert


def build_sharp_bert(out_dir: Path) -> Path:
    """The tiny BERT with weights spread wide enough that its windows' answers differ by
    tenths, so a wrong weighting cannot pass for the right one."""
    return build_tiny_bert(out_dir, init_range=0.2)


def reference_windows(
    model_dir: Path, text: str, max_length: int, overlap: int, max_windows: int
) -> list[list[int]]:
    """[CLS] + a slice of the text's tokens + [SEP], stepping by `width - overlap`; past
    `max_windows`, the first `max_windows - 1` windows and one holding the text's end."""
    hf = AutoTokenizer.from_pretrained(model_dir)
    body: list[int] = hf(text, add_special_tokens=False)["input_ids"]
    width = max_length - 2
    starts = [0]
    while starts[-1] + width < len(body):
        starts.append(starts[-1] + width - overlap)
    if len(starts) > max_windows:
        starts = [*starts[: max_windows - 1], len(body) - width]
    return [[hf.cls_token_id, *body[s : s + width], hf.sep_token_id] for s in starts]


def weighted_mean(model: SentimentModel, rows: list[list[int]]) -> list[float]:
    """Each window in a forward of its own; the mean of their probabilities by length."""
    probs = np.stack([model.predict([row])[0].numpy() for row in rows]).astype(np.float64)
    weights = np.array([len(row) for row in rows], dtype=np.float64)
    mean: list[float] = ((probs * weights[:, None]).sum(axis=0) / weights.sum()).tolist()
    return mean


def contrasting_text(
    model: SentimentModel, model_dir: Path, sentences: list[str], max_length: int, overlap: int
) -> str:
    """A three-window text whose plain and length-weighted window means differ the most: the
    sentence the random model finds most positive repeated, then its most negative one. The
    tokenizer's vocabulary (and so each answer) varies from build to build; this choice does
    not let the two means coincide."""
    positive = [probs["positive"] for probs in model.classify(sentences)]
    high = sentences[int(np.argmax(positive))]
    low = sentences[int(np.argmin(positive))]
    best, gap = "", -1.0
    for n_high in range(1, 8):
        for n_low in range(1, 8):
            text = ", ".join([high] * n_high + [low] * n_low)
            rows = reference_windows(model_dir, text, max_length, overlap, max_windows=8)
            if len(rows) != 3 or len({len(row) for row in rows}) == 1:
                continue
            each = np.stack([model.predict([row])[0].numpy() for row in rows])
            plain = float(each[:, 0].mean())
            if (delta := abs(weighted_mean(model, rows)[0] - plain)) > gap:
                best, gap = text, delta
    return best
