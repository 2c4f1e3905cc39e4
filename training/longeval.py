"""Score long texts the way the service serves them: token windows, length-weighted mean.

The service splits a text longer than `max_seq_len` tokens into overlapping windows and
averages the windows' probabilities weighted by window length (`service.chunking`). The build
evaluates full-length reviews with that very code in-process, with the service's defaults, so
the figure in the model card is the figure a caller gets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from service.chunking import WindowEncoder, aggregate
from service.settings import Settings
from training.batches import TokenizedDataset
from training.loop import predict


@dataclass(frozen=True)
class ChunkedResult:
    """Labels of long texts read in windows, and how they were read."""

    preds: list[int]
    windows: list[int]  # windows each text used
    max_seq_len: int  # tokens per window, special tokens included
    overlap: int
    max_windows: int

    def describe(self) -> dict[str, Any]:
        """The reading rule and its cost, for metrics.json."""
        return {
            "texts": len(self.preds),
            "max_seq_len": self.max_seq_len,
            "overlap": self.overlap,
            "max_windows": self.max_windows,
            "mean_windows": round(sum(self.windows) / max(len(self.windows), 1), 2),
            "rule": "window probabilities averaged with weights by window length",
        }


def serving_window() -> tuple[int, int, int | None]:
    """The service's default (max_seq_len, max_windows, overlap or None) for long texts."""
    fields = Settings.model_fields
    return (
        int(fields["max_seq_len"].default),
        int(fields["max_windows"].default),
        fields["window_overlap"].default,
    )


def chunked_predictions(
    model: torch.nn.Module,
    model_dir: Path,
    texts: Sequence[str],
    device: torch.device,
    pad_id: int,
    batch_size: int = 32,
    amp: str = "auto",
) -> ChunkedResult:
    """Predicted labels for `texts` read in the service's default windows.

    `model_dir` supplies the tokenizer and the position limit, as when the service loads it;
    `amp` is the run's, so long reviews are scored in the precision the rest was.
    """
    max_seq_len, max_windows, overlap = serving_window()
    encoder = WindowEncoder.load(model_dir, max_seq_len, max_windows, overlap)
    windowed = encoder.encode(list(texts))
    packed = windowed.packed
    rows = [packed.row(i).tolist() for i in range(len(packed))]
    ds = TokenizedDataset(rows, [0] * len(rows))
    probs = predict(model, ds, device, pad_id, batch_size, amp=amp, show_progress=False)
    per_text = aggregate(np.asarray(probs, dtype=np.float32), packed.lengths(), windowed.windows)
    return ChunkedResult(
        preds=[int(p[1] > p[0]) for p in per_text],
        windows=[int(w) for w in windowed.windows],
        max_seq_len=encoder.max_length,
        overlap=encoder.overlap,
        max_windows=encoder.max_windows,
    )
