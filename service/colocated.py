"""The co-located layout: the model replica's core inside the ingress replica's own process.

On a small CPU-only machine the two-tier layout pays a Ray handle call (serialisation, an RPC
and two event-loop hops) per coalesced call, and a second Python process competes for the same
few cores. Here the ingress sends its coalesced calls to the model core's `infer` directly
(there is no replica to fail over to) and asks its `info` the way it would ask a handle, so
everything else (admission, coalescing, batching, forwards, health, metrics) is the same code.
`SENTIMENT_LAYOUT` chooses; docs/serving.md, "Layouts", has the measurements behind the default.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


class _Method:
    """`handle.method.remote(...)`, answered in-process."""

    def __init__(self, method: Callable[..., Awaitable[Any]]) -> None:
        self.method = method

    def remote(self, *args: Any) -> Awaitable[Any]:
        return self.method(*args)


class LocalModel:
    """A model core in the ingress's own process: its `info` is asked like a handle's, its
    `core.infer` called directly."""

    def __init__(self, settings: dict[str, Any]) -> None:
        # Imported here: the two-tier ingress must not load torch (tests/unit/test_imports.py).
        from service.modelcore import ModelCore

        self.core = ModelCore(settings)
        self.info = _Method(self.core.info)

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """New batch knobs for the batcher (the ingress applies its own share)."""
        self.core.reconfigure(user_config)

    async def check_health(self) -> None:
        """The model core's own check: a stalled forward or a failed probe."""
        await self.core.check_health()
