"""The baseline the service must beat: one request, one forward, no batching, no sorting.

The same model behind a plain Ray Serve endpoint, the way a first prototype would serve it.
It runs in the same Ray instance as the service, so the comparison isolates batching.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from ray import serve
from starlette.requests import Request

from service.model import SentimentModel


@serve.deployment(name="NaiveClassifier", max_ongoing_requests=1024)
class NaiveClassifier:
    """Tokenize and forward each request on its own, in arrival order."""

    def __init__(self, model_path: str, torch_threads: int | None, device: str, dtype: str) -> None:
        if torch_threads:
            torch.set_num_threads(torch_threads)
        self.model = SentimentModel.load(Path(model_path), device=device, dtype=dtype)

    async def __call__(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        texts = body["texts"] if "texts" in body else [body["text"]]
        # Blocking on purpose: this is the naive design, one forward at a time.
        probs = self.model.classify(texts)
        return {"model": self.model.name, "results": probs}
