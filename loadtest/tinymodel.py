"""Random-weight models for timing. The overhead run's tiny model: a random BERT with the real
model's tokenizer, its forward-only limit in-process (what serving it can at best approach)
and one text's forward alone; and a BERT-base-sized one for the GPU bench."""

from __future__ import annotations

import time
from pathlib import Path

LAYERS, HIDDEN, HEADS, INTERMEDIATE = 2, 64, 2, 128
TORCH_THREADS = 1  # every forward on the `forward` thread, so its CPU is separable
BACKENDS = ("torch", "onnx")
LONE_TEXTS = 512  # texts timed one at a time for the idle penalty's baseline


def build_tiny_model(tokenizer_from: Path, out: Path, seed: int = 0, layers: int = LAYERS) -> Path:
    """Save a random tiny BERT classifier to `out`, with the tokenizer of `tokenizer_from`.
    More `layers` make a launch-bound forward: hundreds of tiny ops, each a short stretch
    without the GIL, the way a GPU forward's Python side looks (a CPU stand-in for it)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_from, local_files_only=True)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        intermediate_size=INTERMEDIATE,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id or 0,
        id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1},
    )
    BertForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_bert_base(tokenizer_from: Path, out: Path) -> Path:
    """Save a BERT-base-sized classifier with random weights (the trainer's, so both measure
    the same model) to `out`, with the tokenizer of `tokenizer_from`."""
    from transformers import AutoTokenizer

    from training.throughput import synthetic_bert_base

    synthetic_bert_base().save_pretrained(out)
    AutoTokenizer.from_pretrained(tokenizer_from, local_files_only=True).save_pretrained(out)
    return out


def overhead_backend(real: str) -> str:
    """The tiny model's backend when the real model runs on `real`: ONNX Runtime for either
    ONNX backend (INT8 costs the tiny model what FP32 does), else torch (a GPU's TensorRT
    engine would be built for a model that serves nothing)."""
    return "onnx" if real.startswith("onnx") else "torch"


def in_process(
    model_path: Path, texts: list[str], device: str, dtype: str, backend: str = "torch"
) -> tuple[float, float]:
    """The model alone, loaded once on one torch thread (its sessions on one intra-op thread,
    as the overhead run serves it): texts/s of its forwards (tokenized up front,
    length-sorted micro-batches at the service's default budget; best of three passes), and
    the median ms to encode and forward one text alone (the idle penalty's baseline)."""
    import torch

    from loadtest.limit import single_text_ms
    from service.batchconfig import BatchConfig
    from service.batching import plan_micro_batches
    from service.calibration import calibrate
    from service.model import SentimentModel

    threads = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        model = SentimentModel.load(
            model_path, device=device, dtype=dtype, backend=backend, threads=TORCH_THREADS
        )
        ids = [e.ids for e in model.encode(texts)]
        config = BatchConfig()
        measured = calibrate(model, config.micro_batch_tokens).overhead_tokens
        plan = plan_micro_batches(
            [len(i) for i in ids],
            config.micro_batch_tokens,
            config.overhead_for(model.device.type, measured, model.cuts_runs),
            model.pad_multiple,
        )
        best = 0.0
        for _ in range(4):  # the first pass warms up
            t0 = time.perf_counter()
            for group in plan:
                model.predict([ids[i] for i in group])
            best = max(best, len(texts) / (time.perf_counter() - t0))
        return best, round(single_text_ms(model, texts, LONE_TEXTS), 3)
    finally:
        torch.set_num_threads(threads)
