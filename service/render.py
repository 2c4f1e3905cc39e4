"""The JSON bytes a classify request is answered with, built from plain values: no response
model to validate on the hot path (the OpenAPI schema still documents ClassifyResponse)."""

from __future__ import annotations

import json
from typing import Any

from service.coalescer import Reply


def json_bytes(document: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


def answer_bytes(model: str, labels: list[str], reply: Reply) -> bytes:
    """One request's answer: per text, the best label, its score, every probability, and
    whether (and into how many windows) it was cut, and how much of it the model could not read."""
    results = []
    rows = zip(reply.probs.tolist(), reply.truncated, reply.windows, reply.unknown, strict=True)
    for probs, truncated, windows, unknown in rows:
        best = max(range(len(labels)), key=probs.__getitem__)
        results.append(
            {
                "label": labels[best],
                "score": probs[best],
                "probabilities": dict(zip(labels, probs, strict=True)),
                "truncated": truncated,
                "windows": windows,
                "unknown_share": round(unknown, 4),
            }
        )
    return json_bytes({"model": model, "results": results})
