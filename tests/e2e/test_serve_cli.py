"""`python -m service serve` (what `make serve` runs) as a real process: it serves behind
HAProxy (Ray's high-throughput ingress, the default), exports metrics, on SIGTERM finishes the
requests in flight before exiting, and leaves its port free."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from service.lifecycle import listeners
from tests.net import free_port

pytestmark = pytest.mark.slow


def wait_ready(url: str, proc: subprocess.Popen[str], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "server exited early"
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise AssertionError(f"{url} not ready within {timeout}s")


def send_until_refused(url: str, limit: int = 5000) -> list[requests.Response]:
    """One request after another until the server stops accepting connections."""
    answers: list[requests.Response] = []
    with requests.Session() as session:
        for i in range(limit):
            try:
                answers.append(session.post(url, json={"text": f"late {i}"}, timeout=30))
            except requests.ConnectionError:
                break
    return answers


def replica_lines(banner: Path, deployment: str, timeout: float = 30) -> str:
    """What the running service's `deployment` replicas have written to their log files, in
    the folder its banner names."""
    deadline = time.monotonic() + timeout
    while not (found := re.search(r"^  logs +(\S+)", banner.read_text(), re.MULTILINE)):
        assert time.monotonic() < deadline, "the banner names no logs folder"
        time.sleep(0.5)
    logs = Path(found[1]).glob(f"replica_*_{deployment}_*.log")
    return "".join(path.read_text(errors="replace") for path in logs)


def serve_env(port: int, metrics_port: int) -> dict[str, str]:
    return {
        **os.environ,
        "SENTIMENT_PORT": str(port),
        "SENTIMENT_METRICS_PORT": str(metrics_port),
        "SENTIMENT_NUM_CPUS": "0.5",
        "SENTIMENT_MAX_SEQ_LEN": "32",
        "SENTIMENT_BATCH__MICRO_BATCH_TOKENS": "256",
        "SENTIMENT_BATCH__BATCH_WAIT_TIMEOUT_S": "1.0",  # keeps requests in flight for SIGTERM
        "RAY_metrics_report_interval_ms": "1000",
        # HAProxy's own stats and metrics listeners default to fixed ports (8404, 9101).
        "RAY_SERVE_HAPROXY_STATS_PORT": str(free_port()),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(free_port()),
    }


def test_serve_command_end_to_end(tiny_model_dir: Path, tmp_path: Path) -> None:
    port, metrics_port = free_port(), free_port()
    env = serve_env(port, metrics_port)
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--model-path", str(tiny_model_dir)],
        stdout=log, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/readyz", proc)
        response = requests.post(f"{base}/v1/classify", json={"texts": ["good", "bad"]}, timeout=30)
        assert response.status_code == 200 and len(response.json()["results"]) == 2
        # The replica's own lines reach its log file while it runs (Ray's high-throughput
        # mode held them back until 1,000 had come), and each answer names its request.
        assert "request limits now" in replica_lines(tmp_path / "serve.log", "SentimentIngress")
        assert response.headers["x-request-id"]
        mine = {"x-request-id": "order-42-review-7"}
        response = requests.post(
            f"{base}/v1/classify", json={"text": "ok"}, headers=mine, timeout=30
        )
        assert response.headers["x-request-id"] == "order-42-review-7"

        deadline = time.monotonic() + 60
        while (
            "ray_sentiment_texts_total"
            not in requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        ):
            assert time.monotonic() < deadline, "metrics never appeared on the metrics port"
            time.sleep(1)

        with ThreadPoolExecutor(max_workers=5) as pool:
            futures = [
                pool.submit(
                    requests.post, f"{base}/v1/classify", json={"text": f"t{i}"}, timeout=60
                )
                for i in range(4)
            ]
            time.sleep(0.4)
            proc.send_signal(signal.SIGTERM)
            later = pool.submit(send_until_refused, f"{base}/v1/classify")
            codes = [f.result().status_code for f in futures]
            after = later.result()
        assert codes == [200] * 4, "requests in flight at SIGTERM are answered"
        # Requests sent while it drains are refused with 503 (a load balancer retries those),
        # never 404, until the listener closes.
        assert {r.status_code for r in after} <= {200, 503}, [r.status_code for r in after]
        refused = [r for r in after if r.status_code == 503]
        assert refused, "no request met the drain"
        assert all(r.headers["Retry-After"] == "1" for r in refused)
        assert {r.json()["error"]["code"] for r in refused} == {"shutting_down"}
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    output = (tmp_path / "serve.log").read_text()
    assert "Sentiment service is up" in output and f"{base}/docs" in output
    assert "HAProxy" in output, "the default ingress is Ray's high-throughput mode"
    # No parity was measured for the tiny model: the banner says it serves torch, why, and
    # what measures it.
    assert "backend   torch (no measurement for cpu" in output
    assert "`make parity MODEL_DIR=" in output
    # Stopped means stopped: nothing (HAProxy included) still listens, and a new server can
    # bind the port (as servers do, with SO_REUSEADDR: closed connections linger in TIME_WAIT).
    assert listeners(port) == {}
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


def test_a_killed_server_leaves_nothing_listening(tiny_model_dir: Path, tmp_path: Path) -> None:
    """SIGKILL gives the server no chance to stop HAProxy or Ray's dashboard agent, which Ray
    does not tie to it; the watcher it started (service/reaper.py) ends them."""
    port, metrics_port = free_port(), free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "service", "serve", "--model-path", str(tiny_model_dir)],
        stdout=log, stderr=subprocess.STDOUT, text=True, env=serve_env(port, metrics_port),
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_ready(f"http://127.0.0.1:{port}/readyz", proc)
        assert listeners(port) and listeners(metrics_port)
        proc.kill()
        proc.wait(timeout=30)
        # The watcher says what it ended once it has ended all of it.
        deadline = time.monotonic() + 60
        while "exited without stopping" not in (tmp_path / "serve.log").read_text():
            assert time.monotonic() < deadline, (listeners(port), listeners(metrics_port))
            time.sleep(0.5)
        assert listeners(port) == {} and listeners(metrics_port) == {}
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group may be gone already
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_a_model_that_cannot_load_stops_the_command_with_the_reason(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The driver's checks pass (the files are there), the replica's load fails: the command
    says why in one line, not Ray's "Failed to update the deployments", and frees its ports."""
    broken = tmp_path / "model"
    shutil.copytree(tiny_model_dir, broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # an interrupted copy
    port, metrics_port = free_port(), free_port()
    done = subprocess.run(
        [sys.executable, "-m", "service", "serve", "--model-path", str(broken)],
        capture_output=True, text=True, env=serve_env(port, metrics_port), timeout=300,
        start_new_session=True,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    reason = done.stderr.split("error: the service did not start:\n")[1].splitlines()[0]
    assert reason.startswith("  SentimentIngress: SafetensorError: "), reason
    assert "Traceback" not in done.stderr
    assert listeners(port) == {} and listeners(metrics_port) == {}
