"""`make chaos`: SIGKILL a replica while clients send requests, and report what they saw.

    python -m loadtest.chaos --model-path models/default --replicas 2 1 --out results/chaos
    python -m loadtest.chaos --model-path models/default --kill ingress --replicas 2
    python -m loadtest.chaos --model-path models/default --kill ingress --replicas 2 \
        --client http.client

For each count of replicas of the deployment `--kill` names (the model by default; the other
deployment has one replica): the service in two tiers on a local Ray with HAProxy ingress (as
`make bench` runs it), `--clients` closed-loop clients sending one text per request (after a
429 or 503 they wait for its Retry-After), and after `--before-s` the busiest replica process
of that deployment SIGKILLed. The load goes on until Ray has every replica running again and
answers are 200 again (at least `--after-s`, at most `--max-after-s` past the kill). Writes
chaos.json (figures, per-second timeline) and chaos.md, and prints the table. Exits 1 when a
run with a replica left lost or failed a request, or a one-replica run never answered 200
again; 2 when the service could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from loadtest import corpus, cpu, scrape, serving
from loadtest.clientload import AsyncClients, Load, ThreadClients
from loadtest.httpload import bodies
from loadtest.outage import Request, figures, markdown, timeline
from loadtest.report import hardware
from service.cliargs import check_model_path, count, not_negative, positive

APP = "chaos"
MODEL = "SentimentModel"
DEPLOYMENTS = {"model": MODEL, "ingress": "SentimentIngress"}
RESENT = "ray_sentiment_resent_model_calls_total"
REJECTIONS = "ray_sentiment_rejections_total"


def replica_pids(app: str, deployment: str, root: int, proc: Path = cpu.PROC) -> list[int]:
    """Processes below `root` that are replicas of `deployment` in application `app` (Ray
    titles them `ray::ServeReplica:<app>:<deployment>`)."""
    stats = cpu.processes(proc)
    below = cpu.descendants({pid: s.ppid for pid, s in stats.items()}, root)
    title = f"ray::ServeReplica:{app}:{deployment}"
    # Ray appends the method an actor is running (`...:SentimentModel.infer`).
    return sorted(p for p in below if cpu.cmdline(p, proc).split(" ", 1)[0].split(".")[0] == title)


def _running(app: str, deployment: str) -> int | None:
    """Replicas of `deployment` Ray reports RUNNING (None: status unavailable)."""
    from ray import serve
    from ray.serve._private.common import ReplicaState

    try:
        status = serve.status().applications[app].deployments[deployment]
    except Exception:  # the controller is busy or the app is gone: no sample
        return None
    return int(status.replica_states.get(ReplicaState.RUNNING, 0))


class Watch:
    """Samples Ray's count of running replicas of one deployment in a thread (serve.status
    blocks)."""

    def __init__(self, app: str, deployment: str, t0: float, every_s: float = 0.2) -> None:
        self.app, self.deployment, self.t0, self.every_s = app, deployment, t0, every_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            running = _running(self.app, self.deployment)
            if running is not None:
                self.samples.append((time.perf_counter() - self.t0, running))
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def busiest(pids: list[int], window_s: float = 0.5, forwards: bool = True) -> int:
    """The replica that computed most in the last `window_s` (its forward threads, or with
    `forwards` False the whole process): the one that surely holds work (an idle one's death
    would test nothing)."""
    before = cpu.snapshot(os.getpid())
    time.sleep(window_s)
    after = cpu.snapshot(os.getpid())

    def ticks(sample: cpu.Sample | None) -> int:
        if sample is None:
            return 0
        return sample.forward_ticks if forwards else sample.ticks

    work = {pid: 0 for pid in pids}
    for key, sample in after.samples.items():
        if sample.pid in work:
            work[sample.pid] = ticks(sample) - ticks(before.samples.get(key))
    return max(pids, key=lambda pid: work[pid])


async def _kill_one(after_s: float, deployment: str, replicas: int, t0: float) -> tuple[int, float]:
    """SIGKILL the busiest replica process of `deployment` `after_s` from now; (its pid,
    when)."""
    await asyncio.sleep(after_s)
    pids = replica_pids(APP, deployment, os.getpid())
    if len(pids) != replicas:
        raise RuntimeError(f"expected {replicas} {deployment} replica processes, found {pids}")
    victim = await asyncio.to_thread(busiest, pids, 0.5, deployment == MODEL)
    os.kill(victim, signal.SIGKILL)
    kill = time.perf_counter() - t0
    print(f"  SIGKILLed {deployment} replica pid {victim} at {kill:.1f}s", flush=True)
    return victim, kill


async def rehearse(url: str, args: argparse.Namespace, replicas: int) -> dict[str, Any]:
    """The load, the kill and the wait for recovery; the figures."""
    payloads = bodies(corpus.generate(512, seed=11), 1)
    requests: list[Request] = []
    t0 = time.perf_counter()
    deployment = DEPLOYMENTS[args.kill]
    watch = Watch(APP, deployment, t0)
    kill = 0.0

    def recovered(now: float) -> bool:
        f = figures(requests, kill, watch.samples, replicas)
        back = f["ray"]["healthy_s"] is not None and (
            f["first_failure_s"] is None or f["resumed_s"] is not None
        )
        return now - kill >= args.after_s and back

    async def kill_and_recover() -> int:
        """SIGKILL the replica, then wait for recovery and `--settle-s` more; its pid."""
        nonlocal kill
        victim, kill = await _kill_one(args.before_s, deployment, replicas, t0)
        settle: float | None = None
        while (now := time.perf_counter() - t0) - kill < args.max_after_s:
            if settle is None and recovered(now):
                settle = now
            if settle is not None and now - settle >= args.settle_s:
                break
            await asyncio.sleep(0.5)
        return victim

    def more() -> bool:
        return len(requests) < int(args.max_requests)

    texts = [body for body, _ in payloads]
    kind = ThreadClients if args.client == "http.client" else AsyncClients
    clients = kind(Load(url, texts, args.clients, requests.append, more, args.client_timeout_s))
    clients.start(t0)
    try:
        victim = await kill_and_recover()
    finally:
        watch.stop()
        await clients.stop()
    return {
        "killed": deployment,
        "replicas": replicas,
        "clients": args.clients,
        "client": args.client,
        "killed_pid": victim,
        "kill_at_s": round(kill, 3),
        "figures": figures(requests, kill, watch.samples, replicas),
        "timeline": timeline(requests, kill),
        "running": [(round(t - kill, 2), n) for t, n in watch.samples],
    }


def scenario(args: argparse.Namespace, replicas: int) -> dict[str, Any]:
    """One rehearsal on a Ray of its own, torn down after."""
    from ray import serve

    from service.deployment import application

    deployment = DEPLOYMENTS[args.kill]
    settings = serving.service_settings(args.model_path, args.threads, "cpu", "auto", 1)
    # Two tiers always: a model replica's death is then survivable (its calls are resent).
    update: dict[str, Any] = {"ingress_calls_in_flight": args.calls_in_flight}
    update["layout"] = "two-tier"
    update["num_replicas" if args.kill == "model" else "ingress_replicas"] = replicas
    settings = settings.model_copy(update=update)
    cpus = settings.num_cpus * settings.num_replicas
    cpus += settings.ingress_num_cpus * settings.ingress_replicas
    # Ray exports metrics every 10 s by default; the resend count is read at the end.
    os.environ.setdefault("RAY_metrics_report_interval_ms", "2000")
    with serving.ray_serve("haproxy", cpus) as base:
        serve.run(application(settings), name=APP, route_prefix=f"/{APP}")
        deadline = time.monotonic() + args.start_timeout_s
        # /readyz answers once one replica does; the kill needs every one of them up.
        while scrape.not_ready(f"{base}/{APP}") or _running(APP, deployment) != replicas:
            if time.monotonic() > deadline:
                raise RuntimeError("the service did not get ready")
            time.sleep(1)
        print(
            f"{replicas} {args.kill} replica(s): {args.clients} {args.client} clients", flush=True
        )
        doc = asyncio.run(rehearse(f"{base}/{APP}/v1/classify", args, replicas))
        metrics = scrape.scrape(f"http://127.0.0.1:{serving.metrics_port()}/metrics")
        doc["resent_calls"] = scrape.total(metrics, RESENT, application=APP)
        # The service's own refusals by reason (Ray's queue bound answers 429 outside them).
        doc["rejections"] = scrape.by_label(metrics, REJECTIONS, "reason")
        return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.chaos", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--model-path", type=Path, required=True)
    parser.add_argument(
        "--kill", choices=sorted(DEPLOYMENTS), default="model", help="whose replica is killed"
    )
    parser.add_argument(
        "--replicas", type=count, nargs="+", default=[2, 1], help="of the deployment --kill names"
    )
    parser.add_argument("--clients", type=count, default=32)
    parser.add_argument(
        "--client",
        choices=["aiohttp", "http.client"],
        default="aiohttp",
        help="asyncio clients, or a thread of blocking keep-alive connection each",
    )
    parser.add_argument("--threads", type=count, default=1, help="torch threads per replica")
    parser.add_argument(
        "--calls-in-flight", type=count, default=2, help="per ingress (KubeRay's setting)"
    )
    parser.add_argument("--before-s", type=positive, default=10.0, help="load before the kill")
    parser.add_argument("--after-s", type=positive, default=15.0, help="least load after it")
    parser.add_argument("--settle-s", type=not_negative, default=5.0, help="load after recovery")
    parser.add_argument("--max-after-s", type=positive, default=300.0)
    parser.add_argument("--client-timeout-s", type=positive, default=30.0)
    parser.add_argument("--max-requests", type=count, default=200_000)
    parser.add_argument("--start-timeout-s", type=positive, default=300.0)
    parser.add_argument("--out", type=Path, default=Path("results/chaos"))
    args = parser.parse_args(argv)
    check_model_path(parser, args.model_path)
    args.out.mkdir(parents=True, exist_ok=True)
    scenarios: list[dict[str, Any]] = []
    for replicas in args.replicas:
        for attempt in (1, 2):
            try:
                scenarios.append(scenario(args, replicas))
                break
            except Exception as exc:  # on a busy machine Ray itself may fail to start
                print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
                if attempt == 2:
                    return 2
                import ray

                ray.shutdown()  # whatever half-started, so that the retry starts afresh
        _write(args, scenarios)  # what is measured is kept, whatever comes next
    print(markdown(scenarios))
    print(f"written to {args.out / 'chaos.json'} and chaos.md")
    return 1 if any(not _held(s) for s in scenarios) else 0


def _write(args: argparse.Namespace, scenarios: list[dict[str, Any]]) -> None:
    doc = {"hardware": hardware(), "model_path": str(args.model_path), "scenarios": scenarios}
    (args.out / "chaos.json").write_text(json.dumps(doc, indent=1))
    (args.out / "chaos.md").write_text(markdown(scenarios) + "\n")


def _held(scenario: dict[str, Any]) -> bool:
    """Two replicas: every request answered 200. One: nothing lost, and 200s came back."""
    f = scenario["figures"]
    if scenario["replicas"] > 1:
        return f["lost"] == 0 and set(f["statuses"]) == {"200"}
    return f["lost"] == 0 and (f["resumed_s"] is not None or f["first_failure_s"] is None)


if __name__ == "__main__":
    sys.exit(main())
