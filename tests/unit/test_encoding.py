"""Packed token ids, and the fast encoder against the Hugging Face tokenizer it replaces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
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


THREADS_AFTER_BATCH = """
import os, sys
from pathlib import Path
from service.encoding import fast_tokenizer, tokenizer_threads_env
os.environ.update(tokenizer_threads_env(sys.argv[2] == "parallel"))
tokenizer = fast_tokenizer(Path(sys.argv[1]))
before = len(os.listdir("/proc/self/task"))
tokenizer.encode_batch(["a good phone, works well"] * 256)
print(len(os.listdir("/proc/self/task")) - before)
"""


@pytest.mark.parametrize("mode", ["parallel", "single"])
def test_tokenizer_thread_pool_follows_the_setting(tiny_model_dir: Path, mode: str) -> None:
    # A fresh process each: the Rust thread pool, once started, stays for the process's life.
    proc = subprocess.run(
        [sys.executable, "-c", THREADS_AFTER_BATCH, str(tiny_model_dir), mode],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    new_threads = int(proc.stdout.strip().splitlines()[-1])
    if mode == "single":
        assert new_threads == 0
    else:
        assert new_threads >= min(2, os.cpu_count() or 1) - 1 and new_threads >= 1
