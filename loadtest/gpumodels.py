"""`python -m loadtest.gpumodels`: the model directories a GPU sizing run needs, without a hub.

  tiny       a 2-layer random BERT with the chosen tokenizer (a valid model directory; the
             benchmark's `--synthetic-bert-base` takes its tokenizer from it)
  bert-base  BERT-base size (12 layers, 768 wide, 110M parameters), random weights, same
             tokenizer, for the memory probe
The tokenizer comes from --tokenizer (the default model's, or the bundle's uncased BERT
vocabulary); without one, a small WordPiece vocabulary is trained on the spot.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

ID2LABEL = {0: "negative", 1: "positive"}
LABEL2ID = {"negative": 0, "positive": 1}


def _tokenizer(source: str) -> tuple[Any, str]:
    if source:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source, local_files_only=True), source
    # The tests' builder, imported by name: a test helper, not part of the typed packages.
    tiny = importlib.import_module("tests.tiny_bert")
    return tiny.build_tokenizer(tiny.SAMPLE_TEXT), "a tiny WordPiece vocabulary (more tokens)"


def build(work: Path, source: str, bert_base: bool) -> dict[str, Any]:
    """Write `work/tiny` (and `work/bert-base`); return what was made."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    tokenizer, origin = _tokenizer(source)
    vocab = max(len(tokenizer), 30522) if bert_base else len(tokenizer)
    small = BertConfig(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        pad_token_id=tokenizer.pad_token_id,
        id2label=ID2LABEL,
        label2id=LABEL2ID,
    )
    made: dict[str, Any] = {"tokenizer": origin, "vocab": len(tokenizer)}
    configs = {"tiny": small}
    if bert_base:
        configs["bert-base"] = BertConfig(
            vocab_size=vocab,
            pad_token_id=tokenizer.pad_token_id,
            id2label=ID2LABEL,
            label2id=LABEL2ID,
        )
    for name, config in configs.items():
        model = BertForSequenceClassification(config)
        model.save_pretrained(work / name)
        tokenizer.save_pretrained(work / name)
        made[name] = {
            "path": str(work / name),
            "parameters": sum(p.numel() for p in model.parameters()),
        }
    (work / "models.json").write_text(json.dumps(made, indent=2) + "\n")
    return made


def main(argv: list[str] | None = None) -> int:
    """Build the directories and print what was made."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.gpumodels", description=__doc__)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--tokenizer", default="", help="directory with a tokenizer (optional)")
    parser.add_argument("--bert-base", action="store_true", help="also the BERT-base-sized model")
    args = parser.parse_args(argv)
    print(json.dumps(build(args.work, args.tokenizer, args.bert_base), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
