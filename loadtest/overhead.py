"""The tiny-model overhead run: what serving itself costs, with a model that costs little.

A random 2-layer BERT (hidden 64) with the real model's tokenizer, served the way the service
is served; single-text requests from 1, 64 and 256 keep-alive clients. For each level
(loadtest.levels): requests/s, latency, and the CPU every server process spent per request
(from /proc, see loadtest.cpu), by process group, with the model replica's own CPU split from
its forward thread's; then the same levels against Ray Serve's floor (loadtest.floor) in the
same Ray, the service, the floor and mosec taking turns at 64 clients (loadtest.paired), and
where the service is co-located, the same model in two tiers (the GPU layout).
Its targets and its part of bench.md are loadtest.overheadreport's.

The tiny model runs on the backend the real model gets here (`onnx` stands for both ONNX
Runtime backends). In PyTorch eager a forward of even this model costs ~2.5 ms of Python on a
slow CPU, ~15x an ONNX Runtime run of it: that is a cost of the torch backend, not of serving.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadtest import callsize, cpu, floor, hops, paired, reference, serving
from loadtest.clients import pool
from loadtest.httpload import bodies
from loadtest.levels import OverheadPlan, measure
from loadtest.ports import free_port
from loadtest.tinymodel import (
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    LAYERS,
    TORCH_THREADS,
    build_tiny_model,
    in_process,
)
from service.encoding import TextEncoder
from service.settings import Settings

# The targets (single-text requests, 64 clients).
OVERHEAD_CLIENTS = 64
SERVER_CPU_MS_PER_REQUEST = 1.0
MODEL_OWN_CPU_MS_PER_TEXT = 0.1
ADDED_CPU_MS_PER_REQUEST = 0.1  # what the service may add to Ray Serve's floor
IDLE_PENALTY_MS = 3.0  # p50 at one client over one in-process forward of a text


FULL = OverheadPlan([1, 64, 256], 8.0, 2.0, 200_000, 200)
QUICK = OverheadPlan([1, 64, 256], 1.5, 0.5, 20_000, 10, 2, 0.5, 0.2)


def run(
    tokenizer_from: Path,
    texts: list[str],
    plan: OverheadPlan,
    ingress: str,
    ingress_replicas: int,
    device: str,
    dtype: str,
    layers: int = LAYERS,
    backend: str = "torch",
    client_processes: int = 1,
) -> dict[str, Any]:
    """Build the tiny model, measure its forward limit, serve it, load it and Ray Serve's
    floor beside it; the JSON section."""
    tiny = build_tiny_model(tokenizer_from, Path(tempfile.mkdtemp()) / "tiny-overhead", 0, layers)
    if backend == "onnx":
        from service.export import export_onnx

        export_onnx(tiny)
    limit, alone_ms = in_process(tiny, texts, device, dtype, backend)
    print(
        f"overhead: tiny model ({backend}) forward-only limit {limit:.0f} texts/s, "
        f"{alone_ms} ms for one text alone",
        flush=True,
    )
    settings = serving.service_settings(tiny, TORCH_THREADS, device, dtype, ingress_replicas)
    settings = settings.model_copy(update={"backend": backend})
    payloads = bodies(texts, 1)
    encoder = TextEncoder.load(tiny, settings.max_seq_len)
    # The Rust-fronted reference first, while no Ray runs: /proc then counts it alone.
    mosec = reference.measure(
        tiny,
        backend,
        lambda url: measure(url, payloads, plan, "mosec", client_processes=client_processes),
    )
    with serving.local_service(settings, ingress, ingress_replicas) as url:
        readyz = serving.readyz_url(url)
        ready = _ready(readyz)
        rows = asyncio.run(
            measure(url, payloads, plan, readyz=readyz, client_processes=client_processes)
        )
        floor_url = floor.deploy(url.removesuffix(serving.CLASSIFY_SUFFIX), settings.access_log)
        floor_rows = asyncio.run(
            measure(floor_url, payloads, plan, "floor", client_processes=client_processes)
        )
        turns = _take_turns(url, floor_url, tiny, backend, payloads, plan, client_processes)
        floor.remove()
        two_tier: dict[str, Any] = {}
        if settings.layout == "two-tier":  # before any handle is called outside an event loop
            two_tier = _call_sizes(encoder, plan, texts, readyz, settings.access_log)
        hop = hops.measure(url, serving.SERVICE_APP, encoder, plan.hop_calls)
    for row, under in zip(rows, floor_rows, strict=True):
        row["added_to_floor_cpu_ms_per_request"] = floor.added(row, under)
    if settings.layout != "two-tier":  # the model replica's own CPU exists in two tiers only
        two_tier = _two_tier(
            settings, ingress, ingress_replicas, plan, payloads, texts, encoder, client_processes
        )
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
        "backend": backend,
        "served_backend": ready.get("backend"),  # as the service's /readyz reports it
        "model_calls": ready.get("model_calls"),  # how its ingress reaches the model
        "ingress": ingress,
        "ingress_replicas": ingress_replicas,
        "client_processes": client_processes,
        "forward_limit_texts_per_s": round(limit, 1),
        "forward_alone_ms": alone_ms,
        "layout": settings.layout,
        "levels": rows,
        "floor_levels": floor_rows,
        "hops": hop,
        **({"reference": reference.describe(), "reference_levels": mosec} if mosec else {}),
        "turns": turns,
        **two_tier,
    }


def _take_turns(
    service_url: str,
    floor_url: str,
    tiny: Path,
    backend: str,
    payloads: list[tuple[bytes, int]],
    plan: OverheadPlan,
    client_processes: int,
) -> dict[str, Any]:
    """The service, the floor and, where mosec is installed, the reference serving the same
    model, up at once and taking turns at the target's client count (loadtest.paired)."""
    targets = [
        paired.Target(paired.SERVICE, service_url, cpu.MODEL_GROUPS),
        paired.Target(paired.FLOOR, floor_url, ("Floor",)),
    ]

    async def take(extra: list[paired.Target]) -> dict[str, Any]:
        async with pool(client_processes) as load:
            return await paired.alternate(
                [*targets, *extra],
                payloads,
                OVERHEAD_CLIENTS,
                plan.turn_rounds,
                plan.turn_s,
                plan.turn_warmup_s,
                plan.max_requests,
                load,
            )

    if not reference.available():
        return asyncio.run(take([]))
    with reference.serve(tiny, free_port(), backend) as running:
        own = ("loadtest.reference", "mosec")
        return asyncio.run(take([paired.Target(paired.REFERENCE, running.url, own, ray=False)]))


def _two_tier(
    settings: Settings,
    ingress: str,
    ingress_replicas: int,
    plan: OverheadPlan,
    payloads: list[tuple[bytes, int]],
    texts: list[str],
    encoder: TextEncoder,
    client_processes: int,
) -> dict[str, Any]:
    """The model replica's own CPU per text where it has a process of its own: the same
    tiny model served in two tiers (the GPU layout), at one client (a lone request's hop to
    the model replica) and at the target's client count, then by call size."""
    two_tier = settings.model_copy(update={"layout": "two-tier"})
    with serving.local_service(two_tier, ingress, ingress_replicas) as url:
        readyz = serving.readyz_url(url)
        model_calls = _ready(readyz).get("model_calls")  # the ingress's transport to the model
        at = [1, OVERHEAD_CLIENTS]
        levels = asyncio.run(measure(url, payloads, plan, "two-tier", readyz, at, client_processes))
        calls = _call_sizes(encoder, plan, texts, readyz, two_tier.access_log)
        return {"two_tier_levels": levels, "two_tier_model_calls": model_calls, **calls}


def _call_sizes(
    encoder: TextEncoder, plan: OverheadPlan, texts: list[str], readyz: str, access_log: bool
) -> dict[str, Any]:
    """The running two-tier service's model replica (`local_service` runs both tiers as one
    application), called directly by call size; Ray's floor logs as the service (`access_log`)."""
    app = serving.SERVICE_APP
    callsize.deploy_floor(access_log)
    try:
        rows = asyncio.run(
            # A quarter of a level's time per size and target: 20 s in all at full length,
            # within the GPU bench's budget for this section (loadtest.gpubench).
            callsize.measure(app, encoder, texts, plan.seconds / 4, plan.warmup_s / 4, readyz)
        )
    finally:
        callsize.remove_floor()
    for r in rows:
        print(
            f"two-tier calls of {r['texts_per_call']:3d} texts: {r['calls_per_s']:7.1f} calls/s"
            f"  model replica's own CPU {r['own_cpu_ms_per_call']} ms/call, "
            f"{r['own_cpu_ms_per_text']} ms/text",
            flush=True,
        )
    line = callsize.fitted(rows, MODEL_OWN_CPU_MS_PER_TEXT)
    return {"two_tier_calls": {"in_flight": callsize.IN_FLIGHT, "sizes": rows, "fit": line}}


def _ready(readyz: str, wait_s: float = 30.0) -> dict[str, Any]:
    """The running service's /readyz answer, once it is ready (empty if it never is)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(readyz, timeout=5) as response:
                ready: dict[str, Any] = json.loads(response.read())
                return ready
        except OSError:
            time.sleep(0.5)
    return {}
