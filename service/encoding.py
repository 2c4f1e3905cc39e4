"""Texts to packed token ids: one tokenizer call for many texts, one flat array for all ids.

The ingress tokenizes every text of a handle call in one call of the Rust tokenizer (no
per-text Python wrapper objects) and ships the ids as two arrays, so the model replica never
touches per-text Python lists on the way in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import accumulate, chain
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from service.errors import DeadlineExceeded, InternalError, ServiceError

IdArray = npt.NDArray[np.int32]
# One batch job's results: probabilities [texts, labels] and a status per text.
Scored = tuple[npt.NDArray[np.float32], npt.NDArray[np.uint8]]
# A model call's answer: its Scored, and the seconds the call sat in an idle model replica
# waiting for company (`batch_wait_timeout_s`): no work, so the pace an ingress admits by
# leaves it out (service.admission.Pace).
CallResult = tuple[npt.NDArray[np.float32], npt.NDArray[np.uint8], float]
# Statuses: computed; its time budget ran out before its batch; its forward failed even alone.
OK, EXPIRED, FAILED = 0, 1, 2


@dataclass(frozen=True)
class Packed:
    """Token ids of n texts: text i is `ids[offsets[i]:offsets[i + 1]]`."""

    ids: IdArray
    offsets: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> npt.NDArray[np.int64]:
        """Tokens per text."""
        return np.diff(self.offsets)

    def row(self, i: int) -> IdArray:
        """The ids of text `i` (a view, not a copy)."""
        return self.ids[self.offsets[i] : self.offsets[i + 1]]


def pack(rows: list[list[int]]) -> Packed:
    """Pack id lists into one flat array with offsets (plain-Python sums and chains: numpy's
    cumsum and fromiter cost 4x as much on a request's one or few rows)."""
    offsets = np.array([0, *accumulate(map(len, rows))], dtype=np.int64)
    flat = np.array(list(chain.from_iterable(rows)), dtype=np.int32)
    return Packed(flat, offsets)


def concat(parts: list[Packed]) -> Packed:
    """Several packed id arrays as one, rows in order (one call from many requests)."""
    if len(parts) == 1:
        return parts[0]
    lengths = np.concatenate([p.lengths() for p in parts])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Packed(np.concatenate([p.ids for p in parts]), offsets)


def fast_tokenizer(model_dir: Path) -> Tokenizer:
    """A copy of a HF model directory's fast tokenizer (converted from vocab.txt if needed):
    settings changed on it (truncation, padding) never leak into the HF tokenizer's calls."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    return Tokenizer.from_str(hf.backend_tokenizer.to_str())


def tokenizer_threads_env(parallel: bool) -> dict[str, str]:
    """The environment that lets (or stops) the Rust tokenizer's batch encoding use a thread
    pool of one thread per core; set it before the process's first batch. Measured: four
    processes with 16-thread pools on 2 cores spent 1.45x the CPU per text of single-threaded
    ones on 32-text batches."""
    return {"TOKENIZERS_PARALLELISM": "true" if parallel else "false"}


def special_frame(tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """The special-token ids the tokenizer puts before and after a single text ([CLS] and
    [SEP] for BERT), as its post-processor places them."""
    encoding = tokenizer.encode("a")
    mask = encoding.special_tokens_mask
    head = next((i for i, special in enumerate(mask) if not special), len(mask))
    tail = next((i for i, special in enumerate(reversed(mask)) if not special), 0)
    return encoding.ids[:head], encoding.ids[len(mask) - tail :]


def unknown_id(tokenizer: Tokenizer) -> int | None:
    """The id a tokenizer gives what its vocabulary lacks ([UNK] for WordPiece), or None when
    it has none (byte-level BPE reads every text)."""
    model = json.loads(tokenizer.to_str())["model"]
    if model.get("unk_id") is not None:  # Unigram (SentencePiece, XLM-R)
        return int(model["unk_id"])
    token = model.get("unk_token")  # WordPiece, BPE
    return None if token is None else tokenizer.token_to_id(token)


def labels_of(model_dir: Path) -> list[str]:
    """Label names in output order, from the model's config.json."""
    id2label = json.loads((Path(model_dir) / "config.json").read_text())["id2label"]
    return [str(id2label[str(i)]) for i in range(len(id2label))]


def sequence_limit(model_dir: Path, max_length: int) -> int:
    """Tokens per text: `max_length`, or fewer when the model has fewer positions."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return min(max_length, int(config.get("max_position_embeddings", max_length)))


class TextEncoder:
    """A model directory's tokenizer, cutting every text at `max_length` tokens."""

    def __init__(self, tokenizer: Tokenizer, max_length: int) -> None:
        self.tokenizer = tokenizer
        self.max_length = max_length
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length)

    @classmethod
    def load(cls, model_dir: Path, max_length: int) -> TextEncoder:
        """The fast tokenizer of a HF model directory, cutting at `max_length` tokens."""
        return cls(fast_tokenizer(model_dir), sequence_limit(model_dir, max_length))

    def encode(self, texts: list[str]) -> tuple[Packed, list[bool]]:
        """Ids of every text (special tokens included), and whether each was cut."""
        encodings = self.tokenizer.encode_batch(texts)
        packed = pack([e.ids for e in encodings])
        return packed, [bool(e.overflowing) for e in encodings]


def status_error(status: npt.NDArray[np.uint8]) -> ServiceError:
    """The error of a request with a text not OK: 500 when one failed, else 504 (expired)."""
    if (status == FAILED).any():
        return InternalError()
    return DeadlineExceeded("deadline passed while queued")
