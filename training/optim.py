"""What the training loop optimises with: the AMP dtype, AdamW's parameter groups, frozen
layers and the learning-rate schedule."""

from __future__ import annotations

import torch

from training.strategy import SetupError

AMP_MODES = ("auto", "bf16", "fp16", "off")  # what --amp takes, as resolve_amp reads it


def resolve_amp(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype, or None for full precision. `auto` is bf16/fp16 on CUDA, off on CPU."""
    if amp == "off":
        return None
    if amp == "auto":
        if device.type != "cuda":
            return None  # CPU autocast is slower than FP32 on most CPUs without AMX
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise SetupError("--amp fp16 needs a CUDA GPU; use bf16 or off on the CPU")
        return torch.float16
    raise SetupError(f"unknown --amp {amp!r}; use {', '.join(AMP_MODES)}")


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters; biases and LayerNorm weights get no weight decay
    (decaying them only hurts)."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr)


def freeze(model: torch.nn.Module, embeddings: bool, layers: int) -> None:
    """Stop training the word embeddings and/or the embedding block plus the lowest layers.

    Word embeddings are half of a small BERT: freezing them halves the optimizer's work on the
    CPU. Freezing the lowest layers also stops the backward pass early. Both cost little
    accuracy when the data are small.
    """
    if embeddings:
        emb = getattr(model, "get_input_embeddings", lambda: None)()
        if isinstance(emb, torch.nn.Module):
            emb.requires_grad_(False)
    if layers <= 0:
        return
    base = getattr(model, "base_model", model)
    blocks = getattr(getattr(base, "encoder", None), "layer", None)
    if not isinstance(blocks, torch.nn.ModuleList) or layers > len(blocks):
        raise SetupError(
            f"cannot freeze {layers} layers: the encoder has "
            + (
                f"{len(blocks)} layers"
                if isinstance(blocks, torch.nn.ModuleList)
                else "no layer list"
            )
        )
    stem = getattr(base, "embeddings", None)
    if isinstance(stem, torch.nn.Module):
        stem.requires_grad_(False)
    for block in blocks[:layers]:
        block.requires_grad_(False)


def linear_warmup_decay(
    optimizer: torch.optim.Optimizer, warmup: int, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Learning rate rises linearly from 0 over `warmup` steps, then falls linearly to 0."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total - step) / max(1, total - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
