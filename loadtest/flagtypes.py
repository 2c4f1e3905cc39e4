"""Types for the Locust file's own flags, so a bad value stops Locust with a usage error that
names the flag before any user starts, not a traceback from inside the run.

The service has its own (service.cliargs); the rehearsal Job mounts this package alone.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number(
    kind: type[int] | type[float], low: float, high: float = math.inf, *, low_open: bool = False
) -> Callable[[str], float]:
    """A type for a finite `kind` between `low` (excluded when `low_open`) and `high`."""
    what = "a whole number" if kind is int else "a number"
    bounds = f"{'above' if low_open else 'at least'} {low:g}"
    if high < math.inf:
        bounds += f" and at most {high:g}"

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        inside = value > low if low_open else value >= low
        if not (math.isfinite(value) and inside and value <= high):
            raise argparse.ArgumentTypeError(f"expected {what} {bounds}, got {text!r}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in some of its messages
    return parse


COUNT = number(int, 1)  # users, steps, texts, requests
POSITIVE = number(float, 0, low_open=True)  # lengths of time, rates, latencies
NOT_NEGATIVE = number(float, 0)
SHARE = number(float, 0, 1)  # of requests, of errors
