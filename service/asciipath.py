"""ASCII texts through a BERT tokenizer word by word in Python: the same ids for a third of
the CPU.

A BERT tokenizer (BertNormalizer, BertPreTokenizer, WordPiece) splits a text into words and
cuts each word into pieces on its own, so a word's pieces never depend on its neighbours. On
ASCII text its normalizer only drops control characters, turns tab, newline and carriage
return into spaces and lowercases (`str.translate`, `str.lower`), and its pre-tokenizer only
splits at whitespace and isolates each punctuation character (one regular expression). So an
ASCII text is normalized and split here, each word's ids are looked up in a cache filled by the
tokenizer's own WordPiece, and the special tokens go around them. The Rust call this skips
costs ~50-90 us a review on a slow core (the wrapper objects, alignments and offsets it builds
for every text); the lookups ~15-35 (docs/benchmarks.md, "Tokenizing word by word").

A text holding an added token's content (`[SEP]`, any case), any other text, and any tokenizer
with another pipeline take the tokenizer's full path.
"""

from __future__ import annotations

import json
import re
import string

from tokenizers import Tokenizer

from service.encoding import special_frame

# BERT's clean_text on ASCII: NUL and every other control character go, except tab, newline
# and carriage return, which it counts as whitespace and turns into spaces.
_CONTROL = [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F]
CLEAN_TEXT = str.maketrans({**dict.fromkeys(map(chr, _CONTROL)), "\t": " ", "\n": " ", "\r": " "})
# BertPreTokenizer on ASCII: words end at whitespace (Rust's, which is not Python's `\s`: no
# \x1c-\x1f) and every punctuation character is a word of its own. Uncleaned text keeps its
# other control characters inside words, as the Rust side does.
_PUNCT = re.escape(string.punctuation)
WORDS = re.compile(rf"[^ \t\n\x0b\x0c\r{_PUNCT}]+|[{_PUNCT}]")
# Distinct words kept per process (~170 bytes each): 40,000 real reviews held 57,000.
CACHED_WORDS = 1 << 16


class AsciiPath:
    """Ids of ASCII texts, word by word from a cache, for a BERT tokenizer."""

    def __init__(self, tokenizer: Tokenizer, clean_text: bool, lowercase: bool) -> None:
        self.model = tokenizer.model  # WordPiece: one word's pieces
        self.clean_text = clean_text
        self.lowercase = lowercase
        self.head, self.tail = special_frame(tokenizer)  # [CLS] ... [SEP]
        added = tokenizer.get_added_tokens_decoder().values()
        self.added = [token.content.lower() for token in added if token.content]
        self.words: dict[str, list[int]] = {}

    @classmethod
    def of(cls, tokenizer: Tokenizer) -> AsciiPath | None:
        """The path for `tokenizer` (no padding, no truncation: the caller windows long
        texts), or None when its pipeline is not BERT's."""
        pipeline = json.loads(tokenizer.to_str())
        normalizer = pipeline.get("normalizer") or {}
        pre_tokenizer = pipeline.get("pre_tokenizer") or {}
        if (
            normalizer.get("type") != "BertNormalizer"
            or pre_tokenizer.get("type") != "BertPreTokenizer"
            or pipeline["model"].get("type") != "WordPiece"
        ):
            return None
        return cls(tokenizer, bool(normalizer["clean_text"]), bool(normalizer["lowercase"]))

    def normalize(self, text: str) -> str:
        """What BERT's normalizer makes of an ASCII text."""
        if self.clean_text:
            text = text.translate(CLEAN_TEXT)
        return text.lower() if self.lowercase else text

    def ids(self, text: str) -> list[int] | None:
        """The ids of `text`, special tokens included, or None when it needs the full path."""
        if not text.isascii():
            return None
        normal = self.normalize(text)
        lowered = normal if self.lowercase else normal.lower()
        if any(token in lowered for token in self.added):
            return None  # the tokenizer matches added tokens before it splits words
        ids = list(self.head)
        cached = self.words.get
        for word in WORDS.findall(normal):
            pieces = cached(word)
            if pieces is None:
                pieces = self._pieces(word)
            ids += pieces
        ids += self.tail
        return ids

    def _pieces(self, word: str) -> list[int]:
        """One word's WordPiece ids, kept for next time."""
        if len(self.words) >= CACHED_WORDS:
            self.words.clear()  # rare; the common words are back within a few requests
        pieces = self.words[word] = [token.id for token in self.model.tokenize(word)]
        return pieces
