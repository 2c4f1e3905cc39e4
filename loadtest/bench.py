"""`python -m loadtest.bench`: the service against its limit and a naive baseline, one run.

Measures, on one machine and the same texts:
  limit    the model in-process, all texts known up front, length-sorted micro-batches;
  service  the real service over HTTP at several concurrencies, single- and multi-text;
  naive    the same model behind a one-request-one-forward Ray Serve endpoint;
  overhead a tiny random model served the same way: server CPU per request, by process.
Figures are ratios inside the run, because the machine is shared and absolute speed drifts.
Writes bench.json, bench.md and bench.png into --out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from loadtest import clients, corpus, overhead, serving, tinymodel
from loadtest.report import hardware, write_reports
from loadtest.served import FULL, GPU, QUICK, serve_and_measure
from service.backends import BACKENDS
from service.cliargs import check_model_path, count, device, not_negative
from service.settings import COMPILE_MODES, DTYPES


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure everything and return the results document."""
    import torch

    from service.model import SentimentModel, dtype_name

    gpus = 1 if args.device != "cpu" and torch.cuda.is_available() else 0
    plan = QUICK if args.quick else (GPU if gpus else FULL)
    threads = args.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    texts = corpus.load(args.corpus, args.texts or plan.texts)
    from service.local import local_layout
    from service.settings import Settings

    common = {
        "hardware": hardware(),
        "ingress": args.ingress,
        "ingress_replicas": args.ingress_replicas,
        # As serving.service_settings picks it: SENTIMENT_LAYOUT, else what `make serve` runs.
        "layout": local_layout(Settings(ingress_replicas=args.ingress_replicas, num_gpus=gpus)),
    }
    if args.calls_in_flight:  # the service's Settings read it, in both sections
        os.environ["SENTIMENT_INGRESS_CALLS_IN_FLIGHT"] = str(args.calls_in_flight)
    common["ingress_calls_in_flight"] = args.calls_in_flight or "auto"
    common["client_processes"] = args.client_processes
    if args.overhead_only:
        return {**common, "overhead": _overhead(args, texts), "created": _now()}
    model_path = args.model_path
    if args.synthetic_bert_base:
        scratch = Path(tempfile.mkdtemp()) / "bert-base"
        model_path = tinymodel.build_bert_base(args.model_path, scratch)

    # A GPU forward's fixed cost (kernel launches from Python, ~6 ms eager on an H200) buys
    # far bigger forwards than a CPU's (eager, an H200's limit rose 3.6x from 4096 to 65536;
    # CUDA graphs take most of that fixed cost away: loadtest.served.GPU).
    budgets = plan.budgets
    print(f"limit: in-process, {len(texts)} texts, budgets {budgets} ...", flush=True)
    from loadtest.limit import at_a_time, measure_layouts, single_text_ms
    from service.placement import parallel_forwards

    # The limit and the service run the same backend: the service's Settings read it here.
    os.environ["SENTIMENT_BACKEND"] = args.backend
    os.environ["SENTIMENT_TORCH_COMPILE"] = args.torch_compile
    settings = Settings(model_path=model_path, device=args.device, torch_threads=threads)
    parallel = parallel_forwards(settings, threads)

    def load(session_threads: int) -> SentimentModel:
        return SentimentModel.load(
            model_path,
            device=args.device,
            dtype=args.dtype,
            backend=args.backend,
            torch_compile=args.torch_compile,
            threads=session_threads,
        )

    limit, models, by_layout = measure_layouts(load, texts, budgets, threads, parallel)
    model, served = models[1], models[parallel]  # a lone forward gets every thread
    budget = args.micro_batch_tokens or limit.micro_batch_tokens
    in_flight = max(plan.singles)
    # Also half of it: with one call in flight per ingress, the clients take turns in halves,
    # so that is about what the batcher holds (docs/benchmarks-history.md). Measured as the service
    # computes: `parallel` forwards at once when it does.
    grouped, halved = at_a_time(
        served,
        texts,
        [in_flight, max(1, in_flight // 2)],
        budget,
        limit.overhead_tokens,
        workers=parallel,
    )
    single_ms = single_text_ms(model, texts)
    on_gpu = model.device.type == "cuda"
    limit_peak = torch.cuda.max_memory_allocated(model.device) if on_gpu else 0
    info = {
        "name": model.name,
        "parameters": model.parameters,
        "backend": model.backend_name,
        # Why it runs, and whether forwards replay CUDA graphs: a torch.compile that failed
        # falls back to eager with a log line only, and eager figures must not pass for graphs.
        "backend_reason": model.backend_reason,
        "records_graphs": model.records_graphs,
        "device": str(model.device),
        "dtype": dtype_name(model.dtype),
        "mean_tokens": round(sum(len(e.ids) for e in model.encode(texts)) / len(texts), 1),
    }
    del served, models  # `model` stays: the idle penalty's baseline, again beside the service
    if on_gpu:
        torch.cuda.empty_cache()
    print(
        f"limit: {limit.texts_per_s:.1f} texts/s (micro-batch {limit.micro_batch_tokens}); "
        f"with {in_flight} texts known at a time {grouped.ratio:.2f} of all sorted, with "
        f"{halved.texts} {halved.ratio:.2f} ({grouped.texts_per_s:.1f} and "
        f"{halved.texts_per_s:.1f} against {grouped.all_sorted_texts_per_s:.1f}); "
        f"by forwards at once {by_layout}"
    )

    base = {
        **common,
        "model": info,
        "plan": asdict(plan),
        "threads": threads,
        "service_micro_batch_tokens": budget,
        "limit": {
            **asdict(limit),
            "gpu_peak_bytes": limit_peak,
            "parallel_forwards": parallel,
            "by_forwards_at_once": {str(n): round(rate, 1) for n, rate in by_layout.items()},
            "single_text_p50_ms": round(single_ms, 2),
            "at_a_time": {
                "texts": grouped.texts,
                "texts_per_s": round(grouped.texts_per_s, 1),
                "all_sorted_texts_per_s": round(grouped.all_sorted_texts_per_s, 1),
                "half_texts": halved.texts,
                "half_texts_per_s": round(halved.texts_per_s, 1),
            },
        },
    }
    # Reported as each section ends: a run stopped later (a GPU machine's time ran out) keeps
    # the figures measured so far; the whole report replaces them at the end.
    write_reports({**base, "partial": "stopped before the service runs"}, args.out)

    def measured(part: dict[str, Any]) -> None:
        write_reports({**base, **part, "partial": "stopped before the naive app's runs"}, args.out)

    alone_ms = partial(single_text_ms, model, texts)
    service_runs, naive_runs, half, profiled = asyncio.run(
        serve_and_measure(
            args, plan, texts, model_path, threads, budget, on_gpu, alone_ms, measured
        )
    )
    doc = {**base, "runs": service_runs + naive_runs, "half_load": half, "profile": profiled}
    if args.no_overhead:
        return {**doc, "created": _now()}
    # Reported now too: a run stopped in the overhead section (a GPU machine's time ran out)
    # keeps the figures above; the whole report replaces it at the end.
    write_reports({**doc, "partial": "stopped before the overhead section"}, args.out)
    return {**doc, "overhead": _overhead(args, texts), "created": _now()}


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %Z")


def _overhead(args: argparse.Namespace, texts: list[str]) -> dict[str, Any]:
    """The tiny-model overhead section, in a Ray of its own (nothing else deployed)."""
    from service.backends import resolve_backend
    from service.model import resolve_device

    plan = overhead.QUICK if args.quick else overhead.FULL
    backend = args.overhead_backend
    if backend == "auto":  # what the real model runs on here, as the service would pick it
        real, _ = resolve_backend(args.backend, args.model_path, resolve_device(args.device))
        backend = tinymodel.overhead_backend(real)
    print(
        f"overhead: tiny model ({backend}), clients {plan.levels}, {plan.seconds} s each ...",
        flush=True,
    )
    return overhead.run(
        args.model_path,
        texts,
        plan,
        args.ingress,
        args.ingress_replicas,
        args.device,
        args.dtype,
        args.overhead_layers,
        backend,
        args.client_processes,
    )


def main(argv: list[str] | None = None) -> int:
    """Parse flags, measure, print the table and write the reports."""
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench", description=__doc__)
    parser.add_argument("--model-path", type=Path, default=Path("models/default"))
    parser.add_argument("--out", type=Path, default=Path("results/bench"))
    parser.add_argument("--quick", action="store_true", help="a few seconds, for tests")
    parser.add_argument(
        "--profile-s",
        type=not_negative,
        default=0.0,
        help="after the service runs, py-spy on its model and ingress replicas for this long at "
        "the top single-text level (profile-*.txt beside the report; loadtest.profile)",
    )
    parser.add_argument("--texts", type=count, help="texts in the corpus (default by plan)")
    parser.add_argument("--corpus", help="file with one text per line (default: generated)")
    parser.add_argument("--threads", type=count, help="torch threads (default: all cores)")
    parser.add_argument("--micro-batch-tokens", type=count, help="service budget (default: best)")
    parser.add_argument(
        "--ingress",
        choices=serving.INGRESSES,
        default="haproxy",
        help="HAProxy with direct ingress (Ray Serve's high-throughput mode), or Ray's proxy",
    )
    parser.add_argument(
        "--ingress-replicas",
        type=count,
        default=serving.default_ingress_replicas(),
        help="HTTP ingress replicas (default: one per core the model replica leaves free)",
    )
    parser.add_argument(
        "--calls-in-flight",
        type=count,
        help="model calls each ingress replica keeps in flight (default: the service's auto; "
        "the RayService sets 2)",
    )
    parser.add_argument(
        "--client-processes",
        type=count,
        default=clients.default_processes(),
        help="load-generator processes for the closed-loop runs (default: one per four cores, "
        "at most four; one below eight cores). One asyncio client costs ~0.12 ms of CPU a "
        "request: a core at 8,000 requests/s",
    )
    parser.add_argument(
        "--overhead-only", action="store_true", help="only the tiny-model overhead run"
    )
    parser.add_argument(
        "--no-overhead",
        action="store_true",
        help="leave the tiny-model overhead run out (`make gpu-bench` does: its 8 minutes go to "
        "the real model)",
    )
    parser.add_argument(
        "--overhead-layers",
        type=count,
        default=tinymodel.LAYERS,
        help="layers of the overhead model (12: a launch-bound forward, like a GPU's)",
    )
    parser.add_argument(
        "--overhead-backend",
        choices=("auto", *tinymodel.BACKENDS),
        default="auto",
        help="the overhead model's backend (auto: onnx where the real model runs on ONNX "
        "Runtime here, else torch)",
    )
    parser.add_argument("--device", type=device, default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--dtype", choices=DTYPES, default="auto")
    parser.add_argument(
        "--backend",
        choices=("auto", *BACKENDS),
        default=os.environ.get("SENTIMENT_BACKEND", "auto"),
        help="torch, onnx, onnx-int8, tensorrt or auto, for the limit and the service",
    )
    parser.add_argument(
        "--torch-compile",
        choices=COMPILE_MODES,
        default=os.environ.get("SENTIMENT_TORCH_COMPILE", "auto"),
        help="torch.compile the torch backend, for the limit and the service (reduce-overhead: "
        "CUDA graphs on a GPU)",
    )
    parser.add_argument(
        "--synthetic-bert-base",
        action="store_true",
        help="time a BERT-base-sized random model with the model's tokenizer (GPU sizing)",
    )
    args = parser.parse_args(argv)
    if args.overhead_only and args.no_overhead:
        parser.error("--overhead-only and --no-overhead leave nothing to run")
    if args.calls_in_flight is not None and args.calls_in_flight > 64:
        parser.error("--calls-in-flight must be between 1 and 64")
    if args.corpus:
        try:  # read again by the run: a bad file is a usage error now, not a traceback later
            corpus.load(args.corpus, 0)
        except ValueError as exc:
            parser.error(f"--corpus {exc}")
    check_model_path(parser, args.model_path)
    results = run(args)
    table = write_reports(results, args.out)
    print("\n" + table)
    plot = "" if args.overhead_only else " and bench.png"
    print(f"wrote {args.out}/bench.json, bench.md{plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
