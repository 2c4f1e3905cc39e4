"""`python -m service serve`: run the service on a local Ray instance."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from service.model import ModelLoadError, check_model_dir
from service.settings import Settings


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("model_path", "host", "port", "metrics_port", "num_replicas", "device")
    return {k: getattr(args, k) for k in keys if getattr(args, k) is not None}


def serve_forever(settings: Settings, address: str | None) -> int:
    """Start Ray (or join `address`), deploy, print where things are, wait for a signal."""
    import ray
    from ray import serve

    from service.deployment import application

    settings = settings.model_copy(update={"model_path": settings.model_path.resolve()})
    if address:
        ray.init(address=address)
    else:
        # "local" always starts a fresh instance rather than joining one found on the machine.
        ray.init(
            address="local", include_dashboard=False, _metrics_export_port=settings.metrics_port
        )
    serve.start(http_options={"host": settings.host, "port": settings.port})
    serve.run(application(settings), name=settings.app_name, route_prefix=settings.route_prefix)
    base = f"http://{settings.host}:{settings.port}"
    print(
        f"\nSentiment service is up with model {settings.model_path.name!r}:\n"
        f'  classify  POST {base}/v1/classify   body {{"texts": ["..."]}}\n'
        f"  docs      {base}/docs\n"
        f"  health    {base}/healthz  {base}/readyz\n"
        f"  metrics   http://127.0.0.1:{settings.metrics_port}/metrics"
        "  (ray_serve_* and ray_sentiment_*)\n"
        "Ctrl-C stops it; requests in flight finish first.",
        flush=True,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    print("shutting down: draining requests in flight ...", flush=True)
    # Deleting the app first lets replicas finish their requests while the proxy still
    # carries the answers back; serve.shutdown() alone tears the proxy down with them.
    serve.delete(settings.app_name)
    serve.shutdown()  # type: ignore[no-untyped-call]
    ray.shutdown()
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
    run.add_argument("--num-replicas", type=int, help="replicas (one per GPU on GPU nodes)")
    run.add_argument("--device", help="auto, cpu or cuda")
    run.add_argument("--address", help="join a running Ray cluster instead of starting one")
    args = parser.parse_args(argv)

    try:
        settings = Settings(**_overrides(args))
        check_model_dir(settings.model_path)
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # pydantic's ValidationError: a bad SENTIMENT_* value
        print(f"error: invalid settings:\n{exc}", file=sys.stderr)
        return 2
    return serve_forever(settings, args.address)


if __name__ == "__main__":
    sys.exit(main())
