"""Peak-traffic rehearsal of the sentiment service with Locust.

    locust -f loadtest/locustfile.py --headless --host http://127.0.0.1:8000 --shape spike \
        --slo-p99-ms 500 --metrics-url http://127.0.0.1:8080/metrics

Every flag below is also an environment variable (LOADTEST_*). Users send review texts of mixed
length, some requests single-text and some multi-text, in the traffic shape chosen with
--shape. At the end it writes summary.json / summary.md to --out (client and server figures,
the SLO verdict, capacity for a step run) and exits 3 when the SLO is missed, 2 when no service
answers. Runs distributed unchanged (--master / --worker): workers ship their per-second
figures to the master with every stats report.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import gevent
from locust import FastHttpUser, LoadTestShape, events, task
from locust.env import Environment
from locust.exception import StopUser
from locust.runners import WorkerRunner

from loadtest import corpus, shapes
from loadtest.capacity import ASSUMED_ONE, capacity, replica_count, step_results
from loadtest.flagtypes import COUNT, NOT_NEGATIVE, POSITIVE, SHARE, number
from loadtest.scrape import ServerWatch, not_ready
from loadtest.summary import slo_verdict, write
from loadtest.timeline import Timeline

log = logging.getLogger("rehearsal")
TIMELINE = Timeline()
STATE: dict[str, Any] = {"sent": 0, "start": None, "texts": None, "watch": None}
EXIT_NO_SERVICE, EXIT_SLO_MISSED = 2, 3


@events.init_command_line_parser.add_listener
def _flags(parser: Any) -> None:
    def add(flag: str, env: str, **kw: Any) -> None:
        parser.add_argument(flag, env_var=f"LOADTEST_{env}", **kw)

    add("--shape", "SHAPE", choices=shapes.SHAPES, default="steady", help="traffic shape")
    add("--base-users", "BASE_USERS", type=COUNT, default=8, help="users at baseline / per step")
    add("--duration-s", "DURATION_S", type=POSITIVE, default=60.0, help="steady/spike length")
    add("--ramp-rate", "RAMP_RATE", type=POSITIVE, default=10.0, help="users started per second")
    add("--spike-factor", "SPIKE_FACTOR", type=number(float, 1), default=5.0, help="N x base")
    add("--spike-at-s", "SPIKE_AT_S", type=NOT_NEGATIVE, default=None, help="default: 1/3 in")
    add("--spike-hold-s", "SPIKE_HOLD_S", type=POSITIVE, default=None, help="default: 1/3 of run")
    add("--step-s", "STEP_S", type=POSITIVE, default=20.0, help="length of each step")
    add("--steps", "STEPS", type=COUNT, default=5, help="number of steps")
    add("--soak-s", "SOAK_S", type=POSITIVE, default=1800.0, help="soak length")
    add("--multi-ratio", "MULTI_RATIO", type=SHARE, default=0.3, help="share of multi-text")
    add("--texts-per-request", "TEXTS_PER_REQUEST", type=COUNT, default=16, help="multi size")
    add("--think-ms", "THINK_MS", type=NOT_NEGATIVE, default=50.0, help="mean pause, ms")
    add("--corpus", "CORPUS", default="", help="file, one text per line (default: generated)")
    add("--max-requests", "MAX_REQUESTS", type=COUNT, default=1_000_000, help="per process")
    add("--slo-p99-ms", "SLO_P99_MS", type=POSITIVE, default=500.0, help="p99 latency SLO")
    add("--slo-error-ratio", "SLO_ERROR_RATIO", type=SHARE, default=0.01, help="error SLO")
    add("--metrics-url", "METRICS_URL", default="", help="comma-separated /metrics URLs")
    add("--scrape-interval-s", "SCRAPE_INTERVAL_S", type=POSITIVE, default=5.0, help="scrapes")
    add("--out", "OUT", default="results/loadtest", help="folder for summary.json/.md")
    add("--peak-texts-per-s", "PEAK_TEXTS_PER_S", type=POSITIVE, default=None, help="to plan for")
    add(
        "--headroom",
        "HEADROOM",
        type=number(float, 0, 1, low_open=True),
        default=0.7,
        help="plan at this utilisation",
    )
    add(
        "--replicas",
        "REPLICAS",
        type=number(int, 0),
        default=0,
        help="replicas serving (0: metrics)",
    )


def shape_config(options: Any) -> shapes.ShapeConfig:
    """The shape knobs from Locust's parsed options."""
    return shapes.ShapeConfig(
        shape=options.shape,
        base_users=options.base_users,
        duration_s=options.duration_s,
        spawn_rate=options.ramp_rate,
        spike_factor=options.spike_factor,
        spike_at_s=options.spike_at_s,
        spike_hold_s=options.spike_hold_s,
        step_s=options.step_s,
        steps=options.steps,
        soak_s=options.soak_s,
    )


class Rehearsal(LoadTestShape):
    """Users over time from --shape; the run ends when the shape does."""

    def tick(self) -> tuple[int, float] | None:
        assert self.runner is not None
        return shapes.tick(
            shape_config(self.runner.environment.parsed_options), self.get_run_time()
        )


def _texts(options: Any) -> list[str]:
    if STATE["texts"] is None:
        STATE["texts"] = corpus.load(options.corpus or None, 2000)
    texts: list[str] = STATE["texts"]
    return texts


class Shopper(FastHttpUser):
    """A storefront backend classifying reviews; backs off as told by Retry-After."""

    def wait_time(self) -> float:
        return random.uniform(0, 2 * self.environment.parsed_options.think_ms / 1000)

    @task
    def classify(self) -> None:
        options = self.environment.parsed_options
        if STATE["sent"] >= options.max_requests:
            raise StopUser()
        STATE["sent"] += 1
        texts = _texts(options)
        n = options.texts_per_request if random.random() < options.multi_ratio else 1
        batch = random.sample(texts, min(n, len(texts)))
        body = {"texts": batch} if n > 1 else {"text": batch[0]}
        with self.client.post(
            "/v1/classify",
            json=body,
            name=f"classify x{n}",
            context={"texts": len(batch)},
            catch_response=True,
        ) as response:
            if response.status_code == 200:
                results = json.loads(response.content or b"{}").get("results", [])
                if len(results) != len(batch):
                    response.failure(f"{len(results)} results for {len(batch)} texts")
                return
            reason = f"{response.status_code}: {(response.text or '')[:120]}"
            response.failure(reason)
            if response.status_code == 429:
                retry = float(response.headers.get("Retry-After") or 1)
                gevent.sleep(min(retry, 5.0))


@events.request.add_listener
def _record(
    response_time: float,
    context: dict[str, Any],
    exception: BaseException | None,
    response: Any = None,
    **_: Any,
) -> None:
    status = getattr(response, "status_code", 0)
    TIMELINE.record(
        time.time(), response_time, context.get("texts", 1), exception is None, status == 429
    )


@events.report_to_master.add_listener
def _ship(client_id: str, data: dict[str, Any]) -> None:
    data["rehearsal_timeline"] = TIMELINE.drain()


@events.worker_report.add_listener
def _gather(client_id: str, data: dict[str, Any]) -> None:
    TIMELINE.merge(data.get("rehearsal_timeline", {}))


@events.init.add_listener
def _prepare(environment: Environment, **_: Any) -> None:
    options: Any = environment.parsed_options
    if options is None:
        return
    for path in (getattr(options, "csv_prefix", None), getattr(options, "html_file", None)):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)


@events.test_start.add_listener
def _start(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner):
        return
    options: Any = environment.parsed_options
    problem = not_ready(environment.host or "")
    if problem:
        log.error(
            "no ready service at %s (%s). Start one with `make serve`, or pass --host.",
            environment.host,
            problem,
        )
        environment.process_exit_code = EXIT_NO_SERVICE
        gevent.spawn_later(0.1, environment.runner.quit)  # type: ignore[union-attr]
        return
    STATE["start"] = time.time()
    urls = [u.strip() for u in options.metrics_url.split(",") if u.strip()]
    if urls:
        watch = ServerWatch(urls)
        STATE["watch"] = watch

        def scrape_forever() -> None:
            while True:
                watch.sample()
                gevent.sleep(options.scrape_interval_s)

        STATE["scraper"] = gevent.spawn(scrape_forever)


@events.quitting.add_listener
def _finish(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner) or STATE["start"] is None:
        return
    options: Any = environment.parsed_options
    watch: ServerWatch | None = STATE["watch"]
    if watch is not None:
        STATE["scraper"].kill()
        watch.sample()
    stats = environment.stats.total
    elapsed = max(1e-9, time.time() - STATE["start"])
    everything = TIMELINE.window(0, float("inf"))
    requests = stats.num_requests
    error_ratio = stats.num_failures / requests if requests else 1.0
    p99 = stats.get_response_time_percentile(0.99) or 0.0
    misses = slo_verdict(p99, error_ratio, options.slo_p99_ms, options.slo_error_ratio)
    if not requests:
        misses.append("no request was answered")
    server = watch.summary() if watch else {"available": False, "reason": "no --metrics-url"}
    doc: dict[str, Any] = {
        "shape": options.shape,
        "host": environment.host,
        "options": {k: v for k, v in vars(options).items() if isinstance(v, (int, float, str))},
        "client": {
            "requests": requests,
            "texts": everything.texts,
            "texts_per_s": round(everything.texts / elapsed, 2),
            "failures": stats.num_failures,
            "rejected": everything.rejected,
            "error_ratio": round(error_ratio, 5),
            "p50_ms": stats.get_response_time_percentile(0.5) or 0.0,
            "p95_ms": stats.get_response_time_percentile(0.95) or 0.0,
            "p99_ms": p99,
            "seconds": round(elapsed, 1),
        },
        "server": server,
        "slo": {"p99_ms": options.slo_p99_ms, "error_ratio": options.slo_error_ratio},
    }
    doc["slo"]["misses"] = misses
    steps = cap = None
    if options.shape == "step":
        plan = shapes.steps(shape_config(options))
        steps = step_results(
            TIMELINE, STATE["start"], plan, options.slo_p99_ms, options.slo_error_ratio
        )
        replicas, source = replica_count(options.replicas, server.get("replicas"))
        if source == ASSUMED_ONE:
            log.warning("capacity per replica %s", source)
        cap = capacity(steps, replicas, options.peak_texts_per_s, options.headroom, source)
    text = write(Path(options.out), doc, steps, cap)
    print("\n" + text, flush=True)
    environment.process_exit_code = EXIT_SLO_MISSED if misses else 0
    log.info("summary written to %s", os.path.join(options.out, "summary.md"))
