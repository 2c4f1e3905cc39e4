"""`python -m service serve | probe | export`: run the service locally, size its batches, or
export the model for ONNX Runtime / TensorRT."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from service import startfail
from service.auth import ApiKeys, KeysFileError
from service.cliargs import count, counts, size
from service.envcheck import settings_errors, unknown_variables
from service.local import local_layout, local_threads
from service.model import ModelLoadError, check_model_dir
from service.settings import Settings


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ["model_path", "host", "port", "metrics_port", "num_replicas", "ingress_replicas"]
    keys += ["layout"]
    keys += ["device", "dtype", "backend"]
    return {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}


def run_probe(settings: Settings, args: argparse.Namespace) -> int:
    """Load the model as the service would, measure the grid, print table and advice."""
    import json

    import torch

    from service import probe
    from service.model import SentimentModel, dtype_name

    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    try:
        model = SentimentModel.load(
            settings.model_path,
            settings.device,
            settings.dtype,
            settings.max_seq_len,
            allow_pickle=settings.allow_pickle,
            backend=settings.backend,
        )
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    base = probe.measure_cell(model, 1, 8, 1).peak_bytes  # model, runtime, one tiny forward
    cells = probe.run_grid(
        model, args.batch_sizes, args.lengths, args.repeats, args.max_cell_tokens
    )
    if not cells:
        print(
            f"error: no batch x length cell is within --max-cell-tokens {args.max_cell_tokens}"
            " (padded tokens): raise it, or give smaller --batch-sizes or --lengths",
            file=sys.stderr,
        )
        return 2
    limit = args.memory_limit or probe.available_memory(model.device)
    advice = probe.advise(cells, limit, base, args.typical_length)
    where = f"{model.name}, {dtype_name(model.dtype)} on {model.device}, {model.backend_name}"
    print(probe.format_report(cells, advice, where, args.typical_length))
    if args.json:
        document = {"model": model.name, "device": str(model.device), "advice": advice}
        document["cells"] = probe.cell_dicts(cells)
        with open(args.json, "w") as f:
            json.dump(document, f, indent=2, default=lambda o: o.__dict__)
    return 0


def serve_forever(settings: Settings, address: str | None) -> int:
    """Start Ray (or join `address`), deploy, print where things are, wait for a signal."""
    from service import drain, lifecycle, reaper

    lifecycle.trim_background()  # read by Ray at import time, here and in its workers
    if settings.haproxy:
        lifecycle.use_haproxy()
    import ray
    from ray import serve

    settings = settings.model_copy(update={"model_path": settings.model_path.resolve()})
    # Ray renices its workers to 15 so its own daemons stay responsive; for a service that is
    # the machine's main work, that lets any other process (a load generator, a build) starve
    # the replica and the proxy. Keep them at normal priority unless told otherwise.
    os.environ.setdefault("RAY_worker_niceness", "0")
    settings = settings.model_copy(update={"layout": local_layout(settings)})
    settings = settings.model_copy(update={"torch_threads": local_threads(settings)})
    if address:
        try:
            ray.init(address=address)
        except ConnectionError as exc:  # something answers there, but not a Ray cluster
            print(f"error: {exc}", file=sys.stderr)
            return 2
    else:
        # "local" always starts a fresh instance rather than joining one found on the machine.
        ray.init(
            address="local", include_dashboard=False, _metrics_export_port=settings.metrics_port
        )
    serve.start(http_options={"host": settings.host, "port": settings.port})
    if not address:
        # Only now that this server holds its ports: a start that failed because another
        # server held them must not end that server's listeners when it exits.
        reaper.spawn(settings.port, settings.metrics_port)
    drain.clear(settings.app_name)  # a joined cluster may remember an earlier run's drain
    try:
        _deploy(settings)
    except RuntimeError:
        failures = startfail.failed_deployments(serve.status())
        if not failures:
            raise
        lines = "\n".join(f"  {line}" for line in failures)
        print(f"error: the service did not start:\n{lines}", file=sys.stderr, flush=True)
        _stop(settings)
        return 1
    base = f"http://{settings.host}:{settings.port}"
    ingress = "HAProxy (Ray's high-throughput mode)" if settings.haproxy else "Ray's Python proxy"
    n = settings.num_replicas
    layout = (
        f"{'one replica' if n == 1 else f'{n} replicas'} running the model in-process "
        "(colocated layout)"
        if settings.layout == "colocated"
        else f"{settings.ingress_replicas} ingress replica(s) in front of "
        f"{settings.num_replicas} model replica(s)"
    )
    stop = lifecycle.StopSignals()  # before the banner tells anyone to press Ctrl-C
    print(
        f"\nSentiment service is up with model {settings.model_path.name!r}:\n"
        f'  classify  POST {base}/v1/classify   body {{"texts": ["..."]}}\n'
        f"  docs      {base}/docs\n"
        f"  health    {base}/healthz  {base}/readyz\n"
        f"  metrics   http://127.0.0.1:{settings.metrics_port}/metrics"
        "  (ray_serve_* and ray_sentiment_*)\n"
        f"  ingress   {ingress}, {layout}\n"
        f"  backend   {_backend_line(settings)}\n"
        "Ctrl-C stops it; requests in flight finish first.",
        flush=True,
    )
    stop.wait()
    print("shutting down: draining requests in flight ...", flush=True)
    _drain_and_stop(settings)
    print("stopped", flush=True)
    return 0


def _deploy(settings: Settings) -> None:
    """Deploy the service's applications and wait until they run (RuntimeError if not)."""
    from ray import serve

    from service.deployment import app_for, model_app_name, tiers

    if settings.layout == "colocated":
        serve.run(app_for(settings), name=settings.app_name, route_prefix=settings.route_prefix)
        return
    model_app, ingress_app = tiers(settings)
    # Submitted together, their replicas start side by side: an ingress replica waits for
    # the model in the background and answers 503 on /readyz until it has answered.
    serve.run_many(
        [
            serve.RunTarget(model_app, name=model_app_name(settings), route_prefix=None),
            serve.RunTarget(
                ingress_app, name=settings.app_name, route_prefix=settings.route_prefix
            ),
        ]
    )


def _backend_line(settings: Settings) -> str:
    """What the replica serves with and why, as its /readyz says (a fallback to torch, e.g.
    where no parity was measured on this device, must not go unnoticed)."""
    import json
    import urllib.request

    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    url = f"http://{host}:{settings.port}{settings.route_prefix.rstrip('/')}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            ready = json.load(response)
    except (OSError, ValueError) as exc:
        return f"unknown: {url} did not answer ({exc})"
    return f"{ready.get('backend')} ({ready.get('backend_reason')})"


def _drain_and_stop(settings: Settings) -> None:
    """Stop without a moment of 404: the ingress answers 503 to new requests while those in
    flight finish (service/drain.py), HAProxy stops listening, then Serve and Ray stop.
    Deleting the applications first would remove the route while clients still send."""
    from ray import serve

    from service import drain, lifecycle
    from service.deployment import INGRESS

    app = settings.app_name
    status = serve.status().applications.get(app)
    states = status.deployments[INGRESS].replica_states.items() if status else []
    running = sum(count for state, count in states if state == "RUNNING")
    drain.request(app)
    # Every request admitted is answered or expired by its deadline.
    done = drain.wait_drained(app, running, settings.request_timeout_s + 2 * drain.DRAIN_POLL_S)
    if done < running:
        print(f"{running - done} ingress replica(s) still had requests at their deadline")
    if settings.haproxy:
        # A soft stop: HAProxy closes its listener (new connections are refused, which a load
        # balancer retries elsewhere) and finishes the connections it holds.
        lifecycle.stop_listeners(settings.port, first=signal.SIGUSR1)
    _stop(settings)


def _stop(settings: Settings) -> None:
    """Stop Serve and Ray, and any HAProxy left holding the port."""
    import ray
    from ray import serve

    from service import lifecycle

    serve.shutdown()  # type: ignore[no-untyped-call]
    ray.shutdown()
    # A reloaded HAProxy can outlive Ray and keep the port; the next start could not bind it.
    leftovers = lifecycle.stop_listeners(settings.port)
    if leftovers:
        print(f"stopped HAProxy processes left holding port {settings.port}: {leftovers}")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run a command."""
    parser = argparse.ArgumentParser(prog="python -m service", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("serve", help="run the service locally (settings: SENTIMENT_* env)")
    run.add_argument("--model-path", help="HF sequence-classification model directory")
    run.add_argument("--host", help="HTTP bind address (default 127.0.0.1)")
    run.add_argument("--port", type=int, help="HTTP port (default 8000)")
    run.add_argument("--metrics-port", type=int, help="Ray metrics export port (default 8080)")
    run.add_argument("--num-replicas", type=int, help="model replicas (one per GPU)")
    run.add_argument("--ingress-replicas", type=int, help="HTTP ingress replicas (CPU)")
    run.add_argument(
        "--layout",
        choices=["two-tier", "colocated"],
        help="default: colocated on a CPU-only machine of up to 4 cores, else two-tier",
    )
    run.add_argument("--device", help="auto, cpu or cuda")
    run.add_argument("--address", help="join a running Ray cluster instead of starting one")
    probe = sub.add_parser("probe", help="peak memory and speed per batch x length")
    probe.add_argument("--model-path", help="model directory (default: SENTIMENT_MODEL_PATH)")
    probe.add_argument("--device", help="auto, cpu or cuda (default: SENTIMENT_DEVICE)")
    probe.add_argument("--dtype", help="auto, float32, float16, bfloat16")
    probe.add_argument(
        "--batch-sizes", type=counts, default="1,8,32,128", help="comma-separated rows"
    )
    probe.add_argument(
        "--lengths", type=counts, default="16,64,128,256", help="comma-separated tokens"
    )
    probe.add_argument("--repeats", type=count, default=2, help="timed forwards per cell")
    probe.add_argument("--max-cell-tokens", type=count, default=16384, help="skip bigger cells")
    probe.add_argument(
        "--memory-limit", type=size, help="e.g. 16GiB (default: GPU size or free RAM)"
    )
    probe.add_argument("--typical-length", type=count, default=64, help="tokens of a usual text")
    probe.add_argument("--json", help="also write the grid and advice to this file")
    probe.add_argument("--backend", help="torch, onnx, onnx-int8, tensorrt or auto")
    export = sub.add_parser("export", help="ONNX copies of the weights (ONNX Runtime, TensorRT)")
    export.add_argument("--model-path", help="model directory (default: SENTIMENT_MODEL_PATH)")
    export.add_argument("--format", choices=["onnx", "tensorrt"], default="onnx")
    export.add_argument("--quantize", choices=["int8"], help="also a dynamic INT8 graph (CPU)")
    export.add_argument(
        "--calibration",
        type=Path,
        help="INT8 smoothing texts, one per line (default: the model directory's calibration.txt)",
    )
    export.add_argument("--force", action="store_true", help="export even when up to date")
    args = parser.parse_args(argv)

    flags = _overrides(args)
    for warning in unknown_variables(os.environ):
        print(f"warning: {warning}", file=sys.stderr)
    try:
        settings = Settings(**flags)
        check_model_dir(settings.model_path, settings.allow_pickle)
        ApiKeys.load(settings.api_keys_file)  # a bad keys file stops here, not in a replica
    except (ModelLoadError, KeysFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # a bad SENTIMENT_* value or flag
        lines = "\n".join("  " + line for line in settings_errors(exc, flags))
        print(f"error: invalid settings:\n{lines}", file=sys.stderr)
        return 2
    if args.command == "probe":
        return run_probe(settings, args)
    if args.command == "export":
        from service.export import run_export

        return run_export(settings, args.format, args.quantize, args.force, args.calibration)
    if args.address and (why := startfail.unreachable(args.address)):
        print(f"error: {why}", file=sys.stderr)
        return 2
    return serve_forever(settings, args.address)


if __name__ == "__main__":
    sys.exit(main())
