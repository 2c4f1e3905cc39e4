"""ASCII texts through a BERT tokenizer without its normalizer: the same ids for less CPU.

BERT's normalizer (clean the text, space out CJK characters, strip accents, lowercase) keeps
an alignment for every character it touches: about 15 of the ~50 us a short review takes to
tokenize, one text a call (docs/benchmarks-history.md). On ASCII text it only drops control
characters, turns tab, newline and carriage return into spaces and lowercases, which
`str.translate` and `str.lower` do in about a microsecond. So an ASCII text skips it; the rest
of the pipeline (pre-tokenizer, WordPiece, [CLS] and [SEP]) is the tokenizer's own, and any
other text, or a tokenizer with another normalizer, takes the full path.
"""

from __future__ import annotations

import json

from tokenizers import Encoding, Tokenizer

# BERT's clean_text on ASCII: NUL and every other control character go, except tab, newline
# and carriage return, which it counts as whitespace and turns into spaces.
_CONTROL = [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]
CLEAN_TEXT = str.maketrans({**dict.fromkeys(map(chr, _CONTROL)), "\t": " ", "\n": " ", "\r": " "})


class AsciiPath:
    """A copy of a BERT-normalized tokenizer without its normalizer, fed pre-normalized ASCII."""

    def __init__(self, tokenizer: Tokenizer, clean_text: bool, lowercase: bool) -> None:
        self.tokenizer = Tokenizer.from_str(tokenizer.to_str())  # padding, truncation as set
        self.tokenizer.normalizer = None
        self.clean_text = clean_text
        self.lowercase = lowercase

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> AsciiPath | None:
        """The path for `tokenizer` (set its padding and truncation first), or None when its
        normalizer is not BERT's."""
        normalizer = json.loads(tokenizer.to_str()).get("normalizer") or {}
        if normalizer.get("type") != "BertNormalizer":
            return None
        return cls(tokenizer, bool(normalizer["clean_text"]), bool(normalizer["lowercase"]))

    def normalize(self, text: str) -> str:
        """What BERT's normalizer makes of an ASCII text."""
        if self.clean_text:
            text = text.translate(CLEAN_TEXT)
        return text.lower() if self.lowercase else text

    def encode(self, texts: list[str]) -> list[Encoding] | None:
        """`encode_batch_fast` of `texts` when every one is ASCII, else None."""
        if not all(text.isascii() for text in texts):
            return None
        return self.tokenizer.encode_batch_fast([self.normalize(text) for text in texts])
