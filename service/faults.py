"""Fault injection for tests and drills: off unless a `SENTIMENT_FAULT_*` setting is given.

`fault_forward_min_texts=N`: every forward of at least N texts raises, as an out-of-memory on a
big batch would. `fault_hang_min_tokens=N`: every forward holding a text of at least N tokens
hangs, as a kernel stuck on long inputs would (bounded: it gives up after `HANG_S`).
`fault_slow_forward_s=S`: every forward takes S seconds longer, as a slow or shared GPU would.
"""

from __future__ import annotations

import logging
import threading
import time

from service.retry import Forward, Probs, Rows

logger = logging.getLogger("ray.serve")
HANG_S = 600.0


class InjectedFault(RuntimeError):
    """Raised by a forward that a fault setting targets."""


def with_faults(
    forward: Forward, raise_min: int | None, hang_min: int | None, slow_s: float | None = None
) -> Forward:
    """`forward` itself when no fault is set, else a forward that fails as configured."""
    if raise_min is None and hang_min is None and slow_s is None:
        return forward
    logger.warning(
        "fault injection: raise at %s texts, hang at %s tokens, %s s slower",
        raise_min, hang_min, slow_s,
    )  # fmt: skip
    never = threading.Event()  # never set: an interruptible, bounded sleep

    def faulty(rows: Rows) -> tuple[Probs, float]:
        if hang_min is not None and max(len(row) for row in rows) >= hang_min:
            never.wait(HANG_S)
            raise InjectedFault(f"injected hang of a {len(rows)}-text forward ended")
        if raise_min is not None and len(rows) >= raise_min:
            raise InjectedFault(f"injected failure of a {len(rows)}-text forward")
        if slow_s is not None:
            time.sleep(slow_s)
        return forward(rows)

    return faulty
