"""What the model core counts about itself (service.batchrun.Tally), read from /readyz around
a measured run: texts per dynamic batch and per forward, and the CPU of the forwards run on its
event loop. /readyz answers from one model replica: the bench serves one."""

from __future__ import annotations

import json
import urllib.request

COUNTS = ("batches", "batched_texts", "forwards", "loop_forward_cpu_s")


def read(readyz: str | None) -> dict[str, float]:
    """The model core's counts so far (empty without a service to ask, or from an older one)."""
    if readyz is None:
        return {}
    with urllib.request.urlopen(readyz, timeout=10) as response:
        info = json.loads(response.read())
    return {k: float(info[k]) for k in COUNTS if k in info}


def shown(row: dict[str, object], missing: str = "") -> str:
    """A report cell: texts per batch (per forward), or `missing` for a run without counts
    (the naive endpoint, or runs saved before the service counted them)."""
    batch = row.get("texts_per_batch")
    return missing if batch is None else f"{batch} ({row.get('texts_per_forward')})"


def between(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """Texts per batch and per forward, and the loop forwards' CPU seconds, over a run."""
    done = {k: after[k] - before[k] for k in COUNTS if k in before and k in after}
    batches, forwards = done.get("batches"), done.get("forwards")
    texts = done.get("batched_texts", 0.0)
    return {
        "texts_per_batch": round(texts / batches, 1) if batches else None,
        "texts_per_forward": round(texts / forwards, 1) if forwards else None,
        "loop_forward_s": done.get("loop_forward_cpu_s", 0.0),
    }
