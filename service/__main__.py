"""`python -m service serve | probe | export`: run the service locally, size its batches, or
export the model for ONNX Runtime / TensorRT."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from service import startfail
from service.auth import ApiKeys, KeysFileError
from service.chunking import WindowEncoder
from service.cliargs import count, counts, device, size
from service.envcheck import settings_errors, unknown_variables, unparsable_variable
from service.model import ModelLoadError, check_model_dir
from service.settings import DTYPES, Settings


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
    run.add_argument("--device", type=device, help="auto, cpu, cuda or cuda:N")
    run.add_argument("--address", help="join a running Ray cluster instead of starting one")
    probe = sub.add_parser("probe", help="peak memory and speed per batch x length")
    probe.add_argument("--model-path", help="model directory (default: SENTIMENT_MODEL_PATH)")
    probe.add_argument(
        "--device", type=device, help="auto, cpu, cuda or cuda:N (default: SENTIMENT_DEVICE)"
    )
    probe.add_argument("--dtype", choices=DTYPES, help="default: SENTIMENT_DTYPE")
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
        s = settings
        if why := WindowEncoder.check(s.model_path, s.max_seq_len, s.max_windows, s.window_overlap):
            raise ModelLoadError(why)
    except (ModelLoadError, KeysFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # a bad SENTIMENT_* value or flag
        lines = "\n".join("  " + line for line in settings_errors(exc, flags))
        print(f"error: invalid settings:\n{lines}", file=sys.stderr)
        return 2
    except SettingsError as exc:  # a nested setting's variable that is not JSON
        print(f"error: invalid settings:\n  {unparsable_variable(exc)}", file=sys.stderr)
        return 2
    if args.command == "probe":
        return run_probe(settings, args)
    if args.command == "export":
        from service.export import run_export

        return run_export(settings, args.format, args.quantize, args.force, args.calibration)
    if args.address and (why := startfail.unreachable(args.address)):
        print(f"error: {why}", file=sys.stderr)
        return 2
    if not args.address:  # a joined cluster's ports are its own
        taken = [
            startfail.cannot_listen(settings.host, settings.port, "--port"),
            startfail.cannot_listen("", settings.metrics_port, "--metrics-port"),
        ]
        if reasons := [why for why in taken if why]:
            print("\n".join(f"error: {why}" for why in reasons), file=sys.stderr)
            return 2
    from service.servecmd import serve_forever

    try:
        return serve_forever(settings, args.address)
    except KeyboardInterrupt:  # Ctrl-C before the service was up: Ray's exit hooks stop it
        print("\nstopped while starting", file=sys.stderr, flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
