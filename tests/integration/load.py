"""Concurrent HTTP helpers for integration tests (bounded in count and time)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import requests

from tests.integration.conftest import Deployed


def burst(app: Deployed, bodies: list[object], timeout: float = 60) -> list[requests.Response]:
    """POST every body at once (one thread each) and return the responses in order."""
    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(lambda body: app.classify(body, timeout=timeout), bodies))


def singles(n: int, prefix: str = "review") -> list[object]:
    """`n` single-text bodies with distinct texts."""
    return [{"text": f"{prefix} {i}: great phone, fast delivery"} for i in range(n)]
