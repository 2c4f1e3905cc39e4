"""`make soak`: the Locust soak shape against a service this command starts, with the
resident memory of every server process sampled throughout.

    python -m loadtest.soak --model-path models/default --minutes 10 --out results/soak

Starts `python -m service serve` on free ports (as `make serve` does), waits for /readyz,
runs Locust headless with `--shape soak` for the set time while sampling RSS, then stops the
service with SIGTERM. Writes soak.json (figures, the RSS time series, Locust's totals) and
prints a table. Exits 1 when a request failed or the total RSS grew more than --max-growth
after warm-up, 2 when the service or Locust could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from loadtest.ports import free_port
from loadtest.rss import Sampler, summarise, table
from loadtest.serving import sigterm_unwinds
from service.cliargs import check_model_path, count, not_negative, positive

LOCUSTFILE = Path(__file__).with_name("locustfile.py")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def start_service(model_path: Path, log: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """`python -m service serve` on free ports, in its own session; (process, URL, metrics)."""
    port, metrics = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    # HAProxy's stats and metrics listeners default to fixed ports another run may hold.
    env["RAY_SERVE_HAPROXY_STATS_PORT"] = str(free_port())
    env["RAY_SERVE_HAPROXY_METRICS_PORT"] = str(free_port())
    command = [sys.executable, "-m", "service", "serve", "--model-path", str(model_path)]
    command += ["--port", str(port), "--metrics-port", str(metrics)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics}/metrics"


def stop_service(proc: subprocess.Popen[bytes], timeout_s: float = 90.0) -> int:
    """SIGTERM (the service drains and stops Ray), then SIGKILL to its group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


def run_locust(url: str, metrics: str, seconds: float, users: int, out: Path) -> int:
    """Locust headless with the soak shape; its summary.json lands in `out`."""
    locust = Path(sys.executable).with_name("locust")
    command = [str(locust), "-f", str(LOCUSTFILE), "--headless", "--host", url]
    command += ["--shape", "soak", "--soak-s", str(seconds), "--base-users", str(users)]
    command += ["--out", str(out), "--metrics-url", metrics, "--csv", str(out / "locust")]
    # The soak judges errors and memory, not latency: no latency SLO decides its exit.
    command += ["--slo-p99-ms", "1e9", "--slo-error-ratio", "1"]
    with (out / "locust.log").open("wb") as log:
        return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False).returncode


def soak(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    """Run the whole soak; (the document written to soak.json, exit status)."""
    out: Path = args.out
    (out / "locust").mkdir(parents=True, exist_ok=True)
    proc, url, metrics = start_service(args.model_path, out / "service.log")
    try:
        deadline = time.monotonic() + args.start_timeout_s
        while not _ready(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                print(f"the service did not get ready; see {out / 'service.log'}", flush=True)
                return {"error": "service did not start"}, 2
            time.sleep(1)
        sampler = Sampler(proc.pid)
        stop = threading.Event()

        def sample_until_stopped() -> None:
            while not stop.is_set():
                sampler.sample()
                stop.wait(args.interval_s)

        thread = threading.Thread(target=sample_until_stopped, daemon=True)
        thread.start()
        seconds = args.minutes * 60
        status = run_locust(url, metrics, seconds, args.users, out / "locust")
        stop.set()
        thread.join()
        sampler.sample()
    finally:
        exit_code = stop_service(proc)
    client = {}
    summary_path = out / "locust" / "summary.json"
    if summary_path.is_file():
        client = json.loads(summary_path.read_text()).get("client", {})
    warmup = args.warmup_s if args.warmup_s is not None else min(120.0, seconds / 5)
    memory = summarise(sampler.samples, warmup)
    failures = int(client.get("failures", -1))
    growth = memory["total"]["growth_after_warmup"] if memory["total"] else None
    doc: dict[str, Any] = {
        "minutes": args.minutes,
        "users": args.users,
        "warmup_s": warmup,
        "interval_s": args.interval_s,
        "model_path": str(args.model_path),
        "requests": client.get("requests"),
        "texts": client.get("texts"),
        "failures": failures,
        "p50_ms": client.get("p50_ms"),
        "p99_ms": client.get("p99_ms"),
        "locust_exit": status,
        "service_exit": exit_code,
        "rss": memory,
        "series": [{"t": t, "rss": found} for t, found in sampler.samples],
    }
    if status not in (0, 3) or not client:
        return doc, 2
    return doc, 0 if failures == 0 and growth is not None and growth <= args.max_growth else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.soak", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--model-path", type=Path, required=True)
    parser.add_argument("--minutes", type=positive, default=10.0, help="length of the soak")
    parser.add_argument("--users", type=count, default=8, help="Locust users throughout")
    parser.add_argument("--interval-s", type=positive, default=5.0, help="between RSS samples")
    parser.add_argument(
        "--warmup-s", type=not_negative, help="default: a fifth of the run, 2 min at most"
    )
    parser.add_argument(
        "--max-growth", type=not_negative, default=0.05, help="allowed total growth"
    )
    parser.add_argument("--start-timeout-s", type=positive, default=300.0)
    parser.add_argument("--out", type=Path, default=Path("results/soak"))
    args = parser.parse_args(argv)
    check_model_path(parser, args.model_path)
    # The service runs in a session of its own, so only this process can stop it: a SIGTERM
    # (`timeout`, a job's end) must unwind through `soak`'s finally, not end this one outright.
    with sigterm_unwinds():
        doc, status = soak(args)
    (args.out / "soak.json").write_text(json.dumps(doc, indent=1))
    if "rss" in doc:
        print(table(doc["rss"]))
        total = doc["rss"]["total"] or {}
        print(
            f"\n{doc['minutes']:g} min, {doc['users']} users: {doc['requests']} requests, "
            f"{doc['failures']} failed; total RSS {total.get('after_warmup_mib')} MiB after "
            f"warm-up -> {total.get('end_mib')} MiB at the end "
            f"({total.get('growth_after_warmup', 0):+.1%}); written to {args.out / 'soak.json'}"
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
