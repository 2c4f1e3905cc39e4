"""Tokenized rows in batches of similar length, padded per batch (training/data.py reads,
cleans and splits the rows)."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence, Sized
from typing import Any, Protocol

import torch
from torch.utils.data import Dataset, Sampler


class TextTokenizer(Protocol):
    """The slice of a Hugging Face tokenizer that `encode_texts` uses."""

    def __call__(self, text: list[str], **kwargs: Any) -> Any: ...


def encode_texts(
    tokenizer: TextTokenizer, texts: Sequence[str], max_length: int
) -> list[list[int]]:
    """Token ids with special tokens, cut at `max_length`; no padding (that is per batch)."""
    enc = tokenizer(
        list(texts),
        truncation=True,
        max_length=max_length,
        return_attention_mask=False,
        return_token_type_ids=False,
    )
    return [list(ids) for ids in enc["input_ids"]]


class TokenizedDataset(Dataset[tuple[list[int], int]]):
    """Pre-tokenized rows; tokenizing once up front keeps the training loop lean."""

    def __init__(self, ids: list[list[int]], labels: list[int]) -> None:
        if len(ids) != len(labels):
            raise ValueError("ids and labels differ in length")
        self.ids = ids
        self.labels = labels

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[list[int], int]:
        return self.ids[index], self.labels[index]

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.ids]


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Batches of similar length drawn from an index sampler (e.g. a DistributedSampler).

    The inner sampler decides which rows this rank sees and in what random order; we cut that
    order into mega-chunks of `batch_size * group_factor`, sort each chunk by length and slice
    it into batches, then shuffle the batches. Padding waste drops to a few tokens per row while
    each batch still mixes rows from across the data.
    """

    def __init__(
        self,
        sampler: Sampler[Any],  # yields row indices (DistributedSampler is typed by rows)
        lengths: Sequence[int],
        batch_size: int,
        seed: int = 0,
        group_factor: int = 50,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch size must be at least 1")
        self.sampler = sampler
        self.lengths = lengths
        self.batch_size = batch_size
        self.seed = seed
        self.group_factor = group_factor
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Reshuffle for a new epoch, and pass the epoch on to a DistributedSampler."""
        self.epoch = epoch
        set_inner = getattr(self.sampler, "set_epoch", None)
        if callable(set_inner):
            set_inner(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        order = list(self.sampler)
        chunk = self.batch_size * self.group_factor
        batches: list[list[int]] = []
        for start in range(0, len(order), chunk):
            part = sorted(order[start : start + chunk], key=lambda i: self.lengths[i])
            batches.extend(
                part[i : i + self.batch_size] for i in range(0, len(part), self.batch_size)
            )
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(batches)
        return iter(batches)

    def __len__(self) -> int:
        assert isinstance(self.sampler, Sized)
        return math.ceil(len(self.sampler) / self.batch_size)


class PadCollator:
    """Pad a batch to its longest row (rounded up to a multiple), not to the global maximum."""

    def __init__(self, pad_id: int, multiple: int = 8) -> None:
        self.pad_id = pad_id
        self.multiple = multiple

    def __call__(self, batch: Sequence[tuple[list[int], int]]) -> dict[str, torch.Tensor]:
        longest = max(len(ids) for ids, _ in batch)
        width = -(-longest // self.multiple) * self.multiple
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, _) in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        labels = torch.tensor([label for _, label in batch], dtype=torch.long)
        return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}
