"""The batch knobs: what Ray Serve's `user_config` may change on running replicas."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class BatchConfig(BaseModel):
    """Knobs that can change at run time through Ray Serve's `user_config`."""

    model_config = {"extra": "forbid"}

    max_batch_texts: int = Field(256, ge=1, le=4096, description="Texts per dynamic batch.")
    batch_wait_timeout_s: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="How long an idle model waits for company; 0: a lone text runs at once.",
    )
    max_batch_tokens: int = Field(
        16384, ge=8, description="Token budget of one dynamic batch (unpadded tokens)."
    )
    micro_batch_tokens: int = Field(
        4096, ge=8, description="Padded-token budget of one forward pass (longest x count)."
    )
    max_pending_texts: int = Field(
        2048,
        ge=1,
        description="Texts one ingress replica admits and has not answered; beyond this, 429.",
    )
    forward_overhead_tokens: int | None = Field(
        None,
        ge=0,
        description="Fixed cost of one forward, in padded tokens; None: measured at warm-up.",
    )

    def overhead_for(
        self, device_type: str, measured: int | None = None, cuts_runs: bool = False
    ) -> int:
        """The forward overhead the micro-batch planner weighs (see batching): the configured
        value, else the budget itself for a backend that cuts each forward into runs at their
        own widths (`cuts_runs`), else the one measured at warm-up (service.calibration), else
        a default.

        Such a backend (onnx-int8) pays for a merge of short and long texts only within a run,
        so the planner's cost of a merge (every row padded to the longest) is not what it pays:
        planned as measured, 64 single texts became 12 forwards with 8% padding, at 0.78-0.80
        of the all-sorted speed; filled up to the budget, 2 forwards, at 0.84 (in-process).
        """
        if self.forward_overhead_tokens is not None:
            return self.forward_overhead_tokens
        if cuts_runs:
            return self.micro_batch_tokens
        if measured is not None:
            return measured
        # Measured on CPU (2-core bench, MiniLM); a GPU forward's launch cost is far larger
        # relative to its per-token cost, so it prefers fewer, fuller forwards.
        return 2048 if device_type == "cuda" else 192

    def user_config(self) -> dict[str, Any]:
        """The dict Ray passes to `reconfigure`."""
        return self.model_dump()
