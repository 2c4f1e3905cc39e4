"""The Locust rehearsal against the real service (tiny model): short, bounded runs.

Locust runs as its own process exactly as `make loadtest` runs it; the tests read the files it
leaves behind and its exit code (0 within the SLO, 3 when missed, 2 when nothing answers).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import Cluster, Deployed
from tests.net import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def locust(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "locust", "-f", "loadtest/locustfile.py", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def texts(tmp_path: Path) -> Path:
    """Short texts: the test app accepts at most 400 characters each."""
    path = tmp_path / "texts.txt"
    moods = ("great value, fast delivery", "broke within a week, avoid")
    path.write_text("\n".join(f"review {i}: {moods[i % 2]}" for i in range(50)))
    return path


def common(app: Deployed, texts: Path, out: Path) -> list[str]:
    mix = ["--texts-per-request", "4", "--multi-ratio", "0.5", "--think-ms", "20"]
    return ["--headless", "--host", app.url, "--corpus", str(texts), *mix, "--out", str(out),
            "--only-summary"]  # fmt: skip


def summary(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "summary.json").read_text())
    return doc


def test_step_rehearsal_reports_client_server_and_capacity(
    cluster: Cluster, main_app: Deployed, texts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "step"
    metrics = f"http://127.0.0.1:{cluster.metrics_port}/metrics"
    proc = locust(
        *common(main_app, texts, out),
        "--shape", "step", "--step-s", "4", "--steps", "2", "--base-users", "2",
        "--slo-p99-ms", "60000", "--metrics-url", metrics, "--scrape-interval-s", "1",
        "--peak-texts-per-s", "1000",
        "--csv", str(out / "locust"), "--html", str(out / "report.html"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (out / "locust_stats.csv").read_text().startswith("Type,Name")
    assert (out / "report.html").stat().st_size > 0
    doc = summary(out)
    client = doc["client"]
    assert client["requests"] > 0 and client["failures"] == 0
    assert client["texts"] > client["requests"]  # half the requests carry 4 texts
    server = doc["server"]
    assert server["available"] is True, server
    assert server["replicas"] >= 1 and server["texts_answered"] > 0
    assert [s["users"] for s in doc["steps"]] == [2, 4]
    assert doc["capacity"]["per_replica_texts_per_s"] > 0
    assert doc["capacity"]["replicas_needed"] >= 1
    assert doc["capacity"]["replicas_from"] == "the model replicas' metrics"
    assert "replica(s) (the model replicas' metrics)" in (out / "summary.md").read_text()


def test_an_impossible_slo_fails_the_run(main_app: Deployed, texts: Path, tmp_path: Path) -> None:
    out = tmp_path / "slo"
    proc = locust(
        *common(main_app, texts, out),
        "--shape", "steady", "--duration-s", "3", "--base-users", "2", "--slo-p99-ms", "0.001",
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    doc = summary(out)
    assert doc["client"]["failures"] == 0
    assert any("p99 latency" in miss for miss in doc["slo"]["misses"])


def test_distributed_master_and_worker_merge_their_figures(
    main_app: Deployed, texts: Path, tmp_path: Path
) -> None:
    out, port = tmp_path / "dist", free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", "loadtest/locustfile.py", "--worker",
         "--master-host", "127.0.0.1", "--master-port", str(port)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        proc = locust(
            *common(main_app, texts, out),
            "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--expect-workers", "1", "--shape", "steady", "--duration-s", "4",
            "--base-users", "2", "--slo-p99-ms", "60000",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert worker.wait(timeout=30) == 0
    finally:
        worker.kill()
    client = summary(out)["client"]
    # Texts are counted on the worker and reach the master only through the reports.
    assert client["requests"] > 0 and client["texts"] >= client["requests"]


def test_no_service_exits_2_with_a_hint(tmp_path: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    out = tmp_path / "none"
    proc = locust("--headless", "--host", host, "--duration-s", "5", "--out", str(out))
    assert proc.returncode == 2
    assert "make serve" in proc.stderr
