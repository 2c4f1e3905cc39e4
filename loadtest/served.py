"""The bench's served runs: the service and the naive app over HTTP, closed loop at each
level of a plan, with where the server's CPU went and how full the service's batches were."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest import cpu, profile, report, serving, tally
from loadtest.clients import ClosedLoop, pool
from loadtest.httpload import RunResult, bodies, closed_loop, open_loop


@dataclass
class Plan:
    """How much to measure; `--quick` shrinks everything for tests."""

    texts: int
    seconds: float
    warmup_s: float
    singles: list[int]
    multis: list[int]
    multi_size: int
    budgets: list[int]
    half_load_s: float


FULL = Plan(1024, 12.0, 2.0, [1, 16, 64], [1, 4, 16], 32, [512, 1024, 2048, 4096], 20.0)
QUICK = Plan(96, 2.0, 0.5, [1, 8], [2], 8, [1024], 2.0)
# On a GPU (`make gpu-bench`): shorter levels (thousands of requests a second make 8 s as steady
# as 12 s on the CPU), and 256 single-text clients too: with CUDA graphs the H200 answered
# 64 clients at 3,181 requests/s, ~20 ms a round trip, with neither the GPU nor the CPU full.
# Budgets up to the RayService's 16,384 tokens a forward: with CUDA graphs 65,536 bought the
# limit 5% over 4,096 (12,594 against 11,924 texts/s) and cost the service a graph for every
# shape up to it, recorded before it is ready (128 s from deploy to ready, 34 s eager).
GPU = Plan(1024, 8.0, 2.0, [1, 16, 64, 256], [1, 4, 16], 32, [4096, 16384], 10.0)
MODEL_GROUP = "SentimentModel"
BUSY_THREAD = 0.05  # of a core, over a measured window


def row(target: str, per_request: int, concurrency: int, r: RunResult) -> dict[str, Any]:
    return {
        "target": target,
        "texts_per_request": per_request,
        "concurrency": concurrency,
        "texts_per_s": round(r.texts_per_s, 2),
        "p50_ms": round(r.percentile(0.50) * 1000, 1),
        "p95_ms": round(r.percentile(0.95) * 1000, 1),
        "p99_ms": round(r.percentile(0.99) * 1000, 1),
        "requests": r.requests,
        "errors": r.errors,
        "client_busy_cores": r.client_busy_cores,
        "statuses": {str(k): v for k, v in sorted(r.statuses.items())},
    }


async def measure(
    url: str,
    payloads: list[tuple[bytes, int]],
    concurrency: int,
    plan: Plan,
    readyz: str | None = None,
    load: ClosedLoop = closed_loop,
) -> tuple[RunResult, dict[str, Any]]:
    """One closed-loop run after a warm-up, where the server's CPU went meanwhile, and (with
    the service's `readyz`) how many texts its batches and forwards held. `load` runs the
    closed loop: in this process, or spread over client processes (loadtest.clients)."""
    await load(url, payloads, concurrency, plan.warmup_s, 10_000)
    me = os.getpid()  # the load generator: not the server, never counted
    counted = tally.read(readyz)
    before = cpu.snapshot(me)
    r = await load(url, payloads, concurrency, plan.seconds, 50_000)
    used = cpu_figures(cpu.usage(before, cpu.snapshot(me)), r)
    if readyz is not None:
        batching = tally.between(counted, tally.read(readyz))
        used |= {k: batching[k] for k in ("texts_per_batch", "texts_per_forward")}
    return r, used


def cpu_figures(used: cpu.Usage, r: RunResult) -> dict[str, Any]:
    """Server CPU per text by process group, and how many cores the model replica kept busy
    (one core busy means its Python, not its device, bounds it), and the forward threads'."""
    texts = max(1, r.texts)
    seconds = max(r.seconds, 1e-9)
    model = used.by_group.get(MODEL_GROUP)  # None co-located: no model replica process
    return {
        "server_cpu_ms_per_text": round(used.total * 1000 / texts, 3),
        "model_replica_busy_cores": None if model is None else round(model / seconds, 2),
        # Co-located, the ingress runs the forwards: count forward threads wherever they are.
        "forward_thread_busy_cores": round(sum(used.forward_by_group.values()) / seconds, 2),
        "cpu_ms_per_text_by_group": {
            g: round(v * 1000 / texts, 3) for g, v in sorted(used.by_group.items())
        },
        **busiest_threads(used.threads.get(MODEL_GROUP, []), seconds),
    }


def busiest_threads(threads: list[cpu.ThreadUse], seconds: float, top: int = 5) -> dict[str, Any]:
    """The model replica's (and its forward process's) busiest threads in cores, and how many
    kept over BUSY_THREAD of a core: one launching thread, or a pool of them, tell apart what
    bounds a GPU replica (the H200 runs saw 3.5-7.4 cores in its forward process)."""
    cores = [(t, t.seconds / seconds) for t in threads]
    return {
        "model_replica_threads": [
            {"thread": t.name, "in": t.where, "cores": round(c, 2)} for t, c in cores[:top]
        ],
        "model_replica_threads_busy": sum(1 for _, c in cores if c > BUSY_THREAD),
    }


def threads_line(figures: dict[str, Any]) -> str:
    """The busiest model replica threads, as the bench prints them under a run."""
    shown = ", ".join(
        f"{t['thread']} ({t['in']}) {t['cores']}" for t in figures["model_replica_threads"]
    )
    busy = figures["model_replica_threads_busy"]
    return f"  model replica threads, cores: {shown}; {busy} over {BUSY_THREAD} of a core"


async def serve_and_measure(
    args: argparse.Namespace,
    plan: Plan,
    texts: list[str],
    model_path: Path,
    threads: int,
    budget: int,
    on_gpu: bool,
    alone_ms: Callable[[], float] | None = None,
    measured: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """The service and then the naive app over HTTP at every level of the plan: their runs,
    the service's latency at half its best single-text rate, and (with `--profile-s`) where
    its replicas' Python went at the top single-text level (loadtest.profile). `alone_ms`
    measures one in-process forward of a text alone: the service's lone-client row gets it,
    measured beside the idle service just before that row's run (`alone_ms` in the row).
    `measured` gets the service's figures as soon as they are all in, before the naive app's."""
    ingress, replicas = args.ingress, args.ingress_replicas
    line = f"service ({replicas} ingress replicas), then the naive app, behind {ingress}"
    print(line, flush=True)
    apps = serving.local_apps(
        model_path, threads, budget, on_gpu, args.device, args.dtype, ingress, replicas
    )
    with apps as bench:
        url = bench.service()
        # The idle penalty's baseline, again, in the same minute as the one-client run it is
        # subtracted from: measured with the limit, minutes earlier, it read 4.5-6.5 ms on the
        # same code as the machine's speed drifted.
        alone = round(alone_ms(), 2) if alone_ms else None
        async with pool(args.client_processes) as load:
            service_runs = await _levels("service", url, texts, plan, load)
        if alone is not None:
            report.lone_run(service_runs)["alone_ms"] = alone
        half = await _half_load(url, texts, service_runs, plan)
        half["ingress"] = ingress
        half["gpu_peak_bytes"] = serving.gpu_peak_bytes()  # after every run: the whole peak
        profiled: dict[str, Any] = {}
        if args.profile_s > 0:  # after the measured runs: py-spy's CPU is not the server's
            singles = bodies(texts, 1)
            c = max(plan.singles)
            profiled = await profile.run(url, singles, c, args.profile_s, args.out)
            print("\n".join(profile.lines(profiled)), flush=True)
        if measured is not None:
            measured({"runs": service_runs, "half_load": half, "profile": profiled})
        url = bench.naive()  # in the service's place
        async with pool(args.client_processes) as load:
            naive_runs = await _levels("naive", url, texts, plan, load)
    return service_runs, naive_runs, half, profiled


async def _levels(
    target: str, url: str, texts: list[str], plan: Plan, load: ClosedLoop
) -> list[dict[str, Any]]:
    """One app's runs at every level of the plan, single-text and multi-text."""
    runs: list[dict[str, Any]] = []
    readyz = serving.readyz_url(url) if target == "service" else None
    for per_request, levels in [(1, plan.singles), (plan.multi_size, plan.multis)]:
        payloads = bodies(texts, per_request)
        for c in levels:
            r, used = await measure(url, payloads, c, plan, readyz, load)
            runs.append({**row(target, per_request, c, r), **used})
            print(
                f"{target:8s} {per_request:3d} text(s) x c={c:3d}: "
                f"{r.texts_per_s:8.1f} texts/s  p99 {r.percentile(0.99) * 1000:7.1f} ms"
                f"  errors {r.errors}  server CPU {used['server_cpu_ms_per_text']} ms/text"
                f"  model replica {used['model_replica_busy_cores']} cores busy"
                f" (forward thread {used['forward_thread_busy_cores']})"
                f"  client {r.client_busy_cores} cores",
                flush=True,
            )
            if target == "service" and used["model_replica_threads"]:
                print(threads_line(used), flush=True)
    return runs


async def _half_load(
    url: str, texts: list[str], service_runs: list[dict[str, Any]], plan: Plan
) -> dict[str, Any]:
    """Open-loop Poisson arrivals at half the best single-text rate: latency under load."""
    rate = max(r["texts_per_s"] for r in service_runs if r["texts_per_request"] == 1) / 2
    r = await open_loop(url, bodies(texts, 1), rate, plan.half_load_s)
    half = {**row("service", 1, 0, r), "offered_texts_per_s": round(rate, 2)}
    print(f"half load: {rate:.1f} texts/s offered -> p99 {half['p99_ms']} ms", flush=True)
    return half
