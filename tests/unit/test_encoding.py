"""Packed token ids, and the fast encoder against the Hugging Face tokenizer it replaces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from service.encoding import TextEncoder, labels_of, pack


def test_pack_keeps_every_row_in_order() -> None:
    rows = [[5, 6, 7], [1], [], [2, 3]]
    packed = pack(rows)
    assert len(packed) == 4
    assert packed.ids.dtype == np.int32
    assert [packed.row(i).tolist() for i in range(4)] == rows
    assert packed.lengths().tolist() == [3, 1, 0, 2]


def test_encoder_matches_the_hf_tokenizer_and_flags_truncation(tiny_model_dir: Path) -> None:
    hf = AutoTokenizer.from_pretrained(tiny_model_dir)
    encoder = TextEncoder.load(tiny_model_dir, 16)
    texts = ["great phone", "broke after a day " * 10, "很好 ça", "ok", "\u200b"]
    packed, truncated = encoder.encode(texts)
    for i, text in enumerate(texts):
        assert packed.row(i).tolist() == hf(text, truncation=True, max_length=16)["input_ids"]
    assert truncated == [False, True, False, False, False]
    # The HF tokenizer's own calls are not changed by the encoder's truncation.
    assert len(hf("broke after a day " * 10)["input_ids"]) > 16


def test_labels_come_in_output_order(tiny_model_dir: Path) -> None:
    assert labels_of(tiny_model_dir) == ["negative", "positive"]
