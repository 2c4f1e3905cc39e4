"""Long texts as overlapping windows of token ids, and a text's answer from its windows'.

A review puts its verdict at the end as often as at the start, so a text longer than the
sequence length is not cut: its tokens are split into windows of that length that overlap a
little, each framed by the special tokens the tokenizer adds ([CLS] ... [SEP] for BERT). Each
window is one row of a model call, batched, budgeted and timed like any text; the model tier
never learns which rows belong to one text. The ingress averages a text's window
probabilities with weights by window length, so a short last window counts less than a
full one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from service.asciipath import AsciiPath
from service.encoding import (
    Packed,
    fast_tokenizer,
    pack,
    sequence_limit,
    special_frame,
    unknown_id,
)

Probs = npt.NDArray[np.float32]
# Past this many characters a request is tokenized on a worker thread: a 20,000-character
# review takes milliseconds, and the Rust tokenizer releases the GIL meanwhile.
OFFLOAD_CHARS = 4096
Span = tuple[int, int]  # [begin, end) of a text's tokens, special tokens not counted


@dataclass(frozen=True)
class Windowed:
    """One request's texts as model rows: text i owns the next `windows[i]` rows."""

    packed: Packed  # one row per window, in text order
    windows: npt.NDArray[np.int64]  # rows per text, each at least 1
    truncated: list[bool]  # part of the text was never read
    unknown: list[float]  # share of the text's tokens the vocabulary lacks ([UNK])
    tokenize_s: float = 0.0

    @property
    def rows(self) -> int:
        """Rows (windows) the request sends: what admission and the batch limits count."""
        return len(self.packed)


def window_spans(
    tokens: int, width: int, overlap: int, max_windows: int
) -> tuple[list[Span], bool]:
    """Spans of at most `width` tokens covering `tokens`, each starting `width - overlap`
    after the previous, and whether some tokens are left out.

    Past `max_windows`, the first `max_windows - 1` windows are kept and the last one covers
    the text's final `width` tokens: the middle is dropped rather than the end, where reviews
    often give their verdict. With one window the text is simply cut (as truncation does).
    """
    if not 0 <= overlap < width:
        raise ValueError(f"overlap ({overlap}) must be at least 0 and below the width ({width})")
    if tokens <= width:
        return [(0, tokens)], False
    step = width - overlap
    needed = 1 + -(-(tokens - width) // step)
    if needed <= max_windows:
        return [(k * step, min(k * step + width, tokens)) for k in range(needed)], False
    if max_windows == 1:
        return [(0, width)], True
    head = [(k * step, k * step + width) for k in range(max_windows - 1)]
    return [*head, (tokens - width, tokens)], True


def aggregate(
    probs: Probs, lengths: npt.NDArray[np.int64], windows: npt.NDArray[np.int64]
) -> Probs:
    """Each text's probabilities: the mean of its windows' rows weighted by their lengths in
    tokens. Texts of one window keep their row as it came."""
    if len(windows) == len(probs):
        return probs
    starts = np.concatenate(([0], np.cumsum(windows)[:-1]))
    weights = lengths.astype(np.float64)
    sums = np.add.reduceat(probs * weights[:, None], starts, axis=0)
    means: Probs = (sums / np.add.reduceat(weights, starts)[:, None]).astype(np.float32)
    return means


class WindowEncoder:
    """Tokenizes texts into windows of at most `max_length` tokens, special tokens included.

    `max_windows=1` is plain truncation: the first `max_length` tokens, flagged when cut.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        max_length: int,
        max_windows: int = 1,
        overlap: int | None = None,
    ) -> None:
        tokenizer.no_padding()
        tokenizer.no_truncation()  # the whole text: the last window needs its end
        self.tokenizer = tokenizer
        # The same ids for most reviews, for a third of the CPU.
        self.ascii = AsciiPath.of(tokenizer)
        self.max_length = max_length
        self.max_windows = max_windows
        # Where the tokenizer puts its special tokens around a single text, e.g. 1 before and
        # 1 after for BERT: every window gets the same frame.
        head, tail = special_frame(tokenizer)
        self.head, self.tail = len(head), len(tail)
        self.unknown_id = unknown_id(tokenizer)
        self.width = max_length - self.head - self.tail
        self.overlap = max_length // 8 if overlap is None else overlap
        window_spans(0, self.width, self.overlap, max_windows)  # fail now, not per request

    @classmethod
    def load(
        cls, model_dir: Path, max_length: int, max_windows: int = 1, overlap: int | None = None
    ) -> WindowEncoder:
        """The encoder of a HF model directory; `max_length` shrinks to the model's positions."""
        limit = sequence_limit(model_dir, max_length)
        return cls(fast_tokenizer(model_dir), limit, max_windows, overlap)

    @classmethod
    def check(
        cls, model_dir: Path, max_length: int, max_windows: int, overlap: int | None
    ) -> str | None:
        """Why these window settings cannot serve this model, or None: caught at start, not
        in every replica that loads it (Ray retries each, loading the model every time)."""
        try:
            cls.load(model_dir, max_length, max_windows, overlap)
        except ValueError as exc:
            limit = sequence_limit(model_dir, max_length)
            cut = f" (max_seq_len {max_length} cut to the model's {limit} positions)"
            return f"window_overlap: {exc}{cut if limit < max_length else ''}"
        return None

    def encode(self, texts: list[str]) -> Windowed:
        """All windows of `texts`, packed in text order."""
        t0 = time.perf_counter()
        rows: list[list[int]] = []
        windows: list[int] = []
        truncated: list[bool] = []
        unknown: list[float] = []
        for ids in self._ids(texts):
            unknown.append(self._unknown_share(ids))
            if len(ids) <= self.max_length:
                rows.append(ids)
                windows.append(1)
                truncated.append(False)
                continue
            end = len(ids) - self.tail
            head, body, tail = ids[: self.head], ids[self.head : end], ids[end:]
            spans, cut = window_spans(len(body), self.width, self.overlap, self.max_windows)
            rows.extend(head + body[b:e] + tail for b, e in spans)
            windows.append(len(spans))
            truncated.append(cut)
        packed = pack(rows)
        counts = np.array(windows, dtype=np.int64)
        return Windowed(packed, counts, truncated, unknown, time.perf_counter() - t0)

    def _unknown_share(self, ids: list[int]) -> float:
        """Share of a text's tokens, special tokens not counted, that are the unknown token:
        a text the model cannot read (Chinese to an English vocabulary) still gets a
        confident label, and this says so. A text the tokenizer drops whole (only combining
        marks, only U+FFFD) reads 1.0: the label is the model's verdict on an empty text."""
        tokens = len(ids) - self.head - self.tail
        if tokens <= 0:
            return 1.0
        if self.unknown_id is None:
            return 0.0
        return ids.count(self.unknown_id) / tokens

    def _ids(self, texts: list[str]) -> list[list[int]]:
        """Every text's ids, special tokens included: word by word where the ASCII path takes
        it, the others in one call of the tokenizer."""
        found = [self.ascii.ids(text) for text in texts] if self.ascii else [None] * len(texts)
        rest = [text for text, ids in zip(texts, found, strict=True) if ids is None]
        # encode_batch_fast skips the character offsets nothing here reads: the same ids for
        # 17% less CPU per short text (118 against 147 us, one text a call, on 2 slow cores).
        full = iter(self.tokenizer.encode_batch_fast(rest) if rest else ())
        return [next(full).ids if ids is None else ids for ids in found]

    async def encode_async(self, texts: list[str]) -> Windowed:
        """`encode`, on a worker thread when the texts are long enough to stall the event loop."""
        if sum(map(len, texts)) <= OFFLOAD_CHARS:
            return self.encode(texts)
        return await asyncio.to_thread(self.encode, texts)
