"""Start the service and the naive baseline side by side on a local Ray, for benchmarks."""

from __future__ import annotations

import os
import shutil
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_state: dict[str, int] = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def pick_ingress(choice: str) -> str:
    """`auto` takes HAProxy when its binary is installed, else Ray's Python proxy."""
    if choice == "auto":
        return "haproxy" if shutil.which("haproxy") else "proxy"
    return choice


@contextmanager
def local_apps(
    model_path: Path,
    threads: int,
    budget: int,
    on_gpu: bool,
    device: str,
    dtype: str,
    ingress: str = "proxy",
) -> Iterator[dict[str, str]]:
    """Yield the classify URLs of the service and the naive app; tear everything down after.

    `ingress="haproxy"` starts Ray Serve in its high-throughput mode: HAProxy takes the HTTP
    port and forwards straight to each replica's own server (direct ingress), instead of Ray's
    Python proxy relaying every request as an actor call. Ray reads these switches from the
    environment when its processes start, so they are set before `ray.init`.
    """
    if ingress == "haproxy":
        os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "1"
        os.environ["RAY_SERVE_THROUGHPUT_OPTIMIZED"] = "1"
    import ray
    from ray import serve

    from loadtest.naive import NaiveClassifier
    from service.deployment import application
    from service.settings import Settings

    # Ray renices its workers to 15; the in-process limit runs at 0, so level the field.
    os.environ.setdefault("RAY_worker_niceness", "0")
    http_port, metrics_port = _free_port(), _free_port()
    _state["metrics_port"] = metrics_port
    ray.init(
        address="local",
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        _metrics_export_port=metrics_port,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        gpus = 0.5 if on_gpu else 0.0  # both apps share the one GPU of a bench machine
        settings = Settings(
            model_path=model_path.resolve(),
            device=device,
            dtype=dtype,  # type: ignore[arg-type]
            torch_threads=threads,
            num_gpus=gpus,
            batch={"micro_batch_tokens": budget},  # type: ignore[arg-type]
        )
        serve.run(application(settings), name="bench-service", route_prefix="/service")
        naive = NaiveClassifier.options(  # type: ignore[attr-defined]
            ray_actor_options={"num_cpus": 1, "num_gpus": gpus}
        ).bind(str(model_path.resolve()), threads, device, dtype)
        serve.run(naive, name="bench-naive", route_prefix="/naive")
        base = f"http://127.0.0.1:{http_port}"
        yield {"service": f"{base}/service/v1/classify", "naive": f"{base}/naive"}
    finally:
        serve.shutdown()  # type: ignore[no-untyped-call]
        ray.shutdown()


def gpu_peak_bytes() -> float:
    """The service replica's GPU memory peak as it exports it (0 on CPU)."""
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{_state['metrics_port']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "ray_sentiment_gpu_memory_peak_bytes"
    ]
    return max(values, default=0.0)
