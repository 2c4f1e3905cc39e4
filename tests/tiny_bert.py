"""Build a tiny random BERT classifier on disk, so tests run the real loading code."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)
from transformers import BertConfig, BertForSequenceClassification, PreTrainedTokenizerFast

SAMPLE_TEXT = [
    "great phone, fast delivery and the battery lasts for days",
    "broke after a day, terrible quality, want my money back",
    "the screen is bright and the camera takes lovely photos",
    "arrived late, the box was damaged and the charger missing",
    "works as described, good value for the price",
    "awful customer service, never buying from this shop again",
    "excellent sound, comfortable fit, highly recommended",
    "cheap plastic, stopped working within a week",
]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def wordpiece_vocab(texts: list[str]) -> dict[str, int]:
    """A WordPiece vocabulary built in a fixed order: the special tokens, every character (as
    a word start and as a continuation) and every whole word of `texts`, lowercased. (The
    `tokenizers` trainer breaks ties in hash order, so its vocabulary, and with it every tiny
    model's weights, changed from run to run.)"""
    normalizer = normalizers.BertNormalizer(lowercase=True)
    splitter = pre_tokenizers.BertPreTokenizer()
    words = sorted(
        {w for t in texts for w, _ in splitter.pre_tokenize_str(normalizer.normalize_str(t))}
    )
    chars = sorted({c for w in words for c in w})
    tokens = [*SPECIALS, *chars, *(f"##{c}" for c in chars), *(w for w in words if len(w) > 1)]
    return {token: i for i, token in enumerate(dict.fromkeys(tokens))}


def build_tokenizer(texts: list[str]) -> PreTrainedTokenizerFast:
    """A small uncased WordPiece tokenizer for `texts`, the same on every run."""
    tok = Tokenizer(models.WordPiece(wordpiece_vocab(texts), unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=128,
    )


def build_tiny_bert(
    out_dir: Path,
    texts: list[str] | None = None,
    seed: int = 0,
    max_positions: int = 128,
    init_range: float = 0.02,
) -> Path:
    """Save a random 2-layer BERT sequence classifier with labels negative/positive.

    With BERT's usual `init_range` every text gets nearly the same probabilities (0.4996 or
    so); 0.2 spreads them (0.28 to 0.72), for tests that must tell answers apart."""
    torch.manual_seed(seed)
    tokenizer = build_tokenizer(texts or SAMPLE_TEXT)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=max_positions,
        num_labels=2,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=init_range,
    )
    model = BertForSequenceClassification(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir
