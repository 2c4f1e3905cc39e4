"""The tiny-model overhead run: what serving itself costs, with a model that costs ~nothing.

A random 2-layer BERT (hidden 64) with the real model's tokenizer, served the way the service
is served; single-text requests from 1, 64 and 256 keep-alive clients. For each level: requests/s,
latency, and the CPU every server process spent per request (from /proc, see loadtest.cpu), by
process group, with the model replica's own CPU split from its forward thread's. Also its
targets and its part of bench.md.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadtest import cpu, hops, serving
from loadtest.httpload import RunResult, bodies, closed_loop
from service.encoding import TextEncoder

LAYERS, HIDDEN, HEADS, INTERMEDIATE = 2, 64, 2, 128
MODEL_GROUP = "SentimentModel"
TORCH_THREADS = 1  # every forward on the `forward` thread, so its CPU is separable
# The targets (single-text requests, 64 clients).
OVERHEAD_CLIENTS = 64
SERVER_CPU_MS_PER_REQUEST = 1.0
MODEL_OWN_CPU_MS_PER_TEXT = 0.1


@dataclass(frozen=True)
class OverheadPlan:
    """Levels and durations; every load loop also stops at `max_requests`."""

    levels: list[int]
    seconds: float
    warmup_s: float
    max_requests: int
    hop_calls: int  # calls per hop in the one-client latency breakdown (loadtest.hops)


FULL = OverheadPlan([1, 64, 256], 8.0, 2.0, 200_000, 200)
QUICK = OverheadPlan([1, 64, 256], 1.5, 0.5, 20_000, 10)


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


def forward_limit(model_path: Path, texts: list[str], device: str, dtype: str) -> float:
    """Texts/s of the model's forwards alone: tokenized up front, length-sorted micro-batches
    at the service's default budget, one torch thread; best of three passes."""
    import torch

    from service.batching import plan_micro_batches
    from service.calibration import calibrate
    from service.model import SentimentModel
    from service.settings import BatchConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        model = SentimentModel.load(model_path, device=device, dtype=dtype)
        ids = [e.ids for e in model.encode(texts)]
        config = BatchConfig()
        measured = calibrate(model, config.micro_batch_tokens).overhead_tokens
        plan = plan_micro_batches(
            [len(i) for i in ids],
            config.micro_batch_tokens,
            config.overhead_for(model.device.type, measured),
        )
        best = 0.0
        for _ in range(4):  # the first pass warms up
            t0 = time.perf_counter()
            for group in plan:
                model.predict([ids[i] for i in group])
            best = max(best, len(texts) / (time.perf_counter() - t0))
        return best
    finally:
        torch.set_num_threads(threads)


def _ms_per(seconds: float, count: int) -> float | None:
    return round(seconds * 1000 / count, 3) if count else None


def level_row(concurrency: int, result: RunResult, used: cpu.Usage) -> dict[str, Any]:
    """One level's figures; CPU per request (= per text: single-text requests)."""
    n = result.requests
    model = used.by_group.get(MODEL_GROUP, 0.0)
    forward_here = used.forward_by_group.get(MODEL_GROUP, 0.0)
    forward = sum(used.forward_by_group.values())  # co-located: the ingress runs the forwards
    return {
        "concurrency": concurrency,
        "requests": n,
        "errors": result.errors,
        "statuses": {str(k): v for k, v in sorted(result.statuses.items())},
        "seconds": round(result.seconds, 3),
        "requests_per_s": round(n / result.seconds, 2) if result.seconds else 0.0,
        "p50_ms": round(result.percentile(0.50) * 1000, 2),
        "p99_ms": round(result.percentile(0.99) * 1000, 2),
        "server_cpu_ms_per_request": _ms_per(used.total, n),
        # Co-located there is no model replica process: its figure does not exist.
        "model_replica_cpu_ms_per_text": (
            _ms_per(model - forward_here, n) if MODEL_GROUP in used.by_group else None
        ),
        "forward_cpu_ms_per_text": _ms_per(forward, n),
        "groups": {
            g: {"processes": used.processes[g], "cpu_ms_per_request": _ms_per(s, n)}
            for g, s in sorted(used.by_group.items())
        },
    }


async def measure(
    url: str, payloads: list[tuple[bytes, int]], plan: OverheadPlan
) -> list[dict[str, Any]]:
    """Each level: a warm-up, then a measured closed loop bracketed by /proc snapshots."""
    rows = []
    me = os.getpid()  # the load generator: not the server, never counted
    for c in plan.levels:
        await closed_loop(url, payloads, c, plan.warmup_s, plan.max_requests)
        before = cpu.snapshot(me)
        result = await closed_loop(url, payloads, c, plan.seconds, plan.max_requests)
        used = cpu.usage(before, cpu.snapshot(me))
        row = level_row(c, result, used)
        rows.append(row)
        print(
            f"overhead c={c:3d}: {row['requests_per_s']:8.1f} req/s  p99 {row['p99_ms']:7.1f} ms"
            f"  server CPU {row['server_cpu_ms_per_request']} ms/request  errors {result.errors}",
            flush=True,
        )
    return rows


def run(
    tokenizer_from: Path,
    texts: list[str],
    plan: OverheadPlan,
    ingress: str,
    ingress_replicas: int,
    device: str,
    dtype: str,
    layers: int = LAYERS,
) -> dict[str, Any]:
    """Build the tiny model, measure its forward limit, serve it, load it; the JSON section."""
    tiny = build_tiny_model(tokenizer_from, Path(tempfile.mkdtemp()) / "tiny-overhead", 0, layers)
    limit = forward_limit(tiny, texts, device, dtype)
    print(f"overhead: tiny model forward-only limit {limit:.0f} texts/s", flush=True)
    settings = serving.service_settings(tiny, TORCH_THREADS, device, dtype, ingress_replicas)
    with serving.local_service(settings, ingress, ingress_replicas) as url:
        rows = asyncio.run(measure(url, bodies(texts, 1), plan))
        encoder = TextEncoder.load(tiny, settings.max_seq_len)
        hop = hops.measure(url, serving.SERVICE_APP, encoder, plan.hop_calls)
    return {
        "model": {
            "layers": layers,
            "hidden": HIDDEN,
            "heads": HEADS,
            "intermediate": INTERMEDIATE,
            "tokenizer": tokenizer_from.name,
            "weights": "random",
        },
        "plan": asdict(plan),
        "torch_threads": TORCH_THREADS,
        "ingress": ingress,
        "ingress_replicas": ingress_replicas,
        "forward_limit_texts_per_s": round(limit, 1),
        "levels": rows,
        "hops": hop,
    }


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    """Server CPU per request and the model replica's own CPU per text, at 64 clients."""
    row = min(section["levels"], key=lambda r: abs(r["concurrency"] - OVERHEAD_CLIENTS))
    # Without a SentimentModel process the model replica's figure means nothing.
    has_model = MODEL_GROUP in row["groups"]
    server, own = row["server_cpu_ms_per_request"], row["model_replica_cpu_ms_per_text"]
    c = row["concurrency"]
    return [
        {
            "name": f"server CPU ms per request, {c} clients",
            "value": server,
            "goal": SERVER_CPU_MS_PER_REQUEST,
            "met": server is not None and server <= SERVER_CPU_MS_PER_REQUEST and not row["errors"],
        },
        {
            "name": f"model replica CPU ms per text (excl. forward), {c} clients",
            "value": own if has_model else None,
            "goal": MODEL_OWN_CPU_MS_PER_TEXT,
            "met": has_model and own is not None and own <= MODEL_OWN_CPU_MS_PER_TEXT,
        },
    ]


def report_lines(section: dict[str, Any]) -> list[str]:
    """The overhead run: one row per client count, the 64-client breakdown, the targets."""
    m, plan = section["model"], section["plan"]
    lines = [
        f"Serving overhead: a random BERT ({m['layers']} layers, hidden {m['hidden']}, "
        f"{m['heads']} heads, intermediate {m['intermediate']}) with the {m['tokenizer']} "
        f"tokenizer, {section['torch_threads']} torch thread; single-text requests from "
        f"keep-alive clients, closed loop, {plan['seconds']} s per level after "
        f"{plan['warmup_s']} s warm-up. Server CPU is every server process (Ray, replicas, "
        "HAProxy; not the load generator), read from /proc over the measured window.",
        f"In-process forward-only limit of this model: "
        f"**{section['forward_limit_texts_per_s']:.0f} texts/s**.",
        "",
        "| clients | requests/s | p50 ms | p99 ms | server CPU ms/request | model replica CPU "
        "ms/text (excl. forward) | forward CPU ms/text | errors |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in section["levels"]:
        lines.append(
            f"| {r['concurrency']} | {r['requests_per_s']:.1f} | {r['p50_ms']:.1f} | "
            f"{r['p99_ms']:.1f} | {_num(r['server_cpu_ms_per_request'])} | "
            f"{_num(r['model_replica_cpu_ms_per_text'])} | "
            f"{_num(r['forward_cpu_ms_per_text'])} | {r['errors']} |"
        )
    if "hops" in section:
        lines += ["", *hops.report_lines(section["hops"])]
    row = min(section["levels"], key=lambda r: abs(r["concurrency"] - OVERHEAD_CLIENTS))
    lines += [
        "",
        f"Server CPU by process group at {row['concurrency']} clients (the model replica's "
        "includes its forward thread):",
        "",
        "| process group | processes | CPU ms/request |",
        "|---|---:|---:|",
    ]
    groups = sorted(row["groups"].items(), key=lambda g: -(g[1]["cpu_ms_per_request"] or 0))
    for name, g in groups:
        lines.append(f"| {name} | {g['processes']} | {_num(g['cpu_ms_per_request'])} |")
    lines += ["", "| target | measured | goal | met |", "|---|---:|---:|---|"]
    for t in section["targets"]:
        met = "yes" if t["met"] else "NO"
        lines.append(f"| {t['name']} | {_num(t['value'])} | {t['goal']} | {met} |")
    return lines


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
