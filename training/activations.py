"""Activation (gradient) checkpointing through the model's own support.

Each encoder layer keeps only its input during the forward and recomputes its activations in
the backward: activation memory falls from one set per layer to about one layer's worth, for
roughly one extra forward of compute.

`use_reentrant=False` is chosen because the non-reentrant implementation
- computes parameter gradients even when the layer input does not require grad (frozen
  embeddings or `--freeze-layers`), so it needs no hook forcing grads onto the embeddings;
- composes with DDP and FSDP2 hooks (transformers checkpoints `forward`, so FSDP's hooks stay
  outside the recomputed region) and with keyword arguments;
- is what PyTorch recommends; the reentrant variant is legacy.
Both variants default to `preserve_rng_state=True`: the RNG state is stashed before the forward
and restored for the recompute, so dropout masks are replayed exactly and losses match a run
without checkpointing.
"""

from __future__ import annotations

from typing import Any

import torch

from training.strategy import SetupError

_KWARGS = {"use_reentrant": False}


def supports_checkpointing(model: torch.nn.Module) -> bool:
    """Whether the model (a transformers model) says it can checkpoint its layers."""
    return bool(getattr(model, "supports_gradient_checkpointing", False))


def is_checkpointing(model: torch.nn.Module) -> bool:
    """Whether any submodule currently checkpoints (the transformers flag)."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def set_activation_checkpointing(model: torch.nn.Module, enabled: bool) -> None:
    """Turn the model's layer checkpointing on or off; raise SetupError if it has none."""
    hf: Any = model  # a transformers model: its methods are not in nn.Module's type
    # Newer transformers call it `activation_checkpointing_*` and deprecate the old names.
    renamed = hasattr(hf, "activation_checkpointing_enable")
    if not enabled:
        if is_checkpointing(model):
            if renamed:
                hf.activation_checkpointing_disable()
            else:
                hf.gradient_checkpointing_disable()
        return
    if not supports_checkpointing(model):
        raise SetupError(
            f"--gradient-checkpointing: {type(model).__name__} has no gradient checkpointing "
            "support (transformers' supports_gradient_checkpointing is False); train without it"
        )
    if renamed:
        hf.activation_checkpointing_enable(activation_checkpointing_kwargs=dict(_KWARGS))
    else:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs=dict(_KWARGS))
    # transformers also hooks the embeddings to force grads onto their output; only the
    # reentrant variant needs that, and it would make the backward run through frozen layers.
    if hasattr(hf, "disable_input_require_grads"):
        hf.disable_input_require_grads()
