"""`make soak` end to end, briefly: the real service, Locust's soak shape, RSS samples."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.lifecycle import listeners

pytestmark = pytest.mark.slow


def test_short_soak_reports_every_server_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak"
    command = [sys.executable, "-m", "loadtest.soak", "--model-path", str(tiny_model_dir)]
    command += ["--minutes", "0.15", "--users", "2", "--warmup-s", "2", "--interval-s", "1"]
    # Growth over 9 s of a tiny model says nothing; the 10-minute run is the measurement.
    command += ["--max-growth", "100", "--out", str(out)]
    # Two tiers, so both replica roles are sampled and the serve command's two-application
    # path runs end to end (on a small CPU machine it would pick the co-located layout, which
    # test_serve_cli.py covers).
    env = {**os.environ, "SENTIMENT_LAYOUT": "two-tier"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((out / "soak.json").read_text())
    assert doc["requests"] > 0 and doc["failures"] == 0
    processes = doc["rss"]["processes"]
    roles = " ".join(processes)
    for role in ("SentimentModel", "SentimentIngress", "raylet", "haproxy"):
        assert role in roles, roles
    assert all(p["max_mib"] >= p["end_mib"] > 0 for p in processes.values())
    assert len(doc["series"]) >= 3
    assert "| **total (processes alive at the end)** |" in done.stdout
    assert doc["service_exit"] == 0  # SIGTERM stopped it cleanly


def test_a_soak_stopped_by_sigterm_stops_the_service_it_started(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The service runs in a session of its own (its Ctrl-C is not the soak's), so a soak that
    a SIGTERM ended outright (`timeout`, a job's end) left it serving for good."""
    out = tmp_path / "soak"
    command = [sys.executable, "-m", "loadtest.soak", "--model-path", str(tiny_model_dir)]
    proc = subprocess.Popen([*command, "--minutes", "5", "--users", "1", "--out", str(out)])
    try:
        log, deadline = out / "service.log", time.monotonic() + 300
        while not log.is_file() or "Ctrl-C stops it" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.5)
        port = int(re.findall(r"http://127\.0\.0\.1:(\d+)/healthz", log.read_text())[0])
        assert listeners(port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=180) == 128 + signal.SIGTERM
        assert "stopped" in log.read_text()  # drained and stopped, not killed
        assert listeners(port) == {}
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _serving(tiny_model_dir):  # a failure must not leave the service running
            os.kill(pid, signal.SIGTERM)


def _serving(model: Path) -> list[int]:
    """Pids of `python -m service serve` processes serving `model`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in args and str(model).encode() in args:
            found.append(int(entry))
    return found
