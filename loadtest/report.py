"""Benchmark reports: the results as JSON, a markdown table with ratios, and a PNG plot."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
from pathlib import Path
from typing import Any

from loadtest import overheadreport, tally
from loadtest.overhead import IDLE_PENALTY_MS

# The targets the service is held to (single-text c=64, multi-text, latency at half load).
SINGLE_VS_LIMIT = 0.85
MULTI_VS_LIMIT = 0.9
HALF_LOAD_P99_MS = 250.0
INGRESS = {
    "proxy": "Ray's HTTP proxy",
    "haproxy": "HAProxy with direct ingress (Ray Serve's high-throughput mode)",
}


def hardware() -> dict[str, Any]:
    """CPU model, core count, accelerator and library versions, to label the figures."""
    import ray
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "gpu": gpu,
        "torch": torch.__version__,
        "ray": ray.__version__,
        "python": platform.python_version(),
    }


def add_ratios(results: dict[str, Any]) -> None:
    """Each service run gets `vs_limit` and `vs_naive` (same texts/request and concurrency)."""
    limit = results["limit"]["texts_per_s"]
    naive = {
        (r["texts_per_request"], r["concurrency"]): r["texts_per_s"]
        for r in results["runs"]
        if r["target"] == "naive"
    }
    limit_cpu = results["limit"].get("cpu_ms_per_text")  # runs saved before it have none
    for r in results["runs"]:
        r["vs_limit"] = round(r["texts_per_s"] / limit, 3) if limit else None
        cpu = r.get("server_cpu_ms_per_text")
        r["cpu_vs_limit"] = round(cpu / limit_cpu, 2) if cpu and limit_cpu else None
        base = naive.get((r["texts_per_request"], r["concurrency"]))
        r["vs_naive"] = round(r["texts_per_s"] / base, 2) if base else None


def lone_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The service's single-text run at the fewest clients: the idle penalty's."""
    singles = [r for r in runs if r["target"] == "service" and r["texts_per_request"] == 1]
    return min(singles, key=lambda r: r["concurrency"])


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets, each with the measured value and whether it was met."""
    service = [r for r in results["runs"] if r["target"] == "service"]
    singles = [r for r in service if r["texts_per_request"] == 1]
    multis = [r for r in service if r["texts_per_request"] > 1]
    top_single = max(singles, key=lambda r: r["concurrency"])
    best_multi = max(multis, key=lambda r: r["vs_limit"])
    half = results["half_load"]
    rows = [
        (
            f"single text, c={top_single['concurrency']}: service / limit",
            top_single["vs_limit"],
            SINGLE_VS_LIMIT,
            top_single["vs_limit"] >= SINGLE_VS_LIMIT and top_single["errors"] == 0,
        ),
        (
            f"{best_multi['texts_per_request']} texts/request, "
            f"c={best_multi['concurrency']}: service / limit",
            best_multi["vs_limit"],
            MULTI_VS_LIMIT,
            best_multi["vs_limit"] >= MULTI_VS_LIMIT and best_multi["errors"] == 0,
        ),
        (
            f"p99 ms at half the max single-text rate ({half['offered_texts_per_s']} texts/s)",
            half["p99_ms"],
            HALF_LOAD_P99_MS,
            half["p99_ms"] <= HALF_LOAD_P99_MS and half["errors"] == 0,
        ),
    ]
    lone = lone_run(service)
    # Measured beside the idle service just before its one-client run; earlier reports had
    # only the limit's, minutes before.
    beside = lone.get("alone_ms")
    alone_ms = beside if beside is not None else results["limit"].get("single_text_p50_ms")
    if alone_ms is not None:
        penalty = round(lone["p50_ms"] - alone_ms, 1)
        when = ", beside the idle service" if beside is not None else ""
        rows.append(
            (
                f"idle penalty: p50 at c={lone['concurrency']} minus one in-process forward "
                f"({alone_ms} ms{when}), ms",
                penalty,
                IDLE_PENALTY_MS,
                penalty <= IDLE_PENALTY_MS and lone["errors"] == 0,
            )
        )
    return [{"name": n, "value": v, "goal": g, "met": m} for n, v, g, m in rows]


def markdown(results: dict[str, Any]) -> str:
    """The tables the README shows: the default model's runs (unless `--overhead-only`), then
    the tiny-model overhead run."""
    hw = results["hardware"]
    gpu = f", GPU {hw['gpu']}" if hw["gpu"] else ", no GPU"
    lines = [
        f"Hardware: {hw['cpu']}, {hw['cores']} cores{gpu}; torch {hw['torch']}, "
        f"ray {hw['ray']}; behind {INGRESS[results['ingress']]}, "
        f"{results['ingress_replicas']} ingress replica(s); load from "
        f"{results.get('client_processes', 1)} client process(es).",
    ]
    if "runs" in results:
        lines += ["", *_model_lines(results)]
    if "overhead" in results:
        lines += ["", *overheadreport.report_lines(results["overhead"])]
    return "\n".join(lines) + "\n"


def _at_a_time_lines(results: dict[str, Any]) -> list[str]:
    """The limit when only as many texts are known as single-text clients keep in flight: is a
    shortfall at that level batching fewer texts, or serving cost?"""
    grouped = results["limit"].get("at_a_time")
    if not grouped or "all_sorted_texts_per_s" not in grouped:  # runs saved before it existed
        return []
    n, rate, full = grouped["texts"], grouped["texts_per_s"], grouped["all_sorted_texts_per_s"]
    lines = [
        f"With only {n} texts known at a time, in arrival order (the most the batcher can hold "
        f"at {n} single-text clients; with one call in flight per ingress it holds about half: "
        f"docs/benchmarks-history.md), the same model computes {rate:.1f} texts/s, "
        f"{rate / full:.2f} of the {full:.1f} it computes with all texts sorted in the same "
        "alternating rounds."
    ]
    if "half_texts" in grouped:  # runs saved before it have only the full count
        half, half_rate = grouped["half_texts"], grouped["half_texts_per_s"]
        lines.append(
            f"With {half} known at a time (about what it holds), {half_rate:.1f} texts/s, "
            f"{half_rate / full:.2f} of all sorted."
        )
    return lines


def _limit_cpu_lines(limit: dict[str, Any]) -> list[str]:
    """What a text cost the limit in CPU: the baseline of each run's `CPU vs limit`."""
    cpu = limit.get("cpu_ms_per_text")
    if cpu is None:
        return []
    busy = cpu * limit["texts_per_s"] / 1000
    return [
        f"The limit's best run spent {cpu:.3f} ms of CPU per text (every thread of its process, "
        f"{busy:.2f} cores busy); `CPU vs limit` is each run's server CPU per text over it."
    ]


def _layout_lines(limit: dict[str, Any]) -> list[str]:
    """The limit's texts/s with one forward at a time and with the service's parallel ones."""
    rates = limit.get("by_forwards_at_once")
    if not rates or len(rates) < 2:  # one layout (a GPU, torch), or runs saved before it
        return []
    parts = ", ".join(f"{n} at once {rate:.1f}" for n, rate in sorted(rates.items()))
    return [
        f"The service computes {limit['parallel_forwards']} forwards at once (each on its share "
        f"of the threads); the limit is the better of both ways in-process: {parts} texts/s."
    ]


def _model_lines(results: dict[str, Any]) -> list[str]:
    model, limit = results["model"], results["limit"]
    lines = [
        f"Default model, {results['threads']} torch threads.",
        f"Model: {model['name']} ({model['parameters'] / 1e6:.1f}M parameters, "
        f"{model['dtype']} on {model['device']}); texts average {model['mean_tokens']} tokens.",
        f"Limit (in-process, all texts sorted): **{limit['texts_per_s']:.1f} texts/s** at "
        f"micro-batch budget {limit['micro_batch_tokens']} tokens; the service ran with "
        f"budget {results['service_micro_batch_tokens']}.",
        *_layout_lines(limit),
        *_at_a_time_lines(results),
        *_limit_cpu_lines(limit),
        "",
        "| target | texts/request | concurrency | texts/s | p50 ms | p95 ms | p99 ms | errors "
        "| vs limit | vs naive | server CPU ms/text | CPU vs limit | model replica cores busy "
        "| texts per batch (forward) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(results["runs"], key=lambda r: (r["texts_per_request"], r["concurrency"])):
        vs_naive = f"{r['vs_naive']:.2f}x" if r["target"] == "service" and r["vs_naive"] else ""
        # Runs saved before the CPU figures existed have none.
        busy = r.get("model_replica_busy_cores") if r["target"] == "service" else None
        cpu_ratio = r.get("cpu_vs_limit")
        lines.append(
            f"| {r['target']} | {r['texts_per_request']} | {r['concurrency']} | "
            f"{r['texts_per_s']:.1f} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | "
            f"{r['p99_ms']:.0f} | {r['errors']} | {r['vs_limit']:.2f} | {vs_naive} | "
            f"{r.get('server_cpu_ms_per_text', '')} | "
            f"{'' if cpu_ratio is None else f'{cpu_ratio:.2f}x'} | {'' if busy is None else busy} "
            f"| {tally.shown(r)} |"
        )
    half = results["half_load"]
    lines += [
        "",
        f"Half load (open loop, Poisson arrivals at {half['offered_texts_per_s']} texts/s): "
        f"p50 {half['p50_ms']:.0f} ms, p99 {half['p99_ms']:.0f} ms, errors {half['errors']}.",
        "",
        "| target | measured | goal | met |",
        "|---|---:|---:|---|",
    ]
    for t in results["targets"]:
        met = "yes" if t["met"] else "NO"
        lines.append(f"| {t['name']} | {t['value']} | {t['goal']} | {met} |")
    return lines


def plot(results: dict[str, Any], path: Path) -> None:
    """Latency (p50 and p99) against throughput, one panel per request size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted({r["texts_per_request"] for r in results["runs"]})
    fig, axes = plt.subplots(1, len(sizes), figsize=(6 * len(sizes), 4.5), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        for target, color in (("service", "tab:blue"), ("naive", "tab:red")):
            rows = sorted(
                (
                    r
                    for r in results["runs"]
                    if r["target"] == target and r["texts_per_request"] == size
                ),
                key=lambda r: r["concurrency"],
            )
            x = [r["texts_per_s"] for r in rows]
            ax.plot(x, [r["p99_ms"] for r in rows], "o-", color=color, label=f"{target} p99")
            ax.plot(x, [r["p50_ms"] for r in rows], "s--", color=color, label=f"{target} p50")
            for r in rows:
                ax.annotate(f"c={r['concurrency']}", (r["texts_per_s"], r["p99_ms"]), fontsize=7)
        ax.axvline(results["limit"]["texts_per_s"], color="gray", linestyle=":", label="limit")
        ax.set_xlabel("texts/s")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.set_title(f"{size} text(s) per request")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_reports(results: dict[str, Any], out: Path) -> str:
    """Add ratios and targets, write bench.json / bench.md / bench.png, return the tables.
    (No plot with `--overhead-only`, nor where matplotlib is missing, as on a bare GPU box.)"""
    if "runs" in results:
        add_ratios(results)
        results["targets"] = targets(results)
    if "overhead" in results:
        results["overhead"]["targets"] = overheadreport.targets(results["overhead"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(results, indent=2) + "\n")
    table = markdown(results)
    (out / "bench.md").write_text(table)
    if "runs" in results and importlib.util.find_spec("matplotlib") is not None:
        plot(results, out / "bench.png")
    return table
