"""The mosec worker of the Rust-fronted reference (loadtest.reference): the tiny model, its
batch tokenized in one call and forwarded as the service plans forwards. Imported only where
mosec is installed, in the reference server's processes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
from mosec import Worker
from mosec.errors import DecodingError

from loadtest.parity import probabilities
from loadtest.reference import BACKEND_ENV, MODEL_ENV
from service.batchconfig import BatchConfig
from service.calibration import calibrate
from service.model import SentimentModel


class TinyClassifier(Worker):
    """One text a request in, its label and probabilities out; batched by mosec."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        path = Path(os.environ[MODEL_ENV])
        backend = os.environ.get(BACKEND_ENV, "onnx")
        self.model = SentimentModel.load(path, device="cpu", backend=backend, threads=1)
        # The forward's fixed cost in tokens, measured here as the service measures it.
        budget = BatchConfig().micro_batch_tokens  # padded tokens a forward, as served
        self.overhead = calibrate(self.model, budget).overhead_tokens or 0

    def deserialize(self, data: bytes) -> str:
        try:
            text = msgspec.json.decode(data)["text"]
        except (msgspec.DecodeError, KeyError, TypeError) as exc:
            raise DecodingError('the body must be {"text": "..."}') from exc
        if not isinstance(text, str) or not text:
            raise DecodingError("text must be a non-empty string")
        return text

    def serialize(self, data: dict[str, Any]) -> bytes:
        encoded: bytes = msgspec.json.encode(data)
        return encoded

    def forward(self, texts: list[str]) -> list[dict[str, Any]]:
        labels = self.model.labels
        probs = probabilities(self.model, texts, self.overhead)
        return [
            {"label": labels[int(p.argmax())], "probs": dict(zip(labels, p.tolist(), strict=True))}
            for p in probs
        ]
