"""`python -m service serve`: start Ray (or join a cluster), deploy, say where everything is,
and on a signal drain and stop so that nothing is left holding the ports. Ray is imported
only here, so `probe` and `export` start without it."""

from __future__ import annotations

import os
import signal
import sys

from service import startfail
from service.local import local_layout, local_threads
from service.settings import Settings


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
            context = ray.init(address=address)
        except ConnectionError as exc:  # something answers there, but not a Ray cluster
            print(f"error: {exc}", file=sys.stderr)
            return 2
    else:
        # "local" always starts a fresh instance rather than joining one found on the machine.
        context = ray.init(
            address="local", include_dashboard=False, _metrics_export_port=settings.metrics_port
        )
    # Replicas log to files only (Ray's high-throughput mode keeps them off the terminal);
    # a Ray Client context (ray://) has no session directory here to point at.
    session = getattr(context, "address_info", {}).get("session_dir")
    where = ", on each node" if address else ""
    logs = f"  logs      {session}/logs/serve/  (a file per replica{where})\n" if session else ""
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
        _stop(settings, joined=bool(address))
        return 1
    host = f"[{settings.host}]" if ":" in settings.host else settings.host  # IPv6, in a URL
    base = f"http://{host}:{settings.port}"
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
        f"{logs}"
        "Ctrl-C stops it; requests in flight finish first.",
        flush=True,
    )
    stop.wait()
    gcs = getattr(context, "address_info", {}).get("gcs_address", "")
    if not address and gcs and startfail.unreachable(gcs) is not None:
        # The signal went to the whole process group (`timeout`, `kill -- -PGID`, systemd),
        # whose Ray daemons died with it: nothing is left to drain, and any call into Ray
        # (ray.shutdown() included) would wait a minute for the GCS, then fail.
        print("shutting down: Ray stopped with this process group; nothing to drain", flush=True)
        lifecycle.stop_listeners(settings.port)
        print("stopped", flush=True)
        os._exit(0)
    print("shutting down: draining requests in flight ...", flush=True)
    _drain_and_stop(settings, joined=bool(address))
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
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{settings.port}{settings.route_prefix.rstrip('/')}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            ready = json.load(response)
    except (OSError, ValueError) as exc:
        return f"unknown: {url} did not answer ({exc})"
    return f"{ready.get('backend')} ({ready.get('backend_reason')})"


def _drain_and_stop(settings: Settings, joined: bool) -> None:
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
    if settings.haproxy and not joined:
        # A soft stop: HAProxy closes its listener (new connections are refused, which a load
        # balancer retries elsewhere) and finishes the connections it holds.
        lifecycle.stop_listeners(settings.port, first=signal.SIGUSR1)
    _stop(settings, joined)


def _stop(settings: Settings, joined: bool) -> None:
    """Stop Serve and Ray, and any HAProxy left holding the port; on a cluster this command
    joined (`--address`), only remove its own applications: Serve, its proxies and the
    cluster serve others too."""
    import ray
    from ray import serve

    from service import lifecycle
    from service.deployment import model_app_name

    if joined:
        names = [settings.app_name]
        if settings.layout != "colocated":
            names.append(model_app_name(settings))
        for name in names:  # the ingress first: nothing calls the model after it
            serve.delete(name)
        ray.shutdown()  # disconnects this driver; the cluster stays
        return
    serve.shutdown()  # type: ignore[no-untyped-call]
    ray.shutdown()
    # A reloaded HAProxy can outlive Ray and keep the port; the next start could not bind it.
    leftovers = lifecycle.stop_listeners(settings.port)
    if leftovers:
        print(f"stopped HAProxy processes left holding port {settings.port}: {leftovers}")
