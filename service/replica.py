"""The model replica as a Serve deployment: a thin shell around `service.modelcore`.

The shell imports neither torch nor transformers: `serve deploy` builds the application (it
imports `service.deployment`, hence this module) in a fresh worker before any replica starts,
and that build took seconds longer while it loaded the model libraries it never uses. The
replica imports them when it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ray import serve

from service.encoding import CallResult, Packed

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from service.modelcore import ModelCore


@serve.deployment(name="SentimentModel")
class ModelReplica:
    """Owns the model (and the GPU); batches across all ingress replicas."""

    def __init__(self, settings: dict[str, Any]) -> None:
        from service.modelcore import ModelCore

        self.core: ModelCore = ModelCore(settings)

    def reconfigure(self, user_config: dict[str, Any]) -> None:
        """Apply new batch knobs from Ray's `user_config` without restarting the replica."""
        self.core.reconfigure(user_config)

    async def check_health(self) -> None:
        """Ray replaces the replica when this raises: a stalled forward, or a failed probe."""
        await self.core.check_health()

    async def info(self) -> dict[str, Any]:
        """What serves: replica, model, device, dtype, labels and the batch knobs in force."""
        return await self.core.info()

    async def infer(self, packed: Packed, budgets_s: npt.NDArray[np.float32]) -> CallResult:
        """Probabilities for every text of a call, or EXPIRED where its time budget ran out,
        and the seconds it waited for company."""
        return await self.core.infer(packed, budgets_s)
