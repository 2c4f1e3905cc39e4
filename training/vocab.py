"""Prune a Unigram (SentencePiece) vocabulary and the embedding table to the pieces we need.

The rule (`kept_ids`): keep the special tokens, every piece the training texts use, every
single-character piece, and the `top_n` most probable pieces of the Unigram model. Kept pieces
keep their order, so the specials stay first and ids stay small.

Why text still maps sensibly after pruning: Unigram tokenization picks the most probable
segmentation among the pieces it has. A training text's best segmentation uses only kept
pieces, so it tokenizes exactly as before. Any other text is split into kept pieces instead;
since every single character of the original vocabulary is kept, the worst case is one piece
per character, and only a character the original vocabulary lacked becomes `<unk>`, as it did
before.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from typing import Any

METASPACE = "\u2581"  # SentencePiece's word-start marker


class VocabError(ValueError):
    """The tokenizer file and the model's vocabulary do not agree."""


def kept_ids(
    pieces: Sequence[str],
    scores: Sequence[float],
    used: Iterable[int],
    special: Iterable[int],
    top_n: int,
) -> list[int]:
    """Sorted ids to keep: specials, used pieces, single characters, the `top_n` most probable.

    A single character counts with or without the word-start marker (`x` and `▁x`), so a
    character keeps its word-initial form too.
    """
    keep = set(special) | set(used)
    keep.update(i for i, p in enumerate(pieces) if len(p.removeprefix(METASPACE)) <= 1)
    by_score = sorted(range(len(pieces)), key=lambda i: (-scores[i], i))
    keep.update(by_score[:top_n])
    bad = [i for i in keep if not 0 <= i < len(pieces)]
    if bad:
        raise VocabError(f"ids outside the vocabulary of {len(pieces)}: {sorted(bad)[:5]}")
    return sorted(keep)


def unigram_pieces(tokenizer_json: dict[str, Any]) -> list[tuple[str, float]]:
    """(piece, score) pairs of a tokenizer.json whose model is Unigram."""
    model = tokenizer_json.get("model", {})
    if model.get("type") != "Unigram":
        raise VocabError(f"expected a Unigram tokenizer, got {model.get('type')!r}")
    return [(str(p), float(s)) for p, s in model["vocab"]]


def prune_tokenizer(tokenizer_json: dict[str, Any], keep: Sequence[int]) -> dict[str, Any]:
    """A copy of a Unigram tokenizer.json with only the `keep` pieces, renumbered in order.

    Every id the file names (the model's unk id, added tokens, the post-processor's special
    tokens) is renumbered too; one that was pruned away is an error.
    """
    vocab = unigram_pieces(tokenizer_json)
    new_id = {old: new for new, old in enumerate(keep)}
    out = copy.deepcopy(tokenizer_json)
    out["model"]["vocab"] = [[vocab[i][0], vocab[i][1]] for i in keep]

    def renumber(old: int, what: str) -> int:
        if old not in new_id:
            raise VocabError(f"{what} (id {old}) is not among the kept pieces")
        return new_id[old]

    unk = out["model"].get("unk_id")
    if unk is not None:
        out["model"]["unk_id"] = renumber(int(unk), "the unknown token")
    for token in out.get("added_tokens", []):
        token["id"] = renumber(int(token["id"]), f"added token {token['content']!r}")
    post = out.get("post_processor") or {}
    for name, special in (post.get("special_tokens") or {}).items():
        special["ids"] = [renumber(int(i), f"special token {name!r}") for i in special["ids"]]
    return out
